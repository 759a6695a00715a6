package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// ToolSpec is a function tool chime injects, in protocol-neutral form.
type ToolSpec struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	// Parameters is a JSON Schema object; empty means no parameters.
	Parameters json.RawMessage `json:"parameters,omitempty"`
	// Strict asks OpenAI for strict schema adherence; Anthropic ignores it.
	Strict bool `json:"strict,omitempty"`
}

// ErrToolSpec reports a ToolSpec that cannot be rendered.
var ErrToolSpec = errors.New("llm: invalid tool spec")

var emptySchema = []byte(`{"type":"object","properties":{}}`)

// render returns the tool in p's shape (docs/protocols.md#protocol-table row).
func (t ToolSpec) render(p Protocol) ([]byte, error) {
	if !validToolName(t.Name) {
		return nil, fmt.Errorf("%w: name %q must be 1-64 of [A-Za-z0-9_-]", ErrToolSpec, t.Name)
	}
	params := []byte(t.Parameters)
	if len(params) == 0 {
		params = emptySchema
	} else if !validSchema(params) {
		return nil, fmt.Errorf("%w: %s parameters are not a JSON object", ErrToolSpec, t.Name)
	}
	strict := "false"
	if t.Strict {
		strict = "true"
	}
	b := make([]byte, 0, len(params)+len(t.Description)+96)
	switch p {
	case Chat:
		b = append(b, `{"type":"function","function":{"name":`...)
		b = reqscan.AppendQuote(b, t.Name)
		b = append(b, `,"description":`...)
		b = reqscan.AppendQuote(b, t.Description)
		b = append(b, `,"parameters":`...)
		b = append(b, params...)
		b = append(b, `,"strict":`+strict+`}}`...)
	case Responses:
		b = append(b, `{"type":"function","name":`...)
		b = reqscan.AppendQuote(b, t.Name)
		b = append(b, `,"description":`...)
		b = reqscan.AppendQuote(b, t.Description)
		b = append(b, `,"parameters":`...)
		b = append(b, params...)
		b = append(b, `,"strict":`+strict+`}`...)
	case Messages:
		b = append(b, `{"name":`...)
		b = reqscan.AppendQuote(b, t.Name)
		b = append(b, `,"description":`...)
		b = reqscan.AppendQuote(b, t.Description)
		b = append(b, `,"input_schema":`...)
		b = append(b, params...)
		b = append(b, '}')
	default:
		return nil, fmt.Errorf("%w: unsupported protocol %v", ErrBodyShape, p)
	}
	return b, nil
}

// lastValidSchema remembers the last schema found valid: the filter
// injects the same few schemas into every request, and validating a
// schema of several KB costs more than the rest of the injection.
var lastValidSchema atomic.Pointer[string]

// validSchema reports whether params is a JSON object.
func validSchema(params []byte) bool {
	if p := lastValidSchema.Load(); p != nil && *p == string(params) {
		return true
	}
	if !reqscan.Valid(params) || params[reqscan.SkipSpace(params, 0)] != '{' {
		return false
	}
	s := string(params)
	lastValidSchema.Store(&s)
	return true
}

func validToolName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// InjectTools adds each tool to the request's tool list in the protocol's
// shape (docs/architecture.md#request-path, §2). A tool whose name is already present, from
// the client or an earlier call, is replaced in place rather than
// duplicated. A missing or null tools member is created. It fails without
// changing anything if a spec is invalid or "tools" is not a list.
func (r *Request) InjectTools(tools []ToolSpec) error {
	if r.tools.ok() && r.body[r.tools.s] != '[' && r.body[r.tools.s] != 'n' {
		return fmt.Errorf("%w: tools is not an array", ErrBodyShape)
	}
	rendered := make([][]byte, len(tools))
	for i, t := range tools {
		b, err := t.render(r.proto)
		if err != nil {
			return err
		}
		rendered[i] = b
	}
	if r.injected == nil {
		r.injected = make(map[string]int, len(tools))
	}
	for i, t := range tools {
		r.injectOne(t.Name, rendered[i])
	}
	return nil
}

func (r *Request) injectOne(name string, body []byte) {
	r.dirty = true
	if ei, ok := r.injected[name]; ok {
		if ei >= 0 {
			r.edits[ei].repl = body
			return
		}
		for i := range r.toolList {
			if r.toolList[i].name == name {
				r.toolList[i].body = body
			}
		}
		r.rebuildToolList()
		return
	}
	if !r.tools.ok() || r.body[r.tools.s] == 'n' {
		r.toolList = append(r.toolList, namedTool{name, body})
		r.injected[name] = -1
		r.rebuildToolList()
		return
	}
	if el := r.clientTool(name); el.ok() {
		r.injected[name] = r.addEdit(edit{start: el.s, end: el.e, repl: body})
		return
	}
	pos, empty := r.arrayEnd(r.tools)
	r.injected[name] = r.insertAt(pos, empty, body, 0)
}

// rebuildToolList renders the whole tools array chime created.
func (r *Request) rebuildToolList() {
	var b []byte
	if !r.tools.ok() {
		b = append(b, `"tools":`...)
	}
	b = append(b, '[')
	for i, t := range r.toolList {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, t.body...)
	}
	b = append(b, ']')
	if r.toolsEdit >= 0 {
		r.edits[r.toolsEdit].repl = b
		return
	}
	if r.tools.ok() { // null
		r.toolsEdit = r.addEdit(edit{start: r.tools.s, end: r.tools.e, repl: b})
	} else {
		r.toolsEdit = r.insertMember(b, 0)
	}
}

// HasToolNamed reports whether the request, as edited, offers a tool
// named name (Chat function or custom tools, and any named tool in
// Responses and Messages).
func (r *Request) HasToolNamed(name string) bool {
	if _, ok := r.injected[name]; ok {
		return true
	}
	return r.clientTool(name).ok()
}

// clientTool returns the span of the client's tool named name, or noSpan.
func (r *Request) clientTool(name string) span {
	if !r.tools.ok() || r.body[r.tools.s] != '[' {
		return noSpan
	}
	b := r.body
	found := noSpan
	reqscan.Elements(b, r.tools.s, func(vs, ve int) bool {
		if b[vs] != '{' {
			return true
		}
		reqscan.Members(b, vs, func(key []byte, s, e int) bool {
			switch {
			case reqscan.KeyIs(key, "name"):
				if stringIs(b[s:e], name) {
					found = span{vs, ve}
				}
			case r.proto == Chat && (reqscan.KeyIs(key, "function") || reqscan.KeyIs(key, "custom")):
				if b[s] == '{' {
					if ns, ne := reqscan.Member(b, s, "name"); ns >= 0 && stringIs(b[ns:ne], name) {
						found = span{vs, ve}
					}
				}
			}
			return true
		})
		return !found.ok()
	})
	return found
}
