package mockllm

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/llm"
)

func serve(s *Server, p llm.Protocol, body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, paths[p], strings.NewReader(body)))
	return rec
}

// parseTurn decodes a JSON or SSE reply.
func parseTurn(p llm.Protocol, raw []byte) (*llm.Turn, error) {
	if !strings.HasPrefix(string(raw), "data:") && !strings.HasPrefix(string(raw), "event:") {
		return llm.ParseResponse(p, raw)
	}
	r := llm.NewStreamReader(p)
	evs, err := r.Feed(raw)
	if err != nil {
		return nil, err
	}
	rest, err := r.Close()
	if err != nil {
		return nil, err
	}
	var b llm.TurnBuilder
	for _, ev := range append(evs, rest...) {
		b.Add(ev)
	}
	return b.Turn(), nil
}

const thought = "The user wants the time; I should call the clock tool. ☕"

func thinkingReply() Reply {
	return Reply{Thinking: thought, Text: "Checking.", ToolCalls: []ToolCall{{Name: "clock", Arguments: []byte(`{"action":"get"}`)}}}
}

// TestThinkingReplies: a scripted thinking reply starts with the signed
// thinking block (Messages) or the reasoning item (Responses), in JSON and
// in the SSE events each provider streams, and SSE and JSON agree.
func TestThinkingReplies(t *testing.T) {
	for _, stream := range []bool{false, true} {
		s := New()
		s.Script(thinkingReply(), thinkingReply(), thinkingReply())
		body := strings.Replace(validBody(llm.Messages, stream), `"messages"`, `"thinking":{"type":"adaptive"},"messages"`, 1)
		content := messagesContent(t, serve(s, llm.Messages, body).Body.String())
		if first := content.Get("0"); first.Get("type").String() != "thinking" || first.Get("thinking").String() != thought ||
			!validThinkingSignature(thought, first.Get("signature").String()) {
			t.Errorf("stream=%v: messages content %s", stream, content.Raw)
		}
		if content.Get("1.text").String() != "Checking." || content.Get("2.type").String() != "tool_use" {
			t.Errorf("stream=%v: blocks after thinking %s", stream, content.Raw)
		}

		for _, include := range []bool{false, true} {
			body := validBody(llm.Responses, stream)
			if include {
				body = strings.Replace(body, `"input"`, `"include":["reasoning.encrypted_content"],"input"`, 1)
			}
			output := responsesOutput(t, serve(s, llm.Responses, body).Body.String())
			rs := output.Get("0")
			blob, hasBlob := rs.Get("encrypted_content").String(), rs.Get("encrypted_content").Exists()
			if rs.Get("type").String() != "reasoning" || rs.Get("summary.0.text").String() != thought || hasBlob != include {
				t.Errorf("stream=%v include=%v: output %s", stream, include, output.Raw)
			}
			if id, ok := openReasoningBlob(blob); include && (!ok || id != rs.Get("id").String()) {
				t.Errorf("stream=%v: blob %q does not verify for %s", stream, blob, rs.Get("id"))
			}
			fc := output.Get("2")
			if output.Get("1.type").String() != "message" || !strings.HasPrefix(output.Get("1.id").String(), "msg_") ||
				fc.Get("type").String() != "function_call" || !strings.HasPrefix(fc.Get("id").String(), "fc_") ||
				!strings.HasPrefix(fc.Get("call_id").String(), "call_") {
				t.Errorf("stream=%v: items after reasoning %s", stream, output.Raw)
			}
		}
	}
}

