package llm

import (
	"errors"
	"fmt"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// ErrEmptyText is returned by AppendUserText for empty text, which
// Anthropic rejects and no protocol needs.
var ErrEmptyText = errors.New("llm: appended user text is empty")

// AppendUserText adds text as user input at the end of the conversation,
// in the shape docs/protocols.md gives each protocol:
//   - Chat: a new {"role":"user","content":text} message.
//   - Responses: a new user message item with one input_text part. A
//     string input first becomes the item list form, its text as the
//     first item (dropped if stripping left it empty); a missing or null
//     input becomes a list.
//   - Messages: a text block at the end of the final user message, after
//     any tool_result blocks (string content becomes a block list, and a
//     StrippedPlaceholder block is replaced by text), when only role:"system"
//     messages follow it (Claude Code's mid-conversation-system beta; they
//     stay where they are); otherwise a new user message at the end.
//
// Several calls append in call order.
func (r *Request) AppendUserText(text string) error {
	if text == "" {
		return ErrEmptyText
	}
	switch r.proto {
	case Chat:
		const head = `{"role":"user","content":`
		msg := append(r.bytesFor(len(head)+len(text)+16), head...) // no allocation, usually
		msg = append(reqscan.AppendQuote(msg, text), '}')
		r.insertAt(r.listInsert, r.listEmpty, msg, 0)
		return nil
	case Responses:
		return r.appendResponses(text)
	case Messages:
		return r.appendMessages(text)
	}
	return fmt.Errorf("%w: unsupported protocol %v", ErrBodyShape, r.proto)
}

// inputItem renders a Responses user message item around a quoted string.
func inputItem(quoted []byte) []byte {
	b := append([]byte(`{"type":"message","role":"user","content":[{"type":"input_text","text":`), quoted...)
	return append(b, "}]}"...)
}

// textBlock renders an Anthropic text block around a quoted string.
func textBlock(quoted []byte) []byte {
	b := append([]byte(`{"type":"text","text":`), quoted...)
	return append(b, '}')
}

func (r *Request) appendResponses(text string) error {
	item := inputItem(reqscan.AppendQuote(nil, text))
	if r.inputEdit >= 0 {
		r.appendInto(r.inputEdit, item)
		return nil
	}
	switch {
	case !r.input.ok():
		r.inputEdit = r.insertMember(append(append([]byte(`"input":[`), item...), ']'), 1)
	case r.inputString:
		r.inputEdit = r.listFromString(r.input, `{"type":"message","role":"user","content":[{"type":"input_text","text":`, `}]}`, item)
	case r.body[r.input.s] == 'n': // null
		r.inputEdit = r.addEdit(edit{start: r.input.s, end: r.input.e,
			repl: append(append([]byte{'['}, item...), ']'), tail: 1})
	default: // an array, checked by ParseRequest
		r.insertAt(r.listInsert, r.listEmpty, item, 0)
	}
	return nil
}

func (r *Request) appendMessages(text string) error {
	quoted := reqscan.AppendQuote(nil, text)
	block := textBlock(quoted)
	if r.finalEdit >= 0 {
		r.appendInto(r.finalEdit, block)
		return nil
	}
	u := r.finalUser()
	if u < 0 {
		msg := append(append([]byte(`{"role":"user","content":[`), block...), "]}"...)
		r.finalEdit = r.insertAt(r.listInsert, r.listEmpty, msg, 2)
		return nil
	}
	c := r.msgs[u].content
	if !c.ok() {
		return fmt.Errorf("%w: final user message has no content", ErrBodyShape)
	}
	switch r.body[c.s] {
	case '"':
		r.finalEdit = r.listFromString(c, `{"type":"text","text":`, `}`, block)
	case '[':
		// Text replaces a placeholder this message got from stripping.
		for i := range r.edits {
			e := &r.edits[i]
			if e.placeholder && e.start > c.s && e.end < c.e {
				e.repl, e.placeholder = quoted, false
				r.dirty = true
				return nil
			}
		}
		pos, empty := r.arrayEnd(c)
		r.insertAt(pos, empty, block, 0)
	case 'n':
		r.finalEdit = r.addEdit(edit{start: c.s, end: c.e, repl: append(append([]byte{'['}, block...), ']'), tail: 1})
	default:
		return fmt.Errorf("%w: final user message content is neither a string nor a list", ErrBodyShape)
	}
	return nil
}

// finalUser returns the index of the final user message when only
// role:"system" messages follow it, or -1. A new user message after such a
// system message would make two user turns in a row, which the Messages API
// rejects (docs/protocols.md#injected-user-text).
func (r *Request) finalUser() int {
	for i := len(r.msgs) - 1; i >= 0; i-- {
		switch {
		case r.msgs[i].user:
			return i
		case !r.msgs[i].system:
			return -1
		}
	}
	return -1
}

// listFromString turns the string value at sp into a list whose first
// element is open+string+close, followed by item, and returns the edit
// later items go into. The string is not copied, so stripping it works
// whether it happens before or after. A string that is empty, or that
// stripping emptied, is dropped instead of wrapped.
func (r *Request) listFromString(sp span, open, close string, item []byte) int {
	cur, ei := r.current(sp)
	if string(cur) == `""` || (ei >= 0 && r.edits[ei].placeholder) {
		list := append(append([]byte{'['}, item...), ']')
		if ei < 0 {
			return r.addEdit(edit{start: sp.s, end: sp.e, repl: list, tail: 1})
		}
		e := &r.edits[ei]
		e.repl, e.tail, e.placeholder = list, 1, false
		r.dirty = true
		return ei
	}
	r.addEdit(edit{start: sp.s, end: sp.s, repl: []byte("[" + open)})
	return r.addEdit(edit{start: sp.e, end: sp.e, repl: append(append([]byte(close+","), item...), ']'), tail: 1})
}
