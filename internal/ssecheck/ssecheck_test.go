package ssecheck

import (
	"strings"
	"testing"
)

// Hand-written streams, shaped like the providers' own, so the oracle does
// not lean on the renderers it judges.
const (
	chatGood = `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"part one."},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"\n\npart two."},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"x","function":{"name":"shell","arguments":"{}"}}]},"finish_reason":null}]}

data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}

data: [DONE]

`
	messagesGood = `event: message_start
data: {"type":"message_start","message":{"id":"m","content":[]}}

event: content_block_start
data: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}

event: content_block_stop
data: {"type":"content_block_stop","index":0}

event: content_block_start
data: {"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"part one."}}

event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\n\npart two."}}

event: content_block_stop
data: {"type":"content_block_stop","index":1}

event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"tool_use","name":"shell","input":{}}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: message_delta
data: {"type":"message_delta","delta":{"stop_reason":"tool_use"}}

event: message_stop
data: {"type":"message_stop"}

`
	responsesGood = `event: response.created
data: {"type":"response.created","sequence_number":0}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":1,"output_index":0,"item":{"type":"message"}}

event: response.content_part.added
data: {"type":"response.content_part.added","sequence_number":2,"output_index":0,"content_index":0}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":3,"output_index":0,"content_index":0,"delta":"part one."}

event: response.output_text.delta
data: {"type":"response.output_text.delta","sequence_number":4,"output_index":0,"content_index":0,"delta":"\n\npart two."}

event: response.output_text.done
data: {"type":"response.output_text.done","sequence_number":5,"output_index":0,"content_index":0,"text":"part one.\n\npart two."}

event: response.content_part.done
data: {"type":"response.content_part.done","sequence_number":6,"output_index":0,"content_index":0,"part":{"text":"part one.\n\npart two."}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":7,"output_index":0,"item":{"type":"message","content":[{"type":"output_text","text":"part one.\n\npart two."}]}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":8,"output_index":1,"item":{"type":"function_call","name":"shell"}}

event: response.output_item.done
data: {"type":"response.output_item.done","sequence_number":9,"output_index":1,"item":{"type":"function_call","name":"shell"}}

event: response.completed
data: {"type":"response.completed","sequence_number":10,"response":{"output":[{"type":"message","content":[{"type":"output_text","text":"part one.\n\npart two."}]},{"type":"function_call"}]}}

`
)

func TestCheckAcceptsOneAnswer(t *testing.T) {
	for proto, stream := range map[string]string{Chat: chatGood, Messages: messagesGood, Responses: responsesGood} {
		for _, eol := range []string{"\n", "\r\n"} {
			res, err := Check(proto, []byte(strings.ReplaceAll(stream, "\n", eol)))
			if err != nil {
				t.Fatalf("%s: %v", proto, err)
			}
			if res.Text != "part one.\n\npart two." || res.TextBlocks != 1 || len(res.ToolCalls) != 1 || res.ToolCalls[0] != "shell" {
				t.Errorf("%s: %+v", proto, res)
			}
		}
	}
}

// TestCheckRejects: each edit breaks one rule a client depends on.
func TestCheckRejects(t *testing.T) {
	secondBlock := `event: content_block_start
data: {"type":"content_block_start","index":2,"content_block":{"type":"text","text":""}}

event: content_block_delta
data: {"type":"content_block_delta","index":2,"delta":{"type":"text_delta","text":"\n\npart two."}}

event: content_block_stop
data: {"type":"content_block_stop","index":2}

event: content_block_start
data: {"type":"content_block_start","index":3,`
	cases := []struct {
		name, proto, stream string
		want                string // in the error
	}{
		{"messages second text block", Messages, strings.Replace(strings.Replace(strings.Replace(messagesGood,
			`event: content_block_delta
data: {"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\n\npart two."}}

`, "", 1), `event: content_block_start
data: {"type":"content_block_start","index":2,`, secondBlock, 1), `"index":2}

event: message_delta`, `"index":3}

event: message_delta`, 1), "2 text blocks"},
		{"messages tool inside the text block", Messages, strings.Replace(messagesGood, `event: content_block_stop
data: {"type":"content_block_stop","index":1}

`, "", 1), "started while text block 1 is open"},
		{"messages two starts", Messages, `event: message_start
data: {"type":"message_start"}

` + messagesGood, "one message_start"},
		{"messages no stop", Messages, strings.TrimSuffix(messagesGood, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n"), "one message_stop"},
		{"responses done text short", Responses, strings.Replace(responsesGood, `"text":"part one.\n\npart two."}

event: response.content_part.done`, `"text":"\n\npart two."}

event: response.content_part.done`, 1), "output_text.done has"},
		{"responses completed text short", Responses, strings.Replace(responsesGood, `"response":{"output":[{"type":"message","content":[{"type":"output_text","text":"part one.\n\npart two."}]}`,
			`"response":{"output":[{"type":"message","content":[{"type":"output_text","text":"part two."}]}`, 1), "response.completed message text"},
		{"responses sequence gap", Responses, strings.Replace(responsesGood, `"sequence_number":4`, `"sequence_number":5`, 1), "sequence_number 5, want 4"},
		{"responses item inside the message", Responses, strings.Replace(responsesGood, `"sequence_number":1,"output_index":0,"item":{"type":"message"}`,
			`"sequence_number":1,"output_index":0,"item":{"type":"message"}}

event: response.output_item.added
data: {"type":"response.output_item.added","sequence_number":1,"output_index":1,"item":{"type":"reasoning"}`, 1), "added while message item 0 is open"},
		{"chat text after finish", Chat, strings.Replace(chatGood, "data: [DONE]", `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"late"},"finish_reason":null}]}

data: [DONE]`, 1), "content after the finish chunk"},
		{"chat no DONE", Chat, strings.TrimSuffix(chatGood, "data: [DONE]\n\n"), "[DONE]"},
		{"chat other id", Chat, strings.Replace(chatGood, `{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},`, `{"id":"d","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},`, 1), "chunk id"},
		{"invalid JSON", Chat, strings.Replace(chatGood, `"part one."`, `"part one.`, 1), "invalid JSON"},
		{"truncated", Messages, strings.TrimSuffix(messagesGood, "\n\n"), "blank line"},
	}
	for _, c := range cases {
		_, err := Check(c.proto, []byte(c.stream))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one about %q", c.name, err, c.want)
		}
	}
}

// FuzzCheck: whatever the bytes, Check returns rather than panics, and a
// stream it accepts reads the same with CRLF line ends.
func FuzzCheck(f *testing.F) {
	f.Add(uint8(0), []byte(chatGood))
	f.Add(uint8(1), []byte(responsesGood))
	f.Add(uint8(2), []byte(messagesGood))
	f.Add(uint8(2), []byte("event: x\ndata: {\n\n"))
	f.Fuzz(func(t *testing.T, proto uint8, data []byte) {
		p := []string{Chat, Responses, Messages}[int(proto)%3]
		res, err := Check(p, data)
		if err != nil {
			return
		}
		again, err := Check(p, []byte(strings.ReplaceAll(strings.ReplaceAll(string(data), "\r\n", "\n"), "\n", "\r\n")))
		if err != nil || again.Text != res.Text {
			t.Fatalf("CRLF changes the verdict: %v", err)
		}
	})
}
