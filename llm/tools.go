package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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
	rendered := make([]RenderedTool, len(tools))
	for i, t := range tools {
		rt, err := t.Render(r.proto)
		if err != nil {
			return err
		}
		rendered[i] = rt
	}
	return r.InjectRendered(rendered...)
}

// RenderedTool is a ToolSpec in one protocol's shape, rendered once: a
// filter that injects the same few tools into every request renders and
// validates their schemas (a few KB each) once, not per request.
type RenderedTool struct {
	name  string
	proto Protocol
	body  []byte
}

// Name is the tool's name.
func (t RenderedTool) Name() string { return t.name }

// Render returns the tool in p's shape, or ErrToolSpec.
func (t ToolSpec) Render(p Protocol) (RenderedTool, error) {
	b, err := t.render(p)
	if err != nil {
		return RenderedTool{}, err
	}
	// Capped: an append to an edit holding it must copy, never write into
	// bytes other requests share.
	return RenderedTool{name: t.Name, proto: p, body: b[:len(b):len(b)]}, nil
}

// InjectRendered is InjectTools for tools rendered beforehand, each for
// this request's protocol. The request keeps references to their bytes,
// which are never written.
func (r *Request) InjectRendered(tools ...RenderedTool) error {
	if r.tools.ok() && r.body[r.tools.s] != '[' && r.body[r.tools.s] != 'n' {
		return fmt.Errorf("%w: tools is not an array", ErrBodyShape)
	}
	for _, t := range tools {
		if t.proto != r.proto || t.body == nil {
			return fmt.Errorf("%w: tool %q rendered for %v, not %v", ErrToolSpec, t.name, t.proto, r.proto)
		}
	}
	if r.injected == nil {
		r.injected = make([]injectedTool, 0, len(tools))
	}
	r.toolList = slices.Grow(r.toolList, len(tools))
	rebuild := false
	for _, t := range tools {
		rebuild = r.injectOne(t.name, t.body) || rebuild
	}
	if rebuild {
		r.rebuildToolList() // once for all the tools, not once per tool
	}
	return nil
}

// injectOne adds or replaces one tool; it reports whether the tools array
// chime builds changed (the caller rebuilds it).
func (r *Request) injectOne(name string, body []byte) (rebuild bool) {
	r.dirty = true
	if ei, ok := r.injectedEdit(name); ok {
		if ei >= 0 {
			r.edits[ei].repl = body
			return false
		}
		for i := range r.toolList {
			if r.toolList[i].name == name {
				r.toolList[i].body = body
			}
		}
		return true
	}
	if el := r.clientTool(name); el.ok() {
		r.injected = append(r.injected, injectedTool{name, r.addEdit(edit{start: el.s, end: el.e, repl: body})})
		return false
	}
	// A new tool joins the others chime adds, all in one edit.
	r.toolList = append(r.toolList, namedTool{name, body})
	r.injected = append(r.injected, injectedTool{name, -1})
	return true
}

// injectedEdit returns the edit of the tool chime injected as name.
func (r *Request) injectedEdit(name string) (int, bool) {
	for _, t := range r.injected {
		if t.name == name {
			return t.edit, true
		}
	}
	return 0, false
}

// rebuildToolList puts the tools chime adds (toolList) in one edit: a
// new tools member or array in place of null, their opening in repl, or
// the end of the client's array; the tools and their commas in more
// (shared, not copied).
func (r *Request) rebuildToolList() {
	// A fresh list when an edit still holds the previous one; the
	// request's own memory otherwise.
	parts := r.parts[:0]
	if r.toolsEdit >= 0 {
		parts = make([][]byte, 0, 2*len(r.toolList)+1)
	}
	for i, t := range r.toolList {
		if i > 0 {
			parts = append(parts, comma)
		}
		parts = append(parts, t.body)
	}
	if !r.toolsAppend() {
		parts = append(parts, closeBracket)
	}
	r.parts = parts
	if r.toolsEdit < 0 {
		r.toolsEdit = r.addToolsEdit()
	}
	r.edits[r.toolsEdit].more = parts
}

