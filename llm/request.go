package llm

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// Request is a byte-level view and editor of one request body in one of
// the three protocols (docs/architecture.md#request-path, §2).
//
// ParseRequest validates and indexes the body once. Edits are recorded as
// splices against the original bytes and applied in a single copy by
// Bytes, so every byte outside an edit stays identical and a 1–2 MB body
// is never decoded as a whole. The original slice is never written to.
//
// A Request is not safe for concurrent use.
type Request struct {
	proto Protocol
	body  []byte

	topInsert int  // where new top-level members go: after the last member
	topEmpty  bool // the top-level object has no members

	model, stream, messages, input, tools, metadata, promptCacheKey span

	prevResponse span // Responses previous_response_id: the provider holds the history

	// msgs lists messages[] (Chat, Messages) or input[] items (Responses).
	// A Responses string input is one pseudo user message whose content
	// is the input string itself.
	msgs        []message
	listInsert  int // where a new message goes inside messages[] / input[]
	listEmpty   bool
	inputString bool

	edits    []edit
	orderBuf []int
	out      []byte // cached result of Bytes
	dirty    bool

	tagHint  bool // some string may hold a tag (reqscan.Checker.TagHint)
	scanned  bool
	firstNew int // FirstNewUserMessage
	dirs     []Directive
	strip    []edit // edits StripDirectives will apply
	removed  int
	stripped bool

	streamEdit int // index into edits, or -1
	streamVal  bool
	inputEdit  int // Responses: the edit holding a rebuilt input array
	finalEdit  int // Messages: the edit holding the final user turn's rebuilt content
	toolsEdit  int // the edit holding a whole new tools array
	toolList   []namedTool
	parts      [][]byte       // the pieces of a tools array chime builds (rebuildToolList)
	scratch    []byte         // bytesFor
	partBuf    []part         // scan's list of a message's content parts
	injected   []injectedTool // a few at most: a slice costs less than a map
	// clientTools are the name keys of the client's tools (clientTool),
	// listed by ParseRequest.
	clientTools      []clientToolName
	clientToolKeys   uint64 // the toolKey bits of clientTools
	clientToolsEnd   int    // arrayEnd(tools): where a new tool goes
	clientToolsEmpty bool   // and whether the array is empty

	memo *ToolsMemo // ParseRequestWith's, for the tools array; nil: none
}

// span is a value's byte range [s, e) in the original body; s < 0 when absent.
type span struct{ s, e int }

var noSpan = span{-1, -1}

func (p span) ok() bool { return p.s >= 0 }

type message struct {
	span
	user    bool // role "user"
	system  bool // role "system" (Messages: the mid-conversation-system beta)
	model   bool // produced by the model: a new-input boundary (docs/directives.md)
	content span
}

// edit replaces body[start:end] with pre+repl. When tail > 0, repl ends
// with tail bytes that close an array new items may be added to.
type edit struct {
	start, end int
	pre        string
	repl       []byte
	tail       int
	// more follows repl: the parts of a tools array chime builds, so
	// schemas of a few KB are not copied into a fresh array per request.
	more        [][]byte
	placeholder bool // repl is StrippedPlaceholder standing in for emptied text
	member      bool // a new top-level member: goes after a value ending at the same offset
}

// injectedTool is a tool chime injected: its edit, or -1 when it is in
// toolList.
type injectedTool struct {
	name string
	edit int
}

type namedTool struct {
	name string
	body []byte
}

// Errors ParseRequest returns; the filter forwards such bodies unmodified
// (docs/failures.md).
var (
	ErrMalformedJSON = errors.New("llm: malformed JSON body")
	ErrBodyShape     = errors.New("llm: request body has the wrong shape")
)

// ParseRequest validates body and indexes it for protocol p. It returns
// ErrMalformedJSON for invalid JSON and an error wrapping ErrBodyShape if
// the top level is not an object or the message list has the wrong type.
// body must not be modified while the Request is in use.
func ParseRequest(p Protocol, body []byte) (*Request, error) {
	return ParseRequestInto(nil, p, body)
}

