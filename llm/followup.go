package llm

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// ToolResult is the output of one executed tool call, answered in a
// followup (docs/architecture.md: the host loops tool → followup → tool).
type ToolResult struct {
	CallID string // the ToolCall.ID it answers
	Name   string // the tool's name
	Output string // the tool's result, usually JSON text
}

// ErrFollowup reports a followup that cannot be built validly, such as a
// tool call left without a result.
var ErrFollowup = errors.New("llm: cannot build followup")

// AssignCallIDs gives every call of t that has no id a generated one,
// derived from request (the conversation the turn answers) and the call's
// index, so ids are stable for the same inputs and differ between hops of
// one chain. Providers require ids to pair calls with results (docs/protocols.md).
func AssignCallIDs(p Protocol, request []byte, t *Turn) {
	if t == nil {
		return
	}
	salt := ""
	for i := range t.ToolCalls {
		if t.ToolCalls[i].ID != "" {
			continue
		}
		if salt == "" {
			h := fnv.New32a()
			h.Write(request)
			salt = strconv.FormatUint(uint64(h.Sum32()), 16)
		}
		prefix := "call_chime_"
		if p == Messages {
			prefix = "toolu_chime_"
		}
		t.ToolCalls[i].ID = prefix + salt + "_" + strconv.Itoa(i)
	}
}

// BuildFollowup returns the body of a followup request (docs/architecture.md response
// path, §7): request — the body exactly as the provider received it — plus
// the assistant turn in p's shape, plus either the tool results or the
// user text (or both, results first), with "stream" forced to false.
// Everything of request outside the insertion points is kept byte for byte.
//
//   - Chat: an assistant message with content, tool_calls and the
//     provider's extra members (reasoning_content, …), then one role:tool
//     message per result (tool_call_id), then a user message.
//   - Responses: the turn's output items appended to input in the
//     provider's order — reasoning and other raw items exactly as received
//     (encrypted_content included), an assistant message item for the text,
//     one function_call item per call — then one function_call_output item
//     per result (call_id), then a user message item. A string input
//     becomes the list form first.
//   - Messages: an assistant message with the provider's blocks in their
//     order — thinking, redacted_thinking and other raw blocks exactly as
//     received (signatures included), one text block, tool_use blocks —
//     then one user message holding the tool_result blocks (tool_use_id)
//     and the text after them, so roles alternate and every tool_use is
//     answered (docs/protocols.md#injected-user-text). Both go after a trailing
//     role:"system" message (Claude Code's mid-conversation-system beta):
//     the assistant turn answered the conversation including it.
//
// Provider content is replayed verbatim (docs/architecture.md): providers reject a
// tool-result turn whose assistant message lost its signed thinking block
// or a function_call without its reasoning item. It is replayed only with
// an assistant message that has text or tool calls.
//
// An empty assistant turn (no text, no calls) adds no assistant message;
// for Messages the user text then joins the final user message, as
// AppendUserText does. Calls without ids get AssignCallIDs' ids; a result
// without CallID answers the first unanswered call of the same name. Every
// call of turn must have a result, and every result a call, or the error
// wraps ErrFollowup. A body ParseRequest rejects gives its error.
func BuildFollowup(p Protocol, request []byte, turn *Turn, results []ToolResult, userText string) ([]byte, error) {
	r, err := ParseRequest(p, request)
	if err != nil {
		return nil, err
	}
	if turn == nil {
		turn = &Turn{}
	}
	if err := checkItems(turn.Items); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFollowup, err)
	}
	t := *turn
	t.ToolCalls = append([]ToolCall(nil), turn.ToolCalls...)
	generated := make([]bool, len(t.ToolCalls))
	for i, c := range t.ToolCalls {
		generated[i] = c.ID == ""
	}
	AssignCallIDs(p, request, &t)
	paired, err := pairResults(&t, generated, results)
	if err != nil {
		return nil, err
	}
	if len(paired) == 0 && userText == "" {
		return nil, fmt.Errorf("%w: neither tool results nor user text to send", ErrFollowup)
	}

	var items [][]byte
	switch p {
	case Chat:
		items = chatFollowupItems(&t, paired, userText)
	case Responses:
		items = responsesFollowupItems(&t, paired, userText)
	case Messages:
		if t.Text == "" && len(t.ToolCalls) == 0 {
			// Nothing to say as the assistant: the text joins the final
			// user turn, keeping roles alternating.
			if err := r.AppendUserText(userText); err != nil {
				return nil, err
			}
			break
		}
		items = messagesFollowupItems(&t, paired, userText)
	default:
		return nil, fmt.Errorf("%w: unsupported protocol %v", ErrBodyShape, p)
	}
	if len(items) > 0 {
		r.appendItems(joinItems(items))
	}
	r.SetStream(false)
	if p == Chat {
		r.nullStreamOptions()
	}
	return r.Bytes(), nil
}