// toolsAppend reports whether the client's tools array takes the tools
// chime adds: otherwise chime writes a tools array of its own.
func (r *Request) toolsAppend() bool { return r.tools.ok() && r.body[r.tools.s] == '[' }

// addToolsEdit adds the edit that the tools chime adds go in (in its
// more): after the client's tools, in a new array in place of null, or
// in a new tools member.
func (r *Request) addToolsEdit() int {
	switch {
	case r.toolsAppend():
		return r.insertAt(r.clientToolsEnd, r.clientToolsEmpty, nil, 0) // arrayEnd(r.tools), found by indexTools
	case r.tools.ok(): // null
		return r.addEdit(edit{start: r.tools.s, end: r.tools.e, repl: toolsOpen})
	}
	return r.insertMember(toolsMemberOpen, 0)
}

// ToolSet is tools rendered for one protocol with the pieces of the
// tools array they make joined once: a filter that injects the same
// tools into every request adds them with one edit and no step per
// tool (InjectSet).
type ToolSet struct {
	proto    Protocol
	tools    []RenderedTool
	named    []namedTool    // toolList's entries
	injected []injectedTool // injected's entries: all in toolList
	parts    [][]byte       // the tools and their commas
	closed   [][]byte       // parts and the closing bracket
	unique   bool           // no name twice
}

// NewToolSet prepares tools, each rendered for p.
func NewToolSet(p Protocol, tools ...RenderedTool) (*ToolSet, error) {
	s := &ToolSet{proto: p, tools: slices.Clip(slices.Clone(tools)), unique: true}
	for i, t := range tools {
		if t.proto != p || t.body == nil {
			return nil, fmt.Errorf("%w: tool %q rendered for %v, not %v", ErrToolSpec, t.name, t.proto, p)
		}
		for _, u := range tools[:i] {
			if u.name == t.name {
				s.unique = false
			}
		}
		if i > 0 {
			s.parts = append(s.parts, comma)
		}
		s.parts = append(s.parts, t.body)
		s.named = append(s.named, namedTool{t.name, t.body})
		s.injected = append(s.injected, injectedTool{t.name, -1})
	}
	s.closed = slices.Clip(append(slices.Clone(s.parts), closeBracket))
	s.parts = slices.Clip(s.parts)
	return s, nil
}

// Tools returns the set's tools, which the caller must not modify.
func (s *ToolSet) Tools() []RenderedTool { return s.tools }

// InjectSet is InjectRendered(s.Tools()...): into a request nothing was
// injected into yet, with none of the set's names among the client's
// tools, it takes the set's pieces as they are (the request keeps
// references to them, never written).
func (r *Request) InjectSet(s *ToolSet) error {
	if len(s.tools) == 0 || !s.unique || s.proto != r.proto || len(r.injected) > 0 || r.toolsEdit >= 0 ||
		(r.tools.ok() && r.body[r.tools.s] != '[' && r.body[r.tools.s] != 'n') { // not an array: InjectRendered fails
		return r.InjectRendered(s.tools...)
	}
	for _, t := range s.tools {
		if r.clientTool(t.name).ok() {
			return r.InjectRendered(s.tools...)
		}
	}
	r.toolList = append(r.toolList[:0], s.named...)
	r.injected = append(r.injected[:0], s.injected...)
	r.toolsEdit = r.addToolsEdit()
	more := s.closed
	if r.toolsAppend() {
		more = s.parts
	}
	r.edits[r.toolsEdit].more = more
	return nil
}

// The fixed pieces of a tools array chime builds; capped, so an append
// copies rather than writes into them.
var (
	toolsOpen       = capped(`[`)
	toolsMemberOpen = capped(`"tools":[`)
	comma           = capped(`,`)
	closeBracket    = capped(`]`)
)

func capped(s string) []byte { return []byte(s)[:len(s):len(s)] }

// HasToolNamed reports whether the request, as edited, offers a tool
// named name (Chat function or custom tools, and any named tool in
// Responses and Messages).
func (r *Request) HasToolNamed(name string) bool {
	if _, ok := r.injectedEdit(name); ok {
		return true
	}
	return r.clientTool(name).ok()
}

