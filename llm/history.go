package llm

import (
	"bytes"
	"fmt"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// TrimHistory keeps the last turns user turns of a request's conversation
// and drops the older ones, so that a wake built from a session's last
// request costs a bounded number of prompt tokens (docs/scheduler.md#runs).
//
// A user turn starts at a user message a person wrote: for Messages one
// that is not only tool_result blocks, for Chat a role:"user" message, for
// Responses a user message item. Cutting only there keeps every tool call
// with its result and every reasoning item or thinking block with the
// answer it belongs to. System and developer messages before the first user
// turn (Chat, Responses) stay, as do Messages' top-level system and
// Responses' instructions. A body with fewer turns, or turns <= 0, comes
// back unchanged.
func TrimHistory(p Protocol, body []byte, turns int) ([]byte, error) {
	if turns <= 0 {
		return body, nil
	}
	if !gjson.ValidBytes(body) {
		return nil, fmt.Errorf("%w: not JSON", ErrBodyShape)
	}
	path := "messages"
	if p == Responses {
		path = "input"
	}
	list := gjson.GetBytes(body, path)
	if !list.IsArray() {
		if p == Responses && (list.Type == gjson.String || !list.Exists() || list.Type == gjson.Null) {
			return body, nil // a string input is one turn
		}
		return nil, fmt.Errorf("%w: %s is not a list", ErrBodyShape, path)
	}
	items := list.Array()
	var starts []int
	head := -1 // items before the first user turn that are kept wherever the cut falls
	for i, it := range items {
		if startsUserTurn(p, it) {
			starts = append(starts, i)
			continue
		}
		if len(starts) == 0 && isInstruction(p, it) {
			head = i
		}
	}
	if len(starts) <= turns {
		return body, nil
	}
	cut := starts[len(starts)-turns]
	var b bytes.Buffer
	b.WriteByte('[')
	n := 0
	add := func(raw string) {
		if n > 0 {
			b.WriteByte(',')
		}
		b.WriteString(raw)
		n++
	}
	for i := 0; i <= head; i++ {
		if isInstruction(p, items[i]) {
			add(items[i].Raw)
		}
	}
	for _, it := range items[cut:] {
		add(it.Raw)
	}
	b.WriteByte(']')
	return sjson.SetRawBytes(body, path, b.Bytes())
}

// startsUserTurn reports whether a message or input item opens a user turn.
func startsUserTurn(p Protocol, it gjson.Result) bool {
	if it.Get("role").String() != "user" {
		return false
	}
	switch p {
	case Messages:
		c := it.Get("content")
		if !c.IsArray() {
			return true
		}
		for _, b := range c.Array() {
			if b.Get("type").String() != "tool_result" {
				return true
			}
		}
		return false
	case Responses:
		t := it.Get("type").String()
		return t == "" || t == "message"
	}
	return true
}

// isInstruction reports whether an item is a system or developer message
// (Chat, Responses); Messages keeps its system prompt outside the list.
func isInstruction(p Protocol, it gjson.Result) bool {
	if p == Messages {
		return false
	}
	switch it.Get("role").String() {
	case "system", "developer":
		return true
	}
	return false
}
