package llm

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// RenderJSON renders t as a complete non-streaming response body of protocol
// p, in the shape the official SDKs decode (docs/architecture.md#response-path, JSON).
// Missing ids are filled with stable placeholders; Messages tool inputs that
// are not a JSON object are rendered as {} because that protocol requires one.
func RenderJSON(p Protocol, t *Turn) []byte {
	if t == nil {
		t = &Turn{}
	}
	created := time.Now().Unix()
	var b wireBuf
	switch p {
	case Chat:
		b.raw(`{`)
		b.kstr("id", orDefault(t.ID, "chatcmpl-chime"))
		b.kraw("object", `"chat.completion"`)
		b.key("created")
		b = strconv.AppendInt(b, created, 10)
		b.kstr("model", orDefault(t.Model, "unknown"))
		b.raw(`,"choices":[{"index":0,"message":{"role":"assistant",`)
		if extra := t.fields(); extra != "" {
			b.raw(extra) // reasoning_content and other provider extras
			b.raw(`,`)
		}
		b.raw(`"content":`)
		if t.Text == "" && len(t.ToolCalls) > 0 {
			b.raw("null")
		} else {
			b.str(t.Text)
		}
		b.raw(`,"refusal":null`)
		if len(t.ToolCalls) > 0 {
			b.raw(`,"tool_calls":[`)
			for i, c := range t.ToolCalls {
				if i > 0 {
					b.raw(",")
				}
				b.raw(`{`)
				b.kstr("id", callID(Chat, c.ID, i))
				b.raw(`,"type":"function","function":{`)
				b.kstr("name", c.Name)
				b.kstr("arguments", c.Arguments)
				b.raw(`}}`)
			}
			b.raw(`]`)
		}
		b.raw(`},"logprobs":null`)
		b.kstr("finish_reason", finishWire(Chat, t.effectiveFinish()))
		b.raw(`}],"usage":`)
		b.chatUsage(t.Usage)
		b.raw(`}`)
	case Responses:
		// Provider items (reasoning) keep their place and bytes; the text is
		// one message item.
		var items [][]byte
		for next, seg := range t.segments() {
			switch seg.kind {
			case ItemRaw:
				items = append(items, []byte(seg.raw))
			case ItemText:
				items = append(items, responsesMessageItem(next, []string{t.Text}))
			case ItemToolCall:
				c := t.ToolCalls[seg.call]
				items = append(items, responsesCallItem(next, callID(Responses, c.ID, next), c, "completed"))
			}
		}
		b.responsesObject(responsesMeta{id: t.ID, model: t.Model, created: created}, t.effectiveFinish(), items, t.Usage, true)
	case Messages:
		b.raw(`{`)
		b.kstr("id", orDefault(t.ID, "msg_chime"))
		b.raw(`,"type":"message","role":"assistant"`)
		b.kstr("model", orDefault(t.Model, "unknown"))
		b.raw(`,"content":[`)
		for n, seg := range t.segments() {
			if n > 0 {
				b.raw(",")
			}
			switch seg.kind {
			case ItemRaw:
				b.raw(seg.raw) // thinking and its signature, as the provider sent it
			case ItemText:
				b.raw(`{"type":"text","text":`)
				b.str(t.Text)
				b.raw(`}`)
			case ItemToolCall:
				c := t.ToolCalls[seg.call]
				b.raw(`{"type":"tool_use"`)
				b.kstr("id", callID(Messages, c.ID, n))
				b.kstr("name", c.Name)
				b.kraw("input", messagesInput(c.Arguments))
				b.raw(`}`)
			}
		}
		b.raw(`]`)
		b.kstr("stop_reason", finishWire(Messages, t.effectiveFinish()))
		b.raw(`,"stop_sequence":null,"usage":`)
		b.messagesUsage(t.Usage)
		b.raw(`}`)
	default:
		return nil
	}
	return b
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// callID returns id, or a placeholder unique within the turn when the
// continuation or script did not name the call.
func callID(p Protocol, id string, index int) string {
	if id != "" {
		return id
	}
	if p == Messages {
		return "toolu_chime_" + strconv.Itoa(index)
	}
	return "call_chime_" + strconv.Itoa(index)
}

// messagesInput returns args if it is a JSON object, else {}.
func messagesInput(args string) string {
	trimmed := strings.TrimLeft(args, " \t\r\n")
	if strings.HasPrefix(trimmed, "{") && json.Valid([]byte(args)) {
		return args
	}
	return "{}"
}

func (b *wireBuf) chatUsage(u Usage) {
	b.raw(`{`)
	b.kint("prompt_tokens", u.InputTokens)
	b.kint("completion_tokens", u.OutputTokens)
	b.kint("total_tokens", u.InputTokens+u.OutputTokens)
	b.raw(`}`)
}

func (b *wireBuf) messagesUsage(u Usage) {
	b.raw(`{`)
	b.kint("input_tokens", u.InputTokens)
	b.kint("output_tokens", u.OutputTokens)
	b.raw(`}`)
}

// responsesMeta is what a Responses response object needs besides output.
type responsesMeta struct {
	id, model string
	created   int64
}

// responsesObject appends a full Responses response object. final selects the
// terminal shape (status, usage); otherwise it is the in_progress snapshot.
func (b *wireBuf) responsesObject(m responsesMeta, f Finish, items [][]byte, u Usage, final bool) {
	b.raw(`{`)
	b.kstr("id", orDefault(m.id, "resp_chime"))
	b.raw(`,"object":"response"`)
	b.key("created_at")
	*b = strconv.AppendInt(*b, m.created, 10)
	reason := ""
	switch {
	case !final:
		b.raw(`,"status":"in_progress"`)
	default:
		reason = finishWire(Responses, f)
		if reason == "" {
			b.raw(`,"status":"completed"`)
		} else {
			b.raw(`,"status":"incomplete"`)
		}
	}
	b.raw(`,"background":false,"error":null,"incomplete_details":`)
	if reason != "" {
		b.raw(`{"reason":`)
		b.str(reason)
		b.raw(`}`)
	} else {
		b.raw(`null`)
	}
	b.raw(`,"instructions":null,"max_output_tokens":null`)
	b.kstr("model", orDefault(m.model, "unknown"))
	b.raw(`,"output":[`)
	for i, it := range items {
		if i > 0 {
			b.raw(",")
		}
		b.rawBytes(it)
	}
	b.raw(`],"parallel_tool_calls":true,"previous_response_id":null,"reasoning":{"effort":null,"summary":null},` +
		`"store":false,"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],` +
		`"top_p":1.0,"truncation":"disabled","usage":`)
	if final {
		b.raw(`{`)
		b.kint("input_tokens", u.InputTokens)
		b.raw(`,"input_tokens_details":{"cached_tokens":0}`)
		b.kint("output_tokens", u.OutputTokens)
		b.raw(`,"output_tokens_details":{"reasoning_tokens":0}`)
		b.kint("total_tokens", u.InputTokens+u.OutputTokens)
		b.raw(`}`)
	} else {
		b.raw(`null`)
	}
	b.raw(`,"user":null,"metadata":{}}`)
}

// responsesItemID is the id of the output item at index (msg_… or fc_…).
func responsesItemID(prefix string, index int) string {
	return prefix + "_chime_" + strconv.Itoa(index)
}

// responsesMessageItem renders a completed assistant message item whose
// content parts hold texts.
func responsesMessageItem(index int, texts []string) []byte {
	return responsesMessageItemWithID(responsesItemID("msg", index), texts, "completed")
}

func responsesMessageItemWithID(id string, texts []string, status string) []byte {
	var b wireBuf
	b.raw(`{`)
	b.kstr("id", id)
	b.raw(`,"type":"message"`)
	b.kstr("status", status)
	b.raw(`,"role":"assistant","content":[`)
	for i, t := range texts {
		if i > 0 {
			b.raw(",")
		}
		b.outputTextPart(t)
	}
	b.raw(`]}`)
	return b
}

func (b *wireBuf) outputTextPart(text string) {
	b.raw(`{"type":"output_text","annotations":[],"logprobs":[],"text":`)
	b.str(text)
	b.raw(`}`)
}

// responsesCallItem renders a function_call output item.
func responsesCallItem(index int, callID string, c ToolCall, status string) []byte {
	return responsesCallItemWithID(responsesItemID("fc", index), callID, c.Name, c.Arguments, status)
}

func responsesCallItemWithID(id, callID, name, args, status string) []byte {
	var b wireBuf
	b.raw(`{`)
	b.kstr("id", id)
	b.raw(`,"type":"function_call"`)
	b.kstr("status", status)
	b.kstr("arguments", args)
	b.kstr("call_id", callID)
	b.kstr("name", name)
	b.raw(`}`)
	return b
}
