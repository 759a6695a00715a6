package llm

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// EventKind is the set of canonical meanings one SSE event carries. One
// event may carry several: a Chat chunk can hold text and a finish reason, a
// Responses response.completed is a finish, usage and the terminal at once.
type EventKind uint16

const (
	KindStart         EventKind = 1 << iota // first event of the turn (message_start, response.created, first Chat chunk)
	KindTextDelta                           // Text holds a piece of assistant text
	KindToolCallStart                       // a Calls entry names a new tool call (ID, Name)
	KindToolCallArgs                        // a Calls entry holds a piece of arguments
	KindFinish                              // Finish holds the turn's finish reason
	KindUsage                               // Usage holds the cumulative usage known so far
	KindTerminal                            // the protocol's end of stream ([DONE], message_stop, response.completed/incomplete/failed)
	KindError                               // the provider reported an error in-stream; ErrorMessage says what
	KindTextEnd                             // closes assistant text: a Messages text block's content_block_stop; a Responses message item's output_text.done, content_part.done or output_item.done
)

// KindOther is the empty set: pings, comments, block stops, in_progress, ….
const KindOther EventKind = 0

// Has reports whether k includes every meaning in x.
func (k EventKind) Has(x EventKind) bool { return k&x == x && x != 0 }

func (k EventKind) String() string {
	if k == KindOther {
		return "other"
	}
	names := []string{"start", "text", "tool_start", "tool_args", "finish", "usage", "terminal", "error", "text_end"}
	var parts []string
	for i, n := range names {
		if k&(1<<i) != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, "|")
}

// Event is one SSE event as it appeared on the wire plus its canonical
// meaning (docs/architecture.md#response-path, SSE). Raw is the exact bytes, including any
// blank lines before it and the blank line that ended it: the concatenation
// of every Raw a reader returns equals its input, so the filter can forward
// or withhold events byte-identically.
type Event struct {
	Raw  []byte // exact wire bytes
	Name string // the "event:" field ("" if none)
	Data []byte // the "data:" lines joined with "\n"
	Type string // the JSON "type" (Chat: "object"), "[DONE]", or Name when there is no JSON

	Kind  EventKind
	Index int // Chat choice index, Responses output_index, Messages content block index; -1 if none

	ID, Model    string      // with KindStart
	Text         string      // with KindTextDelta
	Calls        []CallDelta // with KindToolCallStart / KindToolCallArgs
	Finish       Finish      // with KindFinish
	Usage        Usage       // with KindUsage
	ErrorMessage string      // with KindError

	// Part is provider content other than text and tool calls, as JSON
	// text, for TurnBuilder (docs/architecture.md: provider content is replayed
	// verbatim); PartKind says what it is. It adds no Kind.
	PartKind PartKind
	Part     string
}

// PartKind says what an Event's Part holds.
type PartKind uint8

const (
	PartNone PartKind = iota
	// PartBlockStart: Messages content_block_start of a block other than
	// text and tool_use (thinking, redacted_thinking, server_tool_use, …);
	// Part is the content_block.
	PartBlockStart
	// PartBlockDelta: Messages content_block_delta other than text_delta and
	// input_json_delta (thinking_delta, signature_delta, …); Part is the delta.
	PartBlockDelta
	// PartItemDone: Responses response.output_item.done of an item other
	// than message and function_call (reasoning, …); Part is the item.
	PartItemDone
	// PartFields: Chat delta members other than role, content, tool_calls,
	// function_call, refusal (reasoning_content, …); Part is an object of them.
	PartFields
)

// CallDelta is one tool call fragment within an event.
type CallDelta struct {
	Index     int    // Chat tool_calls[].index, Responses output_index, Messages block index
	ID, Name  string // set when the call starts
	Arguments string // a piece of the arguments JSON text
}

// MaxEventBytes bounds a single buffered event; a longer one is an error, so
// a broken upstream cannot grow the filter's memory without limit.
const MaxEventBytes = 16 << 20

// ErrEventTooLarge is returned when one event exceeds MaxEventBytes.
var ErrEventTooLarge = errors.New("llm: SSE event exceeds MaxEventBytes")

// ErrIncompleteEvent is returned by Close when the stream ended inside an
// event (no terminating blank line). The event is still returned.
var ErrIncompleteEvent = errors.New("llm: SSE stream ended inside an event")

