package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"go.yaml.in/yaml/v4"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// Extension types that typed_config may name; importing them registers
	// them so their Any payloads resolve.
	_ "github.com/cncf/xds/go/udpa/type/v1"
	_ "github.com/cncf/xds/go/xds/type/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	_ "google.golang.org/protobuf/types/known/structpb"
	_ "google.golang.org/protobuf/types/known/wrapperspb"
)

// Load reads and translates an envoy.yaml (or .json) file. Errors name the
// file, and where possible the line and field.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return Parse(data, path)
}

// Parse translates bootstrap YAML/JSON; name is used in error messages.
func Parse(data []byte, name string) (*Config, error) {
	if name == "" {
		name = "envoy.yaml"
	}
	bs, err := ParseBootstrap(data, name)
	if err != nil {
		return nil, err
	}
	cfg, err := translate(bs)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", name, err)
	}
	cfg.Path = name
	cfg.Bootstrap = bs
	return cfg, nil
}

// ParseBootstrap loads the file into Envoy's Bootstrap message the way
// Envoy does: YAML to JSON, JSON to proto with unknown fields rejected and
// enum names matched case-insensitively, then the proto's validation rules.
func ParseBootstrap(data []byte, name string) (*bootstrapv3.Bootstrap, error) {
	var tree any
	if err := yaml.Unmarshal(data, &tree); err != nil {
		return nil, fmt.Errorf("config: %s: invalid YAML: %w", name, err)
	}
	tree, err := jsonable(tree)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", name, err)
	}
	if tree == nil {
		return nil, fmt.Errorf("config: %s: empty configuration", name)
	}
	bs := &bootstrapv3.Bootstrap{}
	if err := unmarshalJSONTree(tree, bs); err != nil {
		return nil, fmt.Errorf("config: %s%s: %s", name, lineOf(data, err), cleanProtoErr(err))
	}
	if err := bs.ValidateAll(); err != nil {
		return nil, fmt.Errorf("config: %s: %w", name, err)
	}
	return bs, nil
}

// unmarshalJSONTree normalizes enum spellings against msg's descriptor and
// decodes the tree into msg, rejecting unknown fields.
func unmarshalJSONTree(tree any, msg proto.Message) error {
	normalize(msg.ProtoReflect().Descriptor(), tree)
	js, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	return protojson.UnmarshalOptions{}.Unmarshal(js, msg)
}

// jsonable turns a decoded YAML tree into one encoding/json accepts
// (YAML allows non-string keys).
func jsonable(v any) (any, error) {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			t[k] = c
		}
		return t, nil
	case map[any]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = c
		}
		return m, nil
	case []any:
		for i, e := range t {
			c, err := jsonable(e)
			if err != nil {
				return nil, err
			}
			t[i] = c
		}
		return t, nil
	case float64:
		if t != t || t > 1e308 || t < -1e308 {
			return nil, errors.New("non-finite number")
		}
	}
	return v, nil
}

// normalize walks a JSON tree along a message descriptor and rewrites enum
// value names to their canonical spelling ("round_robin" → "ROUND_ROBIN"),
// as Envoy's JSON parser accepts them case-insensitively. It follows Any
// "@type" and TypedStruct type_url so nested configs are covered too.
func normalize(md protoreflect.MessageDescriptor, v any) {
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	switch md.FullName() {
	case "google.protobuf.Any":
		if url, _ := obj["@type"].(string); url != "" {
			if mt, err := protoregistry.GlobalTypes.FindMessageByURL(url); err == nil && !isWellKnown(mt.Descriptor()) {
				normalize(mt.Descriptor(), obj)
			}
		}
		return
	case "udpa.type.v1.TypedStruct", "xds.type.v3.TypedStruct":
		if url, _ := obj["type_url"].(string); url != "" {
			if mt, err := protoregistry.GlobalTypes.FindMessageByURL(url); err == nil {
				normalize(mt.Descriptor(), obj["value"])
			}
		}
		return
	}
	if isWellKnown(md) {
		return
	}
	fields := md.Fields()
	for key, val := range obj {
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByName(protoreflect.Name(key))
		}
		if fd == nil {
			continue // protojson reports the unknown field
		}
		if fd.IsMap() {
			if m, ok := val.(map[string]any); ok {
				for k, e := range m {
					m[k] = normalizeValue(fd.MapValue(), e)
				}
			}
			continue
		}
		if fd.IsList() {
			if l, ok := val.([]any); ok {
				for i, e := range l {
					l[i] = normalizeValue(fd, e)
				}
			}
			continue
		}
		obj[key] = normalizeValue(fd, val)
	}
}

func normalizeValue(fd protoreflect.FieldDescriptor, v any) any {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		if s, ok := v.(string); ok {
			vals := fd.Enum().Values()
			for i := 0; i < vals.Len(); i++ {
				if n := string(vals.Get(i).Name()); strings.EqualFold(n, s) {
					return n
				}
			}
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		normalize(fd.Message(), v)
	}
	return v
}

func isWellKnown(md protoreflect.MessageDescriptor) bool {
	return md.ParentFile().Package() == "google.protobuf" && md.FullName() != "google.protobuf.Any"
}

var jsonPosRE = regexp.MustCompile(`^proto:[\s\x{a0}]*(\(line \d+:\d+\):\s*)?`)

// cleanProtoErr drops protojson's "proto: (line 1:808):" prefix: positions
// in the intermediate JSON mean nothing to someone editing YAML.
func cleanProtoErr(err error) string {
	return jsonPosRE.ReplaceAllString(err.Error(), "")
}

var unknownFieldRE = regexp.MustCompile(`unknown field "([^"]+)"`)

// lineOf finds the YAML line of the key an "unknown field" error names, so
// a typo is reported where it is in the file rather than in the JSON.
func lineOf(data []byte, err error) string {
	m := unknownFieldRE.FindStringSubmatch(err.Error())
	if m == nil {
		return ""
	}
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil {
		return ""
	}
	if line := findKey(&root, m[1]); line > 0 {
		return fmt.Sprintf(":%d", line)
	}
	return ""
}

func findKey(n *yaml.Node, key string) int {
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i].Line
			}
		}
	}
	for _, c := range n.Content {
		if l := findKey(c, key); l > 0 {
			return l
		}
	}
	return 0
}
