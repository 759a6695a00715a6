package config

import (
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/proto"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// doc builds a bootstrap with one listener; hcmExtra goes into the HCM
// typed_config, filters replaces the http_filters list, routes the routes.
func doc(filters, routes, hcmExtra, clusters string) string {
	if filters == "" {
		filters = `
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }`
	}
	if routes == "" {
		routes = `
              - match: { prefix: "/" }
                route: { cluster: llm }`
	}
	if clusters == "" {
		clusters = `
  - name: llm
    connect_timeout: 1s
    load_assignment:
      cluster_name: llm
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8788 } } } }] }]`
	}
	return fmt.Sprintf(`
static_resources:
  listeners:
  - name: main
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: main%s
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:%s
          http_filters:%s
  clusters:%s
`, hcmExtra, routes, filters, clusters)
}

const routerFilter = `
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }`

func wasmFilter(inner string) string {
	return `
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:` + inner + routerFilter
}

func TestParseValid(t *testing.T) {
	tests := []struct {
		name  string
		yaml  string
		check func(t *testing.T, c *Config)
	}{
		{"defaults", doc("", "", "", ""), func(t *testing.T, c *Config) {
			l := c.Listeners[0]
			if l.BufferLimit != 1<<20 || l.StreamIdleTimeout != 5*time.Minute || l.Address() != "127.0.0.1:10000" {
				t.Errorf("listener %+v", l)
			}
			r := l.VirtualHosts[0].Routes[0]
			if r.Cluster != "llm" || r.Timeout != 15*time.Second {
				t.Errorf("route %+v", r)
			}
			if cl := c.Cluster("llm"); cl == nil || cl.Type != "STATIC" || cl.ConnectTimeout != time.Second || cl.Endpoints[0] != "127.0.0.1:8788" {
				t.Errorf("cluster %+v", cl)
			}
		}},
		{"legacy HCM name", strings.Replace(doc("", "", "", ""), "envoy.filters.network.http_connection_manager", "envoy.http_connection_manager", 1),
			func(t *testing.T, c *Config) {
				if len(c.Listeners) != 1 {
					t.Fatal("listener missing")
				}
			}},
		{"HCM wrapped in TypedStruct, lowercase enums", `
static_resources:
  listeners:
  - name: main
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    per_connection_buffer_limit_bytes: 2048
    filter_chains:
    - filters:
      - name: envoy.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/xds.type.v3.TypedStruct
          type_url: type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          value:
            stat_prefix: x
            codec_type: auto
            route_config: { virtual_hosts: [{ name: a, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: c, timeout: 0s } }] }] }
            http_filters: [{ name: envoy.filters.http.router, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }]
  clusters:
  - name: c
    type: strict_dns
    lb_policy: round_robin
    load_assignment: { cluster_name: c, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: localhost, port_value: 80 } } } }] }] }
admin:
  access_log_path: /dev/null
  address: { socket_address: { address: 127.0.0.1, port_value: 9901 } }
node: { id: n1, cluster: nc }
`, func(t *testing.T, c *Config) {
			if c.Listeners[0].BufferLimit != 2048 || c.Listeners[0].VirtualHosts[0].Routes[0].Timeout != 0 {
				t.Errorf("listener %+v", c.Listeners[0])
			}
			if c.Clusters[0].Type != "STRICT_DNS" || c.Admin.Address != "127.0.0.1:9901" || c.NodeID != "n1" || c.NodeCluster != "nc" {
				t.Errorf("cfg %+v %+v", c.Clusters[0], c.Admin)
			}
		}},
		{"wasm with StringValue configuration", doc(wasmFilter(`
                name: p
                root_id: r
                fail_open: true
                vm_config:
                  vm_id: v
                  runtime: envoy.wasm.runtime.wamr
                  code: { local: { filename: plugin.wasm } }
                  configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: "vm-cfg" }
                  environment_variables: { key_values: { A: "1" } }
                configuration:
                  "@type": type.googleapis.com/google.protobuf.StringValue
                  value: '{"k":"v"}'`), "", "", ""), func(t *testing.T, c *Config) {
			got := c.Listeners[0].HTTPFilters
			want := httpfilter.WasmConfig{FilterName: "envoy.filters.http.wasm", PluginName: "p", RootID: "r", VMID: "v",
				Runtime: "envoy.wasm.runtime.wamr", CodePath: "plugin.wasm", FailOpen: true, ListenerName: "main"}
			if len(got) != 1 {
				t.Fatalf("filters %v", got)
			}
			g := got[0]
			if string(g.PluginConfiguration) != `{"k":"v"}` || string(g.VMConfiguration) != "vm-cfg" || g.EnvVars["A"] != "1" {
				t.Errorf("configuration %q vm %q env %v", g.PluginConfiguration, g.VMConfiguration, g.EnvVars)
			}
			g.PluginConfiguration, g.VMConfiguration, g.EnvVars = nil, nil, nil
			if fmt.Sprint(g) != fmt.Sprint(want) {
				t.Errorf("got %+v\nwant %+v", g, want)
			}
		}},
		{"wasm BytesValue, inline code, failure_policy", doc(wasmFilter(`
                failure_policy: FAIL_OPEN
                vm_config:
                  runtime: envoy.wasm.runtime.v8
                  code: { local: { inline_bytes: `+base64.StdEncoding.EncodeToString([]byte("\x00asm"))+` } }
                configuration:
                  "@type": type.googleapis.com/google.protobuf.BytesValue
                  value: `+base64.StdEncoding.EncodeToString([]byte{1, 2, 0xff})), "", "", ""), func(t *testing.T, c *Config) {
			g := c.Listeners[0].HTTPFilters[0]
			if string(g.CodeInline) != "\x00asm" || string(g.PluginConfiguration) != "\x01\x02\xff" || !g.FailOpen {
				t.Errorf("%+v", g)
			}
		}},
		{"wasm wrapped in udpa TypedStruct", doc(`
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/udpa.type.v1.TypedStruct
              type_url: type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              value:
                config:
                  root_id: wrapped
                  vm_config: { runtime: envoy.wasm.runtime.v8, code: { local: { filename: "./w.wasm" } } }
                  configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: "cfg" }`+routerFilter, "", "", ""),
			func(t *testing.T, c *Config) {
				g := c.Listeners[0].HTTPFilters[0]
				if g.RootID != "wrapped" || g.CodePath != "./w.wasm" || string(g.PluginConfiguration) != "cfg" {
					t.Errorf("%+v", g)
				}
			}},
		{"struct configuration becomes JSON", doc(wasmFilter(`
                vm_config: { runtime: envoy.wasm.runtime.v8, code: { local: { filename: w.wasm } } }
                configuration: { "@type": type.googleapis.com/google.protobuf.Struct, value: { a: 1 } }`), "", "", ""),
			func(t *testing.T, c *Config) {
				if got := string(c.Listeners[0].HTTPFilters[0].PluginConfiguration); got != `{"a":1}` {
					t.Errorf("got %q", got)
				}
			}},
		{"route matches and direct response", doc("", `
              - match: { path: "/exact", case_sensitive: false }
                direct_response: { status: 204 }
              - match:
                  prefix: "/h"
                  headers:
                  - { name: X-A, exact_match: "1" }
                  - { name: x-b, present_match: true }
                  - { name: x-c, string_match: { prefix: "pre", ignore_case: true } }
                  - { name: x-d, string_match: { safe_regex: { regex: "[0-9]+" } }, invert_match: true }
                route: { cluster: llm }
              - match: { safe_regex: { regex: "/v[0-9]/.*" } }
                route: { cluster: llm, timeout: 2s }`, "", ""), func(t *testing.T, c *Config) {
			l := c.Listeners[0]
			h := func(path string, kv ...string) httpfilter.Headers {
				out := httpfilter.Headers{{Key: ":authority", Value: "any"}, {Key: ":path", Value: path}}
				for i := 0; i+1 < len(kv); i += 2 {
					out = append(out, httpfilter.Header{Key: kv[i], Value: kv[i+1]})
				}
				return out
			}
			if r := l.MatchRoute(h("/EXACT?q=1")); r == nil || r.Direct == nil || r.Direct.Status != 204 {
				t.Errorf("case-insensitive exact path: %+v", r)
			}
			if r := l.MatchRoute(h("/h", "x-a", "1", "x-b", "", "x-c", "PREfix", "x-d", "abc")); r == nil || r.Cluster != "llm" || r.Timeout != 15*time.Second {
				t.Errorf("header match: %+v", r)
			}
			if r := l.MatchRoute(h("/h", "x-a", "1", "x-b", "", "x-c", "prefix", "x-d", "123")); r != nil {
				t.Errorf("inverted regex should fail: %+v", r)
			}
			if r := l.MatchRoute(h("/h", "x-a", "2", "x-b", "", "x-c", "pre")); r != nil {
				t.Errorf("exact mismatch should fail: %+v", r)
			}
			if r := l.MatchRoute(h("/v1/chat?x")); r == nil || r.Timeout != 2*time.Second {
				t.Errorf("regex route: %+v", r)
			}
			if r := l.MatchRoute(h("/v1")); r != nil {
				t.Errorf("regex must match fully: %+v", r)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.yaml), "test.yaml")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseInvalid(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error
	}{
		{"typo'd field", strings.Replace(doc("", "", "", ""), "{ prefix:", "{ prefx:", 1), []string{"test.yaml:", `unknown field "prefx"`}},
		{"typo'd field inside TypedStruct", doc(`
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/udpa.type.v1.TypedStruct
              type_url: type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              value: { config: { vm_confg: {} } }`+routerFilter, "", "", ""), []string{`unknown field "vm_confg"`}},
		{"missing cluster", doc("", `
              - match: { prefix: "/" }
                route: { cluster: nope }`, "", ""), []string{"unknown cluster 'nope'"}},
		{"validation rule", doc("", "", "", `
  - name: llm
    connect_timeout: -1s
    load_assignment: { cluster_name: llm, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 1 } } } }] }] }`),
			[]string{"test.yaml", "ConnectTimeout"}},
		{"bad enum", strings.Replace(doc("", "", "", ""), "connect_timeout: 1s", "connect_timeout: 1s\n    type: MAGIC", 1), []string{"MAGIC"}},
		{"router not last", doc(routerFilter+`
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config: { vm_config: { code: { local: { filename: a.wasm } } } }`, "", "", ""), []string{"must be the last filter"}},
		{"wasm last", doc(`
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config: { vm_config: { code: { local: { filename: a.wasm } } } }`, "", "", ""), []string{"non-terminal filter"}},
		{"filter without typed_config", doc(`
          - name: envoy.filters.http.router`, "", "", ""), []string{"Didn't find a registered implementation for 'envoy.filters.http.router'"}},
		{"unsupported but valid HCM field", doc("", "", `
          use_remote_address: true`, ""), []string{"use_remote_address", "not supported"}},
		{"unsupported route action", doc("", `
              - match: { prefix: "/" }
                route: { cluster: llm, prefix_rewrite: "/x" }`, "", ""), []string{"routes[0].route.prefix_rewrite", "not supported"}},
		{"unsupported cluster type", doc("", "", "", `
  - name: llm
    type: EDS
    eds_cluster_config: { eds_config: { ads: {} } }`), []string{"eds_cluster_config", "not supported"}},
		{"remote wasm code", doc(wasmFilter(`
                vm_config:
                  code: { remote: { http_uri: { uri: "http://x/a.wasm", cluster: llm, timeout: 1s }, sha256: abc } }`), "", "", ""),
			[]string{"code.remote", "not supported"}},
		{"unsupported http filter", doc(`
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/google.protobuf.StringValue
              value: x`+routerFilter, "", "", ""), []string{"google.protobuf.StringValue", "not supported"}},
		{"static cluster with hostname", doc("", "", "", `
  - name: llm
    load_assignment: { cluster_name: llm, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: example.com, port_value: 1 } } } }] }] }`),
			[]string{"malformed IP address"}},
		{"duplicate domain", strings.Replace(doc("", "", "", ""), `domains: ["*"]`, `domains: ["*", "*"]`, 1), []string{"unique values for domains"}},
		{"not YAML", "a: [", []string{"invalid YAML"}},
		{"empty", "", []string{"empty configuration"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "test.yaml")
			if err == nil {
				t.Fatal("Parse accepted an invalid config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestTypoReportsYAMLLine(t *testing.T) {
	y := doc("", "", "", "")
	y = strings.Replace(y, "stat_prefix: main", "stat_prefix: main\n          stat_prefx: oops", 1)
	_, err := Parse([]byte(y), "test.yaml")
	if err == nil {
		t.Fatal("accepted")
	}
	line := 0
	for i, l := range strings.Split(y, "\n") {
		if strings.Contains(l, "stat_prefx") {
			line = i + 1
		}
	}
	if want := fmt.Sprintf("test.yaml:%d:", line); !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q lacks %q", err, want)
	}
}

func TestVirtualHostPrecedence(t *testing.T) {
	l := &Listener{VirtualHosts: []*VirtualHost{
		{Name: "any", Domains: []string{"*"}},
		{Name: "prefix", Domains: []string{"api.*"}},
		{Name: "suffix", Domains: []string{"*.example.com"}},
		{Name: "longer-suffix", Domains: []string{"*.api.example.com"}},
		{Name: "exact", Domains: []string{"api.example.com"}},
	}}
	cases := map[string]string{
		"api.example.com":   "exact",
		"API.EXAMPLE.COM":   "exact",
		"x.api.example.com": "longer-suffix",
		"www.example.com":   "suffix",
		"api.other":         "prefix",
		"other":             "any",
	}
	for host, want := range cases {
		if got := l.SelectVirtualHost(host); got == nil || got.Name != want {
			t.Errorf("%s: got %v want %s", host, got, want)
		}
	}
}

func TestLoadProductConfig(t *testing.T) {
	c, err := Load("../../../envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := c.Listener("chime")
	if l == nil || l.Address() != "127.0.0.1:10000" || l.BufferLimit < 8<<20 || l.StreamIdleTimeout != 0 {
		t.Fatalf("listener %+v", l)
	}
	// The x-chime-route example first, then the default route.
	routes := l.VirtualHosts[0].Routes
	if len(routes) != 2 || len(routes[0].Match.Headers) != 1 || routes[0].Match.Headers[0].Name != "x-chime-route" || routes[0].Cluster != "llm" {
		t.Fatalf("routes %+v", routes)
	}
	r := routes[1]
	if r.Cluster != "llm" || r.Timeout != 0 || r.Match.Kind != PathPrefix || r.Match.Value != "/" || len(r.Match.Headers) != 0 {
		t.Fatalf("route %+v", r)
	}
	if len(l.HTTPFilters) != 1 {
		t.Fatalf("filters %+v", l.HTTPFilters)
	}
	w := l.HTTPFilters[0]
	if w.PluginName != "chime" || w.RootID != "chime" || w.Runtime != "envoy.wasm.runtime.v8" || w.CodePath != "chime.wasm" ||
		string(w.PluginConfiguration) != `{"hostCluster":"chime_host","token":"dev-token","allowOnHeadersStopIteration":true}` ||
		!w.AllowOnHeadersStopIteration {
		t.Fatalf("wasm %+v", w)
	}
	if c.Cluster("llm").Endpoints[0] != "127.0.0.1:8788" || c.Cluster("chime_host").Endpoints[0] != "127.0.0.1:8787" {
		t.Fatalf("clusters %+v %+v", c.Cluster("llm"), c.Cluster("chime_host"))
	}
	if c.Admin == nil || c.Admin.Address != "127.0.0.1:9901" {
		t.Fatalf("admin %+v", c.Admin)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(doc("", "", "", "")))
	f.Add([]byte(doc(wasmFilter(`
                vm_config: { runtime: x, code: { local: { filename: a.wasm } } }`), "", "", "")))
	f.Add([]byte("static_resources: {listeners: [{}]}"))
	f.Add([]byte("a: [1, {b: *x}]"))
	f.Add([]byte("{}"))
	f.Add([]byte(tcpDoc(netWasmFilter + tcpProxyFilter)))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Parse(data, "fuzz.yaml")
		if err == nil && c == nil {
			t.Fatal("nil config without error")
		}
		if err != nil && !strings.HasPrefix(err.Error(), "config: fuzz.yaml") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}

// TestStatsTags: stats_config.stats_tags is read in order; a regex needs
// a capture group and must compile, and a tag needs a regex or a value.
func TestStatsTags(t *testing.T) {
	base := doc("", "", "", "")
	cfg, err := Parse([]byte(base+`
stats_config:
  use_all_default_tags: true
  stats_tags:
  - { tag_name: route, regex: '(\.route=(\w+))' }
  - { tag_name: env, fixed_value: dev }
`), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.StatsTags) != 2 || cfg.StatsTags[0].Name != "route" || cfg.StatsTags[0].Regex.String() != `(\.route=(\w+))` ||
		cfg.StatsTags[1].FixedValue != "dev" || cfg.StatsTags[1].Regex != nil {
		t.Fatalf("stats tags %+v", cfg.StatsTags)
	}
	for tag, want := range map[string]string{
		`{ tag_name: a, regex: '(' }`:      "invalid regex",
		`{ tag_name: a, regex: 'x' }`:      "capture group",
		`{ tag_name: envoy.cluster_name }`: "no regex or fixed_value",
	} {
		_, err := Parse([]byte(base+"stats_config:\n  stats_tags:\n  - "+tag+"\n"), "test.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", tag, err, want)
		}
	}
}

// TestRouteMetadata: route metadata is accepted and kept serialized, as
// Envoy's route_metadata property serves it.
func TestRouteMetadata(t *testing.T) {
	cfg, err := Parse([]byte(doc("", `
              - match: { prefix: "/" }
                route: { cluster: llm }
                metadata: { filter_metadata: { chime: { tier: fast } } }`, "", "")), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var md corev3.Metadata
	r := cfg.Listeners[0].VirtualHosts[0].Routes[0]
	if err := proto.Unmarshal(r.Metadata, &md); err != nil || md.GetFilterMetadata()["chime"].GetFields()["tier"].GetStringValue() != "fast" {
		t.Fatalf("metadata %x: %v (%v)", r.Metadata, &md, err)
	}
}

// TestWasmService: a bootstrap_extensions WasmService is read with its
// plugin config; other extensions and unsupported fields are refused by
// path.
func TestWasmService(t *testing.T) {
	base := doc("", "", "", "")
	svc := func(extra string) string {
		return base + `
bootstrap_extensions:
- name: envoy.bootstrap.wasm
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.wasm.v3.WasmService
    singleton: true
    config:
      name: feeder
      root_id: feeder_root
      vm_config: { vm_id: svc, runtime: envoy.wasm.runtime.v8, code: { local: { filename: f.wasm } } }
      configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: "go" }
` + extra
	}
	cfg, err := Parse([]byte(svc("")), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Services) != 1 {
		t.Fatalf("services %+v", cfg.Services)
	}
	s := cfg.Services[0]
	if s.Name != "envoy.bootstrap.wasm" || !s.Singleton || s.Wasm.RootID != "feeder_root" || s.Wasm.VMID != "svc" ||
		string(s.Wasm.PluginConfiguration) != "go" || !strings.HasSuffix(s.Wasm.CodePath, "f.wasm") {
		t.Errorf("service %+v", s)
	}
	_, err = Parse([]byte(svc("      fail_open: true\n    extra_field: 1\n")), "test.yaml")
	if err == nil {
		t.Error("an unknown WasmService field was accepted")
	}
	_, err = Parse([]byte(base+`
bootstrap_extensions:
- name: envoy.filters.http.router
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
`), "test.yaml")
	if err == nil || !strings.Contains(err.Error(), "bootstrap_extensions[0]") {
		t.Errorf("a non-wasm bootstrap extension: err = %v, want it refused by path", err)
	}
}