// StreamReader splits an SSE byte stream of one protocol into Events. Chunks
// may break anywhere: mid-line, mid-UTF-8, between CR and LF. Line endings
// may be LF, CRLF or CR; comments and id/retry fields are kept in Raw only.
type StreamReader struct {
	p      Protocol
	buf    []byte // bytes read and not yet dispatched, from buf[base]
	base   int    // where the pending event starts in buf; the positions below are buf's
	look   int    // where to resume searching for a line end
	nl     int    // a known LF at or after look, if nl >= look
	noLF   int    // buf[:noLF] past look holds no LF (avoids rescans on CR-only input)
	line   int    // start of the current, unfinished line
	fields bool   // the pending event has a non-blank line
	name   [2]int // span of the event field value, if any
	data   [][2]int
	closed bool
	err    error
	st     classifyState
	evs    []Event // Feed's result, reused by the next Feed
	// arena holds the events' bytes, copied out of buf: one allocation for
	// many events instead of one each (in the wasm filter each costs about
	// as much as reading the event). Bytes once written are never written
	// again, so events, and strings made from them, may point into it.
	arena []byte
}

// NewStreamReader returns a reader for protocol p's SSE framing.
func NewStreamReader(p Protocol) *StreamReader {
	return &StreamReader{p: p, nl: -1}
}

// Feed consumes the next chunk and returns the events it completed. The
// chunk is not retained. The returned slice (not the events in it) is
// reused by the next Feed.
func (r *StreamReader) Feed(chunk []byte) ([]Event, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.closed {
		return nil, errors.New("llm: Feed after Close")
	}
	r.buf = append(r.buf, chunk...)
	clear(r.evs) // the previous events belong to the caller now
	if r.evs == nil {
		// A whole answer often comes in one chunk: room for a short
		// one's events at once, not a doubling per few events.
		r.evs = make([]Event, 0, firstEvents)
	}
	evs := r.scan(r.evs[:0])
	r.evs = evs
	r.compact()
	if r.err == nil && len(r.buf) > MaxEventBytes {
		r.err = ErrEventTooLarge
	}
	return evs, r.err
}

// Close ends the stream and returns any final event. A trailing event that
// lacks its blank line is still parsed and returned, with ErrIncompleteEvent;
// trailing blank lines alone come back as a KindOther event so no byte is lost.
func (r *StreamReader) Close() ([]Event, error) {
	if r.err != nil {
		return nil, r.err
	}
	if r.closed {
		return nil, nil
	}
	r.closed = true
	evs := r.scan(nil)
	r.compact()
	if len(r.buf) == 0 {
		return evs, nil
	}
	if r.line < len(r.buf) {
		r.field(r.line, len(r.buf))
	}
	incomplete := r.fields
	evs = append(evs, r.dispatch(len(r.buf)))
	if incomplete {
		return evs, ErrIncompleteEvent
	}
	return evs, nil
}

// scan consumes complete lines and dispatches complete events.
func (r *StreamReader) scan(evs []Event) []Event {
	for {
		seg := r.buf[r.look:]
		nl := r.findLF()
		lim := seg
		if nl >= 0 {
			lim = seg[:nl]
		}
		end, next := -1, -1
		if cr := bytes.IndexByte(lim, '\r'); cr >= 0 {
			switch {
			case nl == cr+1: // CRLF
				end, next = r.look+cr, r.look+nl+1
			case cr+1 < len(seg): // lone CR
				end, next = r.look+cr, r.look+cr+1
			case r.closed: // CR at the very end of input
				end, next = r.look+cr, r.look+cr+1
			default: // CR at the end of the buffer: an LF may follow
				r.look += cr
				return evs
			}
		} else if nl >= 0 {
			end, next = r.look+nl, r.look+nl+1
		} else {
			r.look = len(r.buf)
			return evs
		}
		if end == r.line { // blank line
			if r.fields {
				evs = append(evs, r.dispatch(next))
				continue
			}
			r.line, r.look = next, next // leading blank line: stays with the next event
			continue
		}
		r.field(r.line, end)
		r.line, r.look = next, next
	}
}

// findLF returns the offset from look of the next LF, or -1, remembering
// what it searched so CR-only streams stay linear.
func (r *StreamReader) findLF() int {
	if r.nl >= r.look {
		return r.nl - r.look
	}
	from := max(r.look, r.noLF)
	i := bytes.IndexByte(r.buf[from:], '\n')
	if i < 0 {
		r.noLF = len(r.buf)
		return -1
	}
	r.nl = from + i
	return r.nl - r.look
}

// field records one non-blank line buf[start:end].
func (r *StreamReader) field(start, end int) {
	r.fields = true
	line := r.buf[start:end]
	colon := bytes.IndexByte(line, ':')
	if colon == 0 {
		return // comment
	}
	name, vstart := line, end
	if colon > 0 {
		name = line[:colon]
		vstart = start + colon + 1
		if vstart < end && r.buf[vstart] == ' ' {
			vstart++
		}
	}
	switch string(name) {
	case "data":
		r.data = append(r.data, [2]int{vstart, end})
	case "event":
		r.name = [2]int{vstart, end}
	}
}

// firstEvents is the room a reader's first Feed makes for events.
const firstEvents = 8

// Arena blocks start small (most answers are a few KB) and double up to
// arenaMax; a larger event gets a block of its own size.
const (
	arenaMin = 1 << 10
	arenaMax = 64 << 10
)