// clientTool returns the span of the client's tool named name, or noSpan:
// the first element of the client's tools array with a name key (Chat:
// also the last name of function or custom) equal to name. ParseRequest
// lists the name keys as it validates the array (indexTools).
func (r *Request) clientTool(name string) span {
	if !r.tools.ok() || r.body[r.tools.s] != '[' || r.clientToolKeys&toolKey(name) == 0 {
		return noSpan
	}
	for _, t := range r.clientTools {
		raw := r.body[t.name.s:t.name.e]
		if t.plain {
			// No escape: the bytes between the quotes are the name.
			if len(raw) == len(name)+2 && string(raw[1:len(raw)-1]) == name {
				return t.el
			}
			continue
		}
		if stringIs(raw, name) {
			return t.el
		}
	}
	return noSpan
}

// clientToolName is one name key of an element of the client's tools
// array: its raw JSON string, the element, and whether the string has no
// escape (looked for once, not on each of the lookups a request makes).
type clientToolName struct {
	name, el span
	plain    bool
	key      uint64 // toolKey of the name; all bits when it has an escape
}

// toolName lists the raw name string at sp of the element starting at es.
func (r *Request) toolName(sp span, es int) clientToolName {
	raw := r.body[sp.s:sp.e]
	t := clientToolName{name: sp, el: span{es, -1}, plain: bytes.IndexByte(raw, '\\') < 0}
	t.key = ^uint64(0) // an escaped name matches every key
	if t.plain {
		t.key = toolKey(raw[1 : len(raw)-1])
	}
	return t
}

// toolKey is a name's bit in a 64-bit filter (its length, first and last
// byte): most lookups are of names the client does not have, and a miss
// in the filter needs no walk of its tools.
func toolKey[S ~string | ~[]byte](name S) uint64 {
	if len(name) == 0 {
		return 1
	}
	return 1 << ((uint(len(name))*7 + uint(name[0])*3 + uint(name[len(name)-1])) & 63)
}

// addClientTool lists t.
func (r *Request) addClientTool(t clientToolName) {
	r.clientTools = append(r.clientTools, t)
	r.clientToolKeys |= t.key
}

// indexTools validates the tools array at vs, as ck.Value(vs, 1) would,
// and lists the name keys of its elements and where a new tool goes, so
// that no lookup walks the array again: a coding agent sends dozens of
// tools in some tens of KB, and a walk per lookup cost the wasm guest
// milliseconds a request. It returns the value's end or -1.
func (r *Request) indexTools(ck *reqscan.Checker, vs int) int {
	b := r.body
	r.clientTools, r.clientToolKeys = r.clientTools[:0], 0 // the last tools member wins
	r.clientToolsEnd, r.clientToolsEmpty = vs+1, true
	return reqscan.WalkElements(b, vs, func(es int) int {
		var ve int
		if b[es] == '{' {
			first := len(r.clientTools)
			ve = ck.Members(es, func(key []byte, ms int) int {
				if r.proto == Chat && (reqscan.KeyIs(key, "function") || reqscan.KeyIs(key, "custom")) && ms < len(b) && b[ms] == '{' {
					last := noSpan
					me := ck.Members(ms, func(key []byte, ns int) int {
						ne := ck.Value(ns, 4)
						if ne >= 0 && reqscan.KeyIs(key, "name") {
							last = span{ns, ne}
						}
						return ne
					})
					if me >= 0 && last.ok() && b[last.s] == '"' {
						r.addClientTool(r.toolName(last, es))
					}
					return me
				}
				me := ck.Value(ms, 3)
				if me >= 0 && reqscan.KeyIs(key, "name") && b[ms] == '"' {
					r.addClientTool(r.toolName(span{ms, me}, es))
				}
				return me
			})
			for i := first; i < len(r.clientTools); i++ {
				r.clientTools[i].el.e = ve
			}
		} else {
			ve = ck.Value(es, 2)
		}
		if ve >= 0 {
			r.clientToolsEnd, r.clientToolsEmpty = ve, false
		}
		return ve
	})
}