// pairResults orders results like t's calls and fills missing CallIDs.
func pairResults(t *Turn, generated []bool, results []ToolResult) ([]ToolResult, error) {
	if len(results) == 0 {
		if len(t.ToolCalls) > 0 {
			return nil, fmt.Errorf("%w: tool call %q (%s) has no result", ErrFollowup, t.ToolCalls[0].ID, t.ToolCalls[0].Name)
		}
		return nil, nil
	}
	out := make([]ToolResult, len(t.ToolCalls))
	done := make([]bool, len(t.ToolCalls))
	for _, res := range results {
		idx := -1
		for i, c := range t.ToolCalls {
			if done[i] {
				continue
			}
			if res.CallID != "" && c.ID == res.CallID {
				idx = i
				break
			}
			if res.CallID == "" && generated[i] && c.Name == res.Name {
				idx = i
				break
			}
		}
		if idx < 0 {
			return nil, fmt.Errorf("%w: result for %q (%s) answers no call of the turn", ErrFollowup, res.CallID, res.Name)
		}
		done[idx] = true
		res.CallID = t.ToolCalls[idx].ID
		if res.Name == "" {
			res.Name = t.ToolCalls[idx].Name
		}
		out[idx] = res
	}
	for i, ok := range done {
		if !ok {
			return nil, fmt.Errorf("%w: tool call %q (%s) has no result", ErrFollowup, t.ToolCalls[i].ID, t.ToolCalls[i].Name)
		}
	}
	return out, nil
}

func chatFollowupItems(t *Turn, results []ToolResult, userText string) [][]byte {
	var items [][]byte
	if t.Text != "" || len(t.ToolCalls) > 0 {
		b := []byte(`{"role":"assistant",`)
		if extra := t.fields(); extra != "" {
			b = append(append(b, extra...), ',')
		}
		b = append(b, `"content":`...)
		if t.Text == "" {
			b = append(b, "null"...)
		} else {
			b = reqscan.AppendQuote(b, t.Text)
		}
		if len(t.ToolCalls) > 0 {
			b = append(b, `,"tool_calls":[`...)
			for i, c := range t.ToolCalls {
				if i > 0 {
					b = append(b, ',')
				}
				b = append(b, `{"id":`...)
				b = reqscan.AppendQuote(b, c.ID)
				b = append(b, `,"type":"function","function":{"name":`...)
				b = reqscan.AppendQuote(b, c.Name)
				b = append(b, `,"arguments":`...)
				b = reqscan.AppendQuote(b, argumentsOrEmpty(c.Arguments))
				b = append(b, "}}"...)
			}
			b = append(b, ']')
		}
		items = append(items, append(b, '}'))
	}
	for _, res := range results {
		b := []byte(`{"role":"tool","tool_call_id":`)
		b = reqscan.AppendQuote(b, res.CallID)
		b = append(b, `,"content":`...)
		b = reqscan.AppendQuote(b, res.Output)
		items = append(items, append(b, '}'))
	}
	if userText != "" {
		b := append([]byte(`{"role":"user","content":`), reqscan.AppendQuote(nil, userText)...)
		items = append(items, append(b, '}'))
	}
	return items
}

func responsesFollowupItems(t *Turn, results []ToolResult, userText string) [][]byte {
	var items [][]byte
	// Item ids of messages and calls are left out: with store=false the
	// provider cannot resolve them, and they are optional on input items.
	// Raw items (reasoning) go back exactly as received.
	if t.Text != "" || len(t.ToolCalls) > 0 {
		for _, seg := range t.segments() {
			switch seg.kind {
			case ItemRaw:
				items = append(items, []byte(seg.raw))
			case ItemText:
				b := []byte(`{"type":"message","role":"assistant","content":[{"type":"output_text","text":`)
				b = reqscan.AppendQuote(b, t.Text)
				items = append(items, append(b, "}]}"...))
			case ItemToolCall:
				c := t.ToolCalls[seg.call]
				b := []byte(`{"type":"function_call","call_id":`)
				b = reqscan.AppendQuote(b, c.ID)
				b = append(b, `,"name":`...)
				b = reqscan.AppendQuote(b, c.Name)
				b = append(b, `,"arguments":`...)
				b = reqscan.AppendQuote(b, argumentsOrEmpty(c.Arguments))
				items = append(items, append(b, '}'))
			}
		}
	}
	for _, res := range results {
		b := []byte(`{"type":"function_call_output","call_id":`)
		b = reqscan.AppendQuote(b, res.CallID)
		b = append(b, `,"output":`...)
		b = reqscan.AppendQuote(b, res.Output)
		items = append(items, append(b, '}'))
	}
	if userText != "" {
		items = append(items, inputItem(reqscan.AppendQuote(nil, userText)))
	}
	return items
}