// keep copies b into the arena and returns the copy, capped so an append
// to it never writes into the arena.
func (r *StreamReader) keep(b []byte) []byte {
	if cap(r.arena)-len(r.arena) < len(b) {
		r.arena = make([]byte, 0, max(len(b), min(2*cap(r.arena), arenaMax), arenaMin))
	}
	at := len(r.arena)
	r.arena = append(r.arena, b...)
	return r.arena[at : at+len(b) : at+len(b)]
}

// eventNames are the event field values the protocols send, by length, so
// that naming an event costs no allocation and no hashing: a map's string
// hash is Go's portable one in a wasm guest, slower than comparing the one
// or two names of the same length.
var eventNames = func() (by [64][]string) {
	for _, n := range []string{
		"message_start", "content_block_start", "content_block_delta", "content_block_stop",
		"message_delta", "message_stop", "ping", "error",
		"response.created", "response.in_progress", "response.output_item.added", "response.output_item.done",
		"response.content_part.added", "response.content_part.done", "response.output_text.delta",
		"response.output_text.done", "response.function_call_arguments.delta",
		"response.function_call_arguments.done", "response.reasoning_summary_text.delta",
		"response.reasoning_summary_part.added", "response.reasoning_summary_part.done",
		"response.reasoning_summary_text.done", "response.completed", "response.incomplete", "response.failed",
	} {
		by[len(n)] = append(by[len(n)], n)
	}
	return by
}()

// eventName is string(b), without an allocation for a known name.
func eventName(b []byte) string {
	if len(b) < len(eventNames) {
		for _, n := range eventNames[len(b)] {
			if string(b) == n {
				return n
			}
		}
	}
	return string(b)
}

// dispatch turns buf[:n] into an Event and drops it from the buffer.
func (r *StreamReader) dispatch(n int) Event {
	b := r.base
	raw := r.keep(r.buf[b:n])
	ev := Event{Raw: raw, Index: -1}
	if r.name[1] > r.name[0] {
		ev.Name = eventName(raw[r.name[0]-b : r.name[1]-b])
	}
	switch len(r.data) {
	case 0:
	case 1:
		ev.Data = raw[r.data[0][0]-b : r.data[0][1]-b : r.data[0][1]-b]
	default:
		var joined []byte
		for i, d := range r.data {
			if i > 0 {
				joined = append(joined, '\n')
			}
			joined = append(joined, raw[d[0]-b:d[1]-b]...)
		}
		ev.Data = joined
	}
	// The next event starts at n; the bytes before it are dropped once per
	// Feed (compact), not moved after each event: a chunk of many events
	// moved what followed each one, quadratic in the chunk.
	r.base, r.look, r.line = n, n, n
	r.fields = false
	r.name = [2]int{}
	r.data = r.data[:0]
	if len(ev.Data) > 0 {
		r.st.classify(r.p, &ev)
	} else {
		ev.Type = ev.Name
	}
	return ev
}

// compact drops the dispatched bytes before base from buf.
func (r *StreamReader) compact() {
	b := r.base
	if b == 0 {
		return
	}
	rest := copy(r.buf, r.buf[b:])
	r.buf = r.buf[:rest]
	r.base = 0
	r.look -= b
	r.line -= b
	r.nl -= b
	r.noLF = max(0, r.noLF-b)
	if r.name != [2]int{} {
		r.name[0] -= b
		r.name[1] -= b
	}
	for i := range r.data {
		r.data[i][0] -= b
		r.data[i][1] -= b
	}
	if len(r.buf) == 0 && cap(r.buf) > 64<<10 {
		r.buf = nil // do not pin a large buffer after a large event
	}
}

// MustHold reports whether the filter has to hold this event until it knows
// whether a continuation follows (docs/architecture.md#sse-responses): the close of the assistant's
// text block or message item, the finish, the terminal event and Chat's
// usage-only chunk. The continuation goes into the still open text block;
// the Splicer then re-renders the closing events once, for the merged turn.
func (e Event) MustHold() bool {
	return e.Kind&(KindTextEnd|KindFinish|KindTerminal) != 0 || e.Kind == KindUsage
}

// StartsToolCall reports whether the event starts a call to one of the named
// tools: from that event on, the filter withholds the stream (docs/architecture.md#sse-responses).
func (e Event) StartsToolCall(names []string) bool {
	if !e.Kind.Has(KindToolCallStart) {
		return false
	}
	for _, c := range e.Calls {
		if c.Name != "" && slices.Contains(names, c.Name) {
			return true
		}
	}
	return false
}

// String summarises an event for test failures and logs.
func (e Event) String() string {
	return fmt.Sprintf("{%s %q idx=%d text=%q calls=%v finish=%v usage=%v}", e.Kind, e.Type, e.Index, e.Text, e.Calls, e.Finish, e.Usage)
}