// ParseRequestInto is ParseRequest reusing r, a Request the caller is
// done with (nil allocates a new one): its lists and scratch bytes keep
// their memory, so a filter that parses request after request allocates
// almost nothing per request (in the wasm guest each allocation costs
// about as much as parsing a short message). Nothing r handed out before
// (directives, Bytes, edits) may be used after; r may be reused again
// even when this call fails.
func ParseRequestInto(r *Request, p Protocol, body []byte) (*Request, error) {
	return ParseRequestWith(r, nil, p, body)
}

// ParseRequestWith is ParseRequestInto remembering in m (nil: nowhere)
// the client tools arrays it validates, and taking from m those it has
// seen (ToolsMemo). The result is the same as ParseRequestInto's.
func ParseRequestWith(r *Request, m *ToolsMemo, p Protocol, body []byte) (*Request, error) {
	if p != Chat && p != Responses && p != Messages {
		return nil, fmt.Errorf("%w: unsupported protocol %v", ErrBodyShape, p)
	}
	if r == nil {
		r = new(Request)
	}
	r.reset(p, body)
	r.memo = m
	// Validation and indexing share one pass over the body.
	ck := reqscan.NewChecker(body)
	top := reqscan.SkipSpace(body, 0)
	if top >= len(body) || body[top] != '{' {
		if reqscan.Valid(body) {
			return nil, fmt.Errorf("%w: top level is not an object", ErrBodyShape)
		}
		return nil, ErrMalformedJSON
	}
	r.topInsert, r.topEmpty = top+1, true
	listKey := "messages"
	if p == Responses {
		listKey = "input"
	}
	end := ck.Members(top, func(key []byte, vs int) int {
		var ve int
		name := reqscan.KeyName(key)
		switch {
		case string(name) == listKey:
			ve = r.indexList(ck, vs)
		case string(name) == "tools" && vs < len(body) && body[vs] == '[':
			if r.memo != nil {
				ve = r.indexToolsMemo(ck, vs)
			} else {
				ve = r.indexTools(ck, vs)
			}
		default:
			ve = ck.Value(vs, 1)
		}
		if ve < 0 {
			return -1
		}
		r.topInsert, r.topEmpty = ve, false
		sp := span{vs, ve}
		switch string(name) { // the last duplicate wins, as providers decode
		case "model":
			r.model = sp
		case "stream":
			r.stream = sp
		case "messages":
			r.messages = sp
		case "input":
			r.input = sp
		case "tools":
			r.tools = sp
		case "metadata":
			r.metadata = sp
		case "prompt_cache_key":
			r.promptCacheKey = sp
		case "previous_response_id":
			r.prevResponse = sp
		}
		return ve
	})
	if end < 0 || reqscan.SkipSpace(body, end) != len(body) {
		return nil, ErrMalformedJSON
	}
	r.tagHint = ck.TagHint()
	list, what := r.messages, "messages"
	if p == Responses {
		list, what = r.input, "input"
		if !list.ok() || body[list.s] == 'n' || body[list.s] == '"' { // absent, null or a string
			return r, nil
		}
	}
	if !list.ok() || body[list.s] != '[' {
		return nil, fmt.Errorf("%w: %s is not an array", ErrBodyShape, what)
	}
	return r, nil
}

// reset makes r a fresh Request for body, keeping the memory of the
// lists it owns. Lists shared with other requests (a ToolSet's) are
// dropped, never written.
func (r *Request) reset(p Protocol, body []byte) {
	own := *r
	*r = Request{
		proto: p, body: body,
		model: noSpan, stream: noSpan, messages: noSpan, input: noSpan,
		tools: noSpan, metadata: noSpan, promptCacheKey: noSpan, prevResponse: noSpan,
		streamEdit: -1, inputEdit: -1, finalEdit: -1, toolsEdit: -1,
		msgs: own.msgs[:0], edits: own.edits[:0], orderBuf: own.orderBuf[:0],
		dirs: own.dirs[:0], strip: own.strip[:0], clientTools: own.clientTools[:0],
		injected: own.injected[:0], toolList: own.toolList[:0], parts: own.parts[:0],
		scratch: own.scratch[:0], partBuf: own.partBuf[:0],
	}
}

