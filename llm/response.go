package llm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// ErrNotJSON reports a response body that is not valid JSON.
var ErrNotJSON = errors.New("llm: response body is not valid JSON")

// ProviderError is a well-formed error object returned by the provider
// instead of a turn.
type ProviderError struct {
	Type    string
	Message string
}

func (e *ProviderError) Error() string {
	return fmt.Sprintf("llm: provider error %s: %s", e.Type, e.Message)
}

// ParseResponse reads a non-streaming response body of protocol p into a
// canonical Turn (docs/architecture.md#response-path, JSON; §2 tool call/stop/length rows).
func ParseResponse(p Protocol, body []byte) (*Turn, error) {
	if !gjson.ValidBytes(body) {
		return nil, ErrNotJSON
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return nil, fmt.Errorf("llm: %s response is not a JSON object", p)
	}
	if e := root.Get("error"); e.IsObject() {
		return nil, &ProviderError{Type: e.Get("type").String(), Message: e.Get("message").String()}
	}
	switch p {
	case Chat:
		return parseChatResponse(root)
	case Responses:
		return parseResponsesResponse(root)
	case Messages:
		return parseMessagesResponse(root)
	}
	return nil, fmt.Errorf("llm: cannot parse a response of protocol %s", p)
}

func parseChatResponse(root gjson.Result) (*Turn, error) {
	choices := root.Get("choices")
	if !choices.IsArray() || len(choices.Array()) == 0 {
		return nil, errors.New("llm: chat response has no choices")
	}
	choice := choices.Array()[0]
	msg := choice.Get("message")
	t := &Turn{ID: root.Get("id").String(), Model: root.Get("model").String()}
	t.Text = partsText(msg.Get("content"), "text")
	for _, tc := range msg.Get("tool_calls").Array() {
		fn := tc.Get("function")
		if !fn.Exists() {
			continue // custom (non-function) tools are not ours
		}
		t.ToolCalls = append(t.ToolCalls, ToolCall{
			ID: tc.Get("id").String(), Name: fn.Get("name").String(), Arguments: fn.Get("arguments").String(),
		})
	}
	if fc := msg.Get("function_call"); fc.IsObject() && len(t.ToolCalls) == 0 {
		t.ToolCalls = append(t.ToolCalls, ToolCall{Name: fc.Get("name").String(), Arguments: fc.Get("arguments").String()})
	}
	if extra := chatExtraFields(msg); extra != "" {
		t.Items = []Item{{Kind: ItemFields, Raw: extra}}
	}
	raw := choice.Get("finish_reason").String()
	t.Finish = Finish{Reason: classifyFinish(Chat, raw), Raw: raw}
	u := root.Get("usage")
	t.Usage = Usage{InputTokens: int(u.Get("prompt_tokens").Int()), OutputTokens: int(u.Get("completion_tokens").Int())}
	return t, nil
}

func parseResponsesResponse(root gjson.Result) (*Turn, error) {
	t := &Turn{ID: root.Get("id").String(), Model: root.Get("model").String()}
	var text strings.Builder
	var items itemList
	for _, item := range root.Get("output").Array() {
		switch item.Get("type").String() {
		case "message":
			text.WriteString(partsText(item.Get("content"), "output_text"))
			items.addText()
		case "function_call":
			t.ToolCalls = append(t.ToolCalls, ToolCall{
				ID: item.Get("call_id").String(), Name: item.Get("name").String(), Arguments: item.Get("arguments").String(),
			})
			items.addCall()
		default:
			if item.IsObject() {
				items.addRaw(item.Raw) // reasoning (with encrypted_content), unknown types
			}
		}
	}
	t.Text = text.String()
	t.Items = items.result()
	t.Finish = responsesFinish(root, len(t.ToolCalls) > 0)
	u := root.Get("usage")
	t.Usage = Usage{InputTokens: int(u.Get("input_tokens").Int()), OutputTokens: int(u.Get("output_tokens").Int())}
	return t, nil
}

// responsesFinish derives the finish from a Responses response object: its
// status, the incomplete reason, and whether it holds function calls.
func responsesFinish(resp gjson.Result, hasCalls bool) Finish {
	status := resp.Get("status").String()
	switch status {
	case "completed":
		if hasCalls {
			return Finish{Reason: FinishToolCalls, Raw: status}
		}
		return Finish{Reason: FinishStop, Raw: status}
	case "incomplete":
		reason := resp.Get("incomplete_details.reason").String()
		if reason == "" {
			reason = status
		}
		return Finish{Reason: classifyFinish(Responses, reason), Raw: reason}
	case "", "in_progress", "queued":
		return Finish{Raw: status}
	}
	return Finish{Reason: FinishOther, Raw: status}
}

func parseMessagesResponse(root gjson.Result) (*Turn, error) {
	if root.Get("type").String() == "error" {
		e := root.Get("error")
		return nil, &ProviderError{Type: e.Get("type").String(), Message: e.Get("message").String()}
	}
	t := &Turn{ID: root.Get("id").String(), Model: root.Get("model").String()}
	var text strings.Builder
	var items itemList
	for _, block := range root.Get("content").Array() {
		switch block.Get("type").String() {
		case "text":
			text.WriteString(block.Get("text").String())
			items.addText()
		case "tool_use":
			args := block.Get("input").Raw
			if args == "" {
				args = "{}"
			}
			t.ToolCalls = append(t.ToolCalls, ToolCall{ID: block.Get("id").String(), Name: block.Get("name").String(), Arguments: args})
			items.addCall()
		default:
			if block.IsObject() {
				items.addRaw(block.Raw) // thinking (with signature), redacted_thinking, server_tool_use, unknown types
			}
		}
	}
	t.Text = text.String()
	t.Items = items.result()
	raw := root.Get("stop_reason").String()
	t.Finish = Finish{Reason: classifyFinish(Messages, raw), Raw: raw}
	u := root.Get("usage")
	t.Usage = Usage{InputTokens: int(u.Get("input_tokens").Int()), OutputTokens: int(u.Get("output_tokens").Int())}
	return t, nil
}

// chatMessageMembers are the members of a Chat assistant message that the
// Turn models or that OpenAI returns but does not accept back; any other
// non-null member is a provider extra (reasoning_content, …).
var chatMessageMembers = map[string]bool{
	"role": true, "content": true, "tool_calls": true, "function_call": true,
	"refusal": true, "annotations": true, "audio": true,
}

// chatExtraFields returns msg's provider extras as a JSON object with each
// member's bytes as sent, or "" when there are none.
func chatExtraFields(msg gjson.Result) string {
	if !msg.IsObject() {
		return "" // ForEach would yield the value itself, with no key
	}
	var b []byte
	msg.ForEach(func(k, v gjson.Result) bool {
		if chatMessageMembers[k.String()] || v.Type == gjson.Null {
			return true
		}
		if b == nil {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(b, k.Raw...)
		b = append(b, ':')
		b = append(b, v.Raw...)
		return true
	})
	if b == nil {
		return ""
	}
	return string(append(b, '}'))
}

// partsText returns v if it is a string, or the concatenated text of the
// parts of type partType if it is an array of content parts.
func partsText(v gjson.Result, partType string) string {
	if v.Type == gjson.String {
		return v.Str
	}
	var sb strings.Builder
	for _, part := range v.Array() {
		if part.Get("type").String() == partType {
			sb.WriteString(part.Get("text").String())
		}
	}
	return sb.String()
}