func messagesFollowupItems(t *Turn, results []ToolResult, userText string) [][]byte {
	b := []byte(`{"role":"assistant","content":[`)
	for i, seg := range t.segments() {
		if i > 0 {
			b = append(b, ',')
		}
		switch seg.kind {
		case ItemRaw:
			b = append(b, seg.raw...) // thinking and its signature, exactly as received
		case ItemText:
			b = append(b, textBlock(reqscan.AppendQuote(nil, t.Text))...)
		case ItemToolCall:
			c := t.ToolCalls[seg.call]
			b = append(b, `{"type":"tool_use","id":`...)
			b = reqscan.AppendQuote(b, c.ID)
			b = append(b, `,"name":`...)
			b = reqscan.AppendQuote(b, c.Name)
			b = append(b, `,"input":`...)
			b = append(b, messagesInput(c.Arguments)...)
			b = append(b, '}')
		}
	}
	items := [][]byte{append(b, "]}"...)}
	if len(results) == 0 && userText == "" {
		return items
	}
	u := []byte(`{"role":"user","content":[`)
	for i, res := range results {
		if i > 0 {
			u = append(u, ',')
		}
		u = append(u, `{"type":"tool_result","tool_use_id":`...)
		u = reqscan.AppendQuote(u, res.CallID)
		u = append(u, `,"content":`...)
		u = reqscan.AppendQuote(u, res.Output)
		u = append(u, '}')
	}
	if userText != "" {
		if len(results) > 0 {
			u = append(u, ',')
		}
		u = append(u, textBlock(reqscan.AppendQuote(nil, userText))...)
	}
	return append(items, append(u, "]}"...))
}

// argumentsOrEmpty keeps the provider's argument text; "" becomes "{}"
// because Chat and Responses want a JSON string that parses.
func argumentsOrEmpty(args string) string {
	if args == "" {
		return "{}"
	}
	return args
}

func joinItems(items [][]byte) []byte {
	n := len(items)
	for _, it := range items {
		n += len(it)
	}
	out := make([]byte, 0, n)
	for i, it := range items {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, it...)
	}
	return out
}

// appendItems adds raw, one or more comma-separated items, at the end of
// messages[] (Chat, Messages) or input[] (Responses; a string, null or
// missing input becomes a list first).
func (r *Request) appendItems(raw []byte) {
	if r.proto != Responses {
		r.insertAt(r.listInsert, r.listEmpty, raw, 0)
		return
	}
	if r.inputEdit >= 0 {
		r.appendInto(r.inputEdit, raw)
		return
	}
	switch {
	case !r.input.ok():
		r.inputEdit = r.insertMember(append(append([]byte(`"input":[`), raw...), ']'), 1)
	case r.inputString:
		r.inputEdit = r.listFromString(r.input, `{"type":"message","role":"user","content":[{"type":"input_text","text":`, `}]}`, raw)
	case r.body[r.input.s] == 'n':
		r.inputEdit = r.addEdit(edit{start: r.input.s, end: r.input.e, repl: append(append([]byte{'['}, raw...), ']'), tail: 1})
	default:
		r.insertAt(r.listInsert, r.listEmpty, raw, 0)
	}
}

// nullStreamOptions sets a Chat "stream_options" to null: OpenAI rejects
// stream_options on a request that does not stream.
func (r *Request) nullStreamOptions() {
	top := reqscan.SkipSpace(r.body, 0)
	vs, ve := reqscan.Member(r.body, top, "stream_options")
	if vs < 0 || string(r.body[vs:ve]) == "null" {
		return
	}
	r.addEdit(edit{start: vs, end: ve, repl: []byte("null")})
}