// bytesFor returns an empty slice with room for n bytes from the
// request's scratch memory: edits' new bytes are built there instead of
// in an allocation each. An append past n reallocates, so the slice never
// writes into its neighbours.
func (r *Request) bytesFor(n int) []byte {
	if cap(r.scratch)-len(r.scratch) < n {
		r.scratch = make([]byte, 0, max(2*cap(r.scratch), n, 1024))
	}
	at := len(r.scratch)
	r.scratch = r.scratch[:at+n]
	return r.scratch[at : at : at+n]
}

// indexList validates the list value at vs (messages, or Responses
// input), records its messages, and returns the value's end or -1.
func (r *Request) indexList(ck *reqscan.Checker, vs int) int {
	b := r.body
	r.msgs, r.inputString = r.msgs[:0], false
	if vs >= len(b) {
		return -1
	}
	switch b[vs] {
	case '"':
		ve := ck.Value(vs, 1)
		r.inputString = true
		r.msgs = append(r.msgs, message{span: span{vs, ve}, user: true, content: span{vs, ve}})
		return ve
	case '[':
	default:
		return ck.Value(vs, 1)
	}
	r.listInsert, r.listEmpty = vs+1, true
	return reqscan.WalkElements(b, vs, func(es int) int {
		m := message{span: span{es, -1}, content: noSpan}
		if es < len(b) && b[es] == '{' {
			role, typ := noSpan, noSpan
			// One walk records the members (under wasm, one call into
			// assembly); a message with more than fields holds is walked
			// again with a callback per member.
			var fields [16]reqscan.Field
			var n int
			if m.e, n = ck.Object(es, 2, fields[:]); m.e >= 0 && n <= len(fields) {
				for _, f := range fields[:n] {
					sp := span{int(f.ValueStart), int(f.ValueEnd)}
					switch messageKey(f.Key(b)) {
					case keyRole:
						role = sp
					case keyType:
						typ = sp
					case keyContent:
						m.content = sp
					}
				}
			} else if m.e >= 0 {
				m.e = ck.Members(es, func(key []byte, s int) int {
					e := ck.Value(s, 3)
					if e < 0 {
						return -1
					}
					switch messageKey(key) {
					case keyRole:
						role = span{s, e}
					case keyType:
						typ = span{s, e}
					case keyContent:
						m.content = span{s, e}
					}
					return e
				})
			}
			if m.e >= 0 {
				who := roleOf(b, role)
				m.user, m.system = who == roleUser, who == roleSystem
				if r.proto == Responses {
					m.model = r.modelItemOf(who == roleAssistant, typ)
				} else {
					m.model = who == roleAssistant
				}
			}
		} else {
			m.e = ck.Value(es, 2)
		}
		if m.e < 0 {
			return -1
		}
		r.listInsert, r.listEmpty = m.e, false
		r.msgs = append(r.msgs, m)
		return m.e
	})
}

// The member keys indexList reads. A message has a few keys and there
// are hundreds of messages: one switch on the length settles most keys
// with a comparison or two against constants (a few loads, no call) and
// without looking for a backslash.
const (
	keyOther = iota
	keyRole
	keyType
	keyContent
)

// messageKey classifies a raw (still escaped) member key of a message.
func messageKey(key []byte) int {
	switch len(key) {
	case 4: // an escape is longer than its character: only these bytes match
		switch string(key) {
		case "role":
			return keyRole
		case "type":
			return keyType
		}
		return keyOther
	case 7:
		if string(key) == "content" {
			return keyContent
		}
		return keyOther
	case 10, 12: // Chat's tool_calls and tool_call_id, without a search
		if string(key) == "tool_calls" || string(key) == "tool_call_id" {
			return keyOther
		}
	}
	if len(key) < 4 || bytes.IndexByte(key, '\\') < 0 {
		return keyOther
	}
	switch {
	case reqscan.KeyIs(key, "role"):
		return keyRole
	case reqscan.KeyIs(key, "type"):
		return keyType
	case reqscan.KeyIs(key, "content"):
		return keyContent
	}
	return keyOther
}

// The roles indexList tells apart.
const (
	roleOther = iota
	roleUser
	roleSystem
	roleAssistant
)