// messagesContent returns the content blocks of a Messages JSON body, or
// rebuilt from its SSE events the way the SDKs accumulate them.
func messagesContent(t *testing.T, raw string) gjson.Result {
	t.Helper()
	if !strings.HasPrefix(raw, "event:") {
		return gjson.Get(raw, "content")
	}
	var blocks []map[string]any
	for _, data := range sseData(raw) {
		ev := gjson.Parse(data)
		i := int(ev.Get("index").Int())
		switch ev.Get("type").String() {
		case "content_block_start":
			if i != len(blocks) {
				t.Fatalf("block %d starts at index %d", len(blocks), i)
			}
			blocks = append(blocks, ev.Get("content_block").Value().(map[string]any))
		case "content_block_delta":
			d := ev.Get("delta")
			switch d.Get("type").String() {
			case "thinking_delta":
				blocks[i]["thinking"] = blocks[i]["thinking"].(string) + d.Get("thinking").String()
			case "signature_delta":
				blocks[i]["signature"] = blocks[i]["signature"].(string) + d.Get("signature").String()
			case "text_delta":
				blocks[i]["text"] = blocks[i]["text"].(string) + d.Get("text").String()
			}
		}
	}
	return gjson.Parse(string(mustJSON(blocks)))
}

// responsesOutput returns the output items of a Responses JSON body, or of
// the terminal event of its stream after checking the streamed items match.
func responsesOutput(t *testing.T, raw string) gjson.Result {
	t.Helper()
	if !strings.HasPrefix(raw, "event:") {
		return gjson.Get(raw, "output")
	}
	var done []string
	seq := int64(-1)
	var final gjson.Result
	for _, data := range sseData(raw) {
		ev := gjson.Parse(data)
		if n := ev.Get("sequence_number").Int(); n != seq+1 {
			t.Errorf("sequence_number %d after %d", n, seq)
		}
		seq = ev.Get("sequence_number").Int()
		switch ev.Get("type").String() {
		case "response.output_item.done":
			if int(ev.Get("output_index").Int()) != len(done) {
				t.Errorf("item %d done at output_index %d", len(done), ev.Get("output_index").Int())
			}
			done = append(done, ev.Get("item").Raw)
		case "response.completed":
			final = ev.Get("response.output")
		}
	}
	if got := "[" + strings.Join(done, ",") + "]"; gjson.Parse(got).String() != final.String() {
		t.Errorf("streamed items %s differ from the final output %s", got, final.Raw)
	}
	return final
}

func sseData(raw string) []string {
	var out []string
	for _, line := range strings.Split(raw, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && d != "[DONE]" {
			out = append(out, d)
		}
	}
	return out
}

func TestChatReasoningContent(t *testing.T) {
	s := New()
	s.Script(thinkingReply(), thinkingReply())
	rec := serve(s, llm.Chat, validBody(llm.Chat, false))
	msg := gjson.GetBytes(rec.Body.Bytes(), "choices.0.message")
	if msg.Get("reasoning_content").String() != thought || !strings.HasPrefix(msg.Get("tool_calls.0.id").String(), "call_") {
		t.Errorf("message %s", msg.Raw)
	}
	rec = serve(s, llm.Chat, validBody(llm.Chat, true))
	var got strings.Builder
	for _, d := range sseData(rec.Body.String()) {
		got.WriteString(gjson.Get(d, "choices.0.delta.reasoning_content").String())
	}
	if got.String() != thought {
		t.Errorf("streamed reasoning_content %q", got.String())
	}
}

func TestIDsStablePerServer(t *testing.T) {
	ids := func() []string {
		s := New()
		var out []string
		for _, p := range []llm.Protocol{llm.Messages, llm.Chat, llm.Responses} {
			s.Script(Reply{ToolCalls: []ToolCall{{Name: "a"}, {Name: "b"}}})
			turn, err := parseTurn(p, serve(s, p, validBody(p, p == llm.Chat)).Body.Bytes())
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range turn.ToolCalls {
				out = append(out, c.ID)
			}
		}
		return out
	}
	a, b := ids(), ids()
	seen := map[string]bool{}
	for i, id := range a {
		if seen[id] || id != b[i] {
			t.Errorf("id %d %q: duplicate or differs between servers (%q)", i, id, b[i])
		}
		seen[id] = true
	}
	if !strings.HasPrefix(a[0], "toolu_01") || !strings.HasPrefix(a[2], "call_") || !strings.HasPrefix(a[4], "call_") {
		t.Errorf("ids %v", a)
	}
}
