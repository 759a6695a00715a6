package llm

import (
	"github.com/chimehq/chime/internal/memeq"
	"github.com/chimehq/chime/llm/internal/reqscan"
)

// ToolsMemo remembers the client tools arrays that ParseRequestWith
// validated and indexed, so that a request carrying one of them again
// skips both. A coding agent sends the same tools with every request
// (Claude Code: 16.7 KB of its 18 KB first request), and validating them
// was the largest part of the filter's parse. An array is recognised by
// its bytes alone, compared in full, never by anything the client names,
// so requests of different sessions may share an entry. The zero value is
// ready to use; a ToolsMemo is not safe for concurrent use.
type ToolsMemo struct {
	entries [toolsMemoEntries]toolsMemoEntry
	next    int // the entry a new array replaces
	hits    int // arrays recognised (tests)
}

// toolsMemoEntries is how many arrays a memo holds: a filter serves a few
// clients (agents, versions) at once, each with its own tool set.
const toolsMemoEntries = 4

// toolsMemoMin is the smallest array worth remembering: below it the
// validation costs less than the copy a new entry takes. (A variable:
// FuzzToolsMemo remembers every array.)
var toolsMemoMin = 512

// toolsMemoMax is the largest array remembered, so that a client sending
// huge tool lists holds at most a bounded copy of them in the filter.
const toolsMemoMax = 256 << 10

type toolsMemoEntry struct {
	proto Protocol
	raw   []byte           // the array's bytes, copied
	names []clientToolName // indexTools' list, offsets from the array's start
	end   int              // clientToolsEnd, from the array's start
	empty bool             // clientToolsEmpty
	tag   bool             // a string in the array may hold a tag
}

// find returns the entry whose array starts rest, or nil. A JSON value
// ends where its own bytes say, so rest holds exactly that array there:
// the same bytes validate and index the same way wherever they sit.
func (m *ToolsMemo) find(p Protocol, rest []byte) *toolsMemoEntry {
	for i := range m.entries {
		e := &m.entries[i]
		if e.raw != nil && e.proto == p && len(rest) >= len(e.raw) && memeq.Equal(rest[:len(e.raw)], e.raw) {
			m.hits++
			return e
		}
	}
	return nil
}

// store remembers the array b[vs:ve] as indexTools left it in r.
func (m *ToolsMemo) store(r *Request, vs, ve int, tag bool) {
	e := &m.entries[m.next]
	m.next = (m.next + 1) % toolsMemoEntries
	e.proto, e.end, e.empty, e.tag = r.proto, r.clientToolsEnd-vs, r.clientToolsEmpty, tag
	e.raw = append(e.raw[:0], r.body[vs:ve]...)
	e.names = e.names[:0]
	for _, t := range r.clientTools {
		e.names = append(e.names, t.shift(-vs))
	}
}

// shift moves the name's offsets by d.
func (t clientToolName) shift(d int) clientToolName {
	t.name.s += d
	t.name.e += d
	t.el.s += d
	t.el.e += d
	return t
}

// indexToolsMemo is indexTools through r's memo: a remembered array is
// taken from it, a new one indexed and remembered.
func (r *Request) indexToolsMemo(ck *reqscan.Checker, vs int) int {
	m := r.memo
	if e := m.find(r.proto, r.body[vs:]); e != nil {
		r.clientTools, r.clientToolKeys = r.clientTools[:0], 0
		for _, t := range e.names {
			r.addClientTool(t.shift(vs))
		}
		r.clientToolsEnd, r.clientToolsEmpty = vs+e.end, e.empty
		if e.tag {
			ck.SetTagHint(true)
		}
		return vs + len(e.raw)
	}
	was := ck.SetTagHint(false)
	ve := r.indexTools(ck, vs)
	tag := ck.TagHint()
	ck.SetTagHint(was || tag)
	if n := ve - vs; n >= toolsMemoMin && n <= toolsMemoMax {
		m.store(r, vs, ve, tag)
	}
	return ve
}