// roleOf classifies the role value at sp (absent or not a string: other).
func roleOf(b []byte, sp span) int {
	if !sp.ok() {
		return roleOther
	}
	raw := b[sp.s:sp.e]
	// Comparisons with short constants, not a switch: they compile to a
	// few loads, and "tool" is settled without looking for a backslash.
	if string(raw) == `"user"` {
		return roleUser
	}
	if string(raw) == `"assistant"` {
		return roleAssistant
	}
	if string(raw) == `"tool"` {
		return roleOther
	}
	if string(raw) == `"system"` {
		return roleSystem
	}
	if len(raw) < 2 || raw[0] != '"' || bytes.IndexByte(raw, '\\') < 0 {
		return roleOther
	}
	switch s, _ := reqscan.Unquote(raw); s {
	case "user":
		return roleUser
	case "assistant":
		return roleAssistant
	case "system":
		return roleSystem
	}
	return roleOther
}

// stringIs reports whether raw is a JSON string literal decoding to want.
func stringIs(raw []byte, want string) bool {
	if len(raw) == len(want)+2 && raw[0] == '"' && string(raw[1:len(raw)-1]) == want {
		return true
	}
	if len(raw) < 2 || raw[0] != '"' {
		return false
	}
	if bytes.IndexByte(raw, '\\') < 0 { // no escapes: the bytes are the value, and they differ
		return false
	}
	s, ok := reqscan.Unquote(raw)
	return ok && s == want
}

// stringAt decodes the JSON string at sp, or "" if it is absent or not a string.
func (r *Request) stringAt(sp span) string {
	if !sp.ok() || r.body[sp.s] != '"' {
		return ""
	}
	s, _ := reqscan.Unquote(r.body[sp.s:sp.e])
	return s
}

// Protocol returns the protocol the request was parsed as.
func (r *Request) Protocol() Protocol { return r.proto }

// Model returns the top-level "model" string, or "".
func (r *Request) Model() string { return r.stringAt(r.model) }

// Stream reports whether the request asks for SSE ("stream": true),
// including a change made by SetStream.
func (r *Request) Stream() bool {
	if r.streamEdit >= 0 {
		return r.streamVal
	}
	return r.stream.ok() && string(r.body[r.stream.s:r.stream.e]) == "true"
}

// SetStream sets "stream" to v, adding the member if it is absent.
func (r *Request) SetStream(v bool) {
	val := "false"
	if v {
		val = "true"
	}
	switch {
	case r.streamEdit >= 0:
		e := &r.edits[r.streamEdit]
		if r.stream.ok() {
			e.repl = []byte(val)
		} else {
			e.repl = []byte(`"stream":` + val)
		}
	case r.stream.ok():
		r.streamEdit = r.addEdit(edit{start: r.stream.s, end: r.stream.e, repl: []byte(val)})
	default:
		r.streamEdit = r.insertMember([]byte(`"stream":`+val), 0)
	}
	r.streamVal = v
	r.dirty = true
}

// Edited reports whether any edit has been made.
func (r *Request) Edited() bool { return len(r.edits) > 0 }

// Bytes returns the body with every edit applied. Without edits it
// returns the original slice; otherwise a new one, cached until the next
// edit. Callers must not modify the result.
func (r *Request) Bytes() []byte {
	if len(r.edits) == 0 {
		return r.body
	}
	if !r.dirty && r.out != nil {
		return r.out
	}
	r.out, r.dirty = r.AppendBytes(nil), false
	return r.out
}

// Size returns the length of the body with every edit applied.
func (r *Request) Size() int {
	size := len(r.body)
	at := 0
	for _, i := range r.order() {
		e := &r.edits[i]
		if e.start < at {
			continue
		}
		size += len(e.pre) + len(e.repl) - (e.end - e.start)
		for _, m := range e.more {
			size += len(m)
		}
		at = e.end
	}
	return size
}

// AppendBytes appends the body with every edit applied to dst and returns
// the extended slice; it allocates only when dst lacks the room, so a
// caller that edits many bodies can reuse one buffer. It does not touch
// the cache Bytes returns.
func (r *Request) AppendBytes(dst []byte) []byte {
	order := r.order()
	dst = slices.Grow(dst, r.Size())
	at := 0
	for _, i := range order {
		e := &r.edits[i]
		if e.start < at { // overlapping edits cannot be built; keep the first
			continue
		}
		dst = append(dst, r.body[at:e.start]...)
		dst = append(dst, e.pre...)
		dst = append(dst, e.repl...)
		for _, m := range e.more {
			dst = append(dst, m...)
		}
		at = e.end
	}
	return append(dst, r.body[at:]...)
}

// order returns the edits' indexes in the order they apply.
func (r *Request) order() []int {
	order := r.orderBuf[:0]
	if cap(order) < len(r.edits) {
		order = make([]int, 0, max(len(r.edits), 4))
	}
	for i := range r.edits {
		order = append(order, i)
	}
	if len(order) <= 8 {
		// A request's usual few edits: an insertion sort (stable), whose
		// code is a fraction of the generic sort's, which a request under
		// load runs cold (docs/performance.md).
		for i := 1; i < len(order); i++ {
			for j := i; j > 0 && r.compareEdits(order[j], order[j-1]) < 0; j-- {
				order[j], order[j-1] = order[j-1], order[j]
			}
		}
	} else {
		slices.SortStableFunc(order, r.compareEdits)
	}
	r.orderBuf = order
	return order
}

// compareEdits orders edits a and b by where they apply.
func (r *Request) compareEdits(a, b int) int {
	ea, eb := &r.edits[a], &r.edits[b]
	if c := cmp.Compare(ea.start, eb.start); c != 0 {
		return c
	}
	if c := cmp.Compare(ea.end, eb.end); c != 0 {
		return c
	}
	return cmp.Compare(b2i(ea.member), b2i(eb.member))
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (r *Request) addEdit(e edit) int {
	if r.edits == nil {
		r.edits = make([]edit, 0, 4) // a request's usual edits, in one allocation
	}
	r.edits = append(r.edits, e)
	r.dirty = true
	return len(r.edits) - 1
}

// editAt returns the index of the edit replacing exactly sp, or -1.
func (r *Request) editAt(sp span) int {
	for i := range r.edits {
		if r.edits[i].start == sp.s && r.edits[i].end == sp.e {
			return i
		}
	}
	return -1
}

// insertAt inserts item at pos inside a container, with a leading comma
// unless the container was empty and nothing was inserted there yet.
func (r *Request) insertAt(pos int, empty bool, item []byte, tail int) int {
	pre := ","
	if empty {
		pre = ""
		for i := range r.edits {
			if r.edits[i].start == pos && r.edits[i].end == pos {
				pre = ","
				break
			}
		}
	}
	return r.addEdit(edit{start: pos, end: pos, pre: pre, repl: item, tail: tail})
}

// insertMember adds a `"key":value` member to the top-level object.
func (r *Request) insertMember(member []byte, tail int) int {
	i := r.insertAt(r.topInsert, r.topEmpty, member, tail)
	r.edits[i].member = true
	return i
}

// appendInto adds item to the open array at the end of edit ei's repl.
func (r *Request) appendInto(ei int, item []byte) {
	e := &r.edits[ei]
	pos := len(e.repl) - e.tail
	var b []byte
	b = append(b, e.repl[:pos]...)
	if pos > 0 && e.repl[pos-1] != '[' {
		b = append(b, ',')
	}
	b = append(b, item...)
	b = append(b, e.repl[pos:]...)
	e.repl = b
	r.dirty = true
}

// arrayEnd returns where a new element goes in the array at sp and
// whether the array is empty.
func (r *Request) arrayEnd(sp span) (pos int, empty bool) {
	pos, empty = sp.s+1, true
	reqscan.Elements(r.body, sp.s, func(vs, ve int) bool {
		pos, empty = ve, false
		return true
	})
	return pos, empty
}

// current returns the bytes that will stand at sp: an edit's replacement
// if one covers exactly sp, else the original bytes.
func (r *Request) current(sp span) (raw []byte, ei int) {
	if ei = r.editAt(sp); ei >= 0 {
		return r.edits[ei].repl, ei
	}
	return r.body[sp.s:sp.e], -1
}
