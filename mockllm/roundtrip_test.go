package mockllm

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chimehq/chime/llm"
)

// TestMessagesThinkingRoundTrip: a thinking reply, then the tool-result
// followup with the assistant content replayed as received is accepted;
// with the thinking block dropped or altered it is rejected like Anthropic.
func TestMessagesThinkingRoundTrip(t *testing.T) {
	for _, mode := range []string{"enabled", "adaptive"} {
		t.Run(mode, func(t *testing.T) {
			s := New()
			thinking := `"thinking":{"type":"` + mode + `","budget_tokens":2048},`
			s.Script(thinkingReply())
			rec := serve(s, llm.Messages, anth(thinking, uHi))
			if rec.Code != http.StatusOK {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			content := gjson.GetBytes(rec.Body.Bytes(), "content")
			block := content.Get("0")
			if block.Get("type").String() != "thinking" || block.Get("thinking").String() != thought || block.Get("signature").String() == "" {
				t.Fatalf("reply does not start with a signed thinking block: %s", content.Raw)
			}
			id := content.Get(`#(type=="tool_use").id`).String()
			if !strings.HasPrefix(id, "toolu_01") || len(id) != len("toolu_01")+22 {
				t.Errorf("tool_use id %q is not shaped like Anthropic's", id)
			}
			followup := func(assistant, thinkingParam string) string {
				return anth(thinkingParam, uHi+`,{"role":"assistant","content":`+assistant+
					`},{"role":"user","content":[{"type":"tool_result","tool_use_id":"`+id+`","content":"12:00"}]}`)
			}
			dropped := "[" + strings.TrimPrefix(content.Raw, "["+block.Raw+",")
			badSig, _ := sjson.Set(content.Raw, "0.signature", "AAAA"+block.Get("signature").String()[4:])
			badText, _ := sjson.Set(content.Raw, "0.thinking", thought+" (edited)")
			for _, c := range []struct {
				name, body, reject string
			}{
				{"replayed", followup(content.Raw, thinking), ""},
				{"dropped", followup(dropped, thinking), "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`"},
				{"signature altered", followup(badSig, thinking), "messages.1.content.0: Invalid `signature` in `thinking` block"},
				{"thinking altered", followup(badText, thinking), "Invalid `signature` in `thinking` block"},
				// With thinking off the API does not need the block back.
				{"dropped, thinking off", followup(dropped, ""), ""},
			} {
				rec := serve(s, llm.Messages, c.body)
				if c.reject == "" {
					if rec.Code != http.StatusOK {
						t.Errorf("%s: %d %s", c.name, rec.Code, rec.Body)
					}
					continue
				}
				t.Run(c.name, func(t *testing.T) { checkRejection(t, llm.Messages, rec, c.reject, "") })
			}
		})
	}
}

// TestResponsesReasoningRoundTrip: the reasoning item and function_call
// replayed (Codex-style, store:false) are accepted; the call replayed
// without its reasoning item, or an altered blob, are rejected like OpenAI.
func TestResponsesReasoningRoundTrip(t *testing.T) {
	s := New()
	opts := `"store":false,"include":["reasoning.encrypted_content"],`
	s.Script(thinkingReply())
	rec := serve(s, llm.Responses, resp(opts, rUser))
	if rec.Code != http.StatusOK {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	out := gjson.GetBytes(rec.Body.Bytes(), "output")
	rs, fc := out.Get("0"), out.Get(`#(type=="function_call")`)
	if rs.Get("type").String() != "reasoning" || rs.Get("summary.0.text").String() != thought || rs.Get("encrypted_content").String() == "" {
		t.Fatalf("output does not start with the reasoning item: %s", out.Raw)
	}
	rsID, fcID, callID := rs.Get("id").String(), fc.Get("id").String(), fc.Get("call_id").String()
	if !strings.HasPrefix(rsID, "rs_") || !strings.HasPrefix(fcID, "fc_") || !strings.HasPrefix(callID, "call_") {
		t.Errorf("ids %q %q %q are not shaped like OpenAI's", rsID, fcID, callID)
	}
	answer := `{"type":"function_call_output","call_id":"` + callID + `","output":"12:00"}`
	noID, _ := sjson.Delete(fc.Raw, "id")
	badBlob, _ := sjson.Set(rs.Raw, "encrypted_content", "x"+rs.Get("encrypted_content").String())
	idOnly, _ := sjson.Delete(rs.Raw, "encrypted_content")
	for _, c := range []struct {
		name, input, reject, param string
	}{
		{"replayed", rs.Raw + "," + fc.Raw + "," + answer, "", ""},
		{"reasoning by id, not stored", idOnly + "," + fc.Raw + "," + answer, "Item with id '" + rsID + "' not found.", "input"},
		{"call without item id", noID + "," + answer, "", ""},
		{"reasoning dropped", fc.Raw + "," + answer,
			"Item '" + fcID + "' of type 'function_call' was provided without its required 'reasoning' item: '" + rsID + "'.", "input"},
		{"reasoning after the call", fc.Raw + "," + rs.Raw + "," + answer, "without its required 'reasoning' item", "input"},
		{"blob altered", badBlob + "," + fc.Raw + "," + answer, "The encrypted content for item " + rsID + " could not be verified.", "input[1].encrypted_content"},
		{"call unanswered", rs.Raw + "," + fc.Raw, "No tool output found for function call " + callID + ".", "input"},
	} {
		rec := serve(s, llm.Responses, resp(opts, rUser+","+c.input))
		if c.reject == "" {
			if rec.Code != http.StatusOK {
				t.Errorf("%s: %d %s", c.name, rec.Code, rec.Body)
			}
			continue
		}
		t.Run(c.name, func(t *testing.T) { checkRejection(t, llm.Responses, rec, c.reject, c.param) })
	}

	// Without include, no encrypted_content: a stored response replays the
	// reasoning item by id, and with previous_response_id its calls must be
	// answered.
	s.Script(thinkingReply())
	rec = serve(s, llm.Responses, resp("", rUser))
	out = gjson.GetBytes(rec.Body.Bytes(), "output")
	if rs := out.Get("0"); rs.Get("type").String() != "reasoning" || rs.Get("encrypted_content").Exists() {
		t.Errorf("reasoning item without include: %s", rs.Raw)
	}
	respID := gjson.GetBytes(rec.Body.Bytes(), "id").String()
	callID = out.Get(`#(type=="function_call").call_id`).String()
	var replay string
	for _, it := range out.Array() {
		replay += it.Raw + ","
	}
	replay += `{"type":"function_call_output","call_id":"` + callID + `","output":"x"}`
	if rec := serve(s, llm.Responses, resp("", rUser+","+replay)); rec.Code != http.StatusOK {
		t.Errorf("stored reasoning item replayed by id: %d %s", rec.Code, rec.Body)
	}
	prev := `"previous_response_id":"` + respID + `",`
	if rec := serve(s, llm.Responses, resp(prev, `{"type":"function_call_output","call_id":"`+callID+`","output":"x"}`)); rec.Code != http.StatusOK {
		t.Errorf("answer to a previous response's call: %d %s", rec.Code, rec.Body)
	}
	checkRejection(t, llm.Responses, serve(s, llm.Responses, resp(prev, rUser)), "No tool output found for function call "+callID, "input")
}

// TestAnthropicSDKThinkingRoundTrip: anthropic-sdk-go accumulates the
// streamed thinking block with its signature, and sending the accumulated
// message back with the tool result is accepted; a tampered one is not.
func TestAnthropicSDKThinkingRoundTrip(t *testing.T) {
	m := New()
	srv := httptest.NewServer(m)
	defer srv.Close()
	m.Script(thinkingReply(), Reply{Text: "It is noon."})
	client := anthropic.NewClient(anthropicoption.WithBaseURL(srv.URL), anthropicoption.WithAPIKey("test-key"), anthropicoption.WithMaxRetries(0))
	ctx := context.Background()
	params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 4096,
		Thinking: anthropic.ThinkingConfigParamUnion{OfAdaptive: &anthropic.ThinkingConfigAdaptiveParam{}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("what time is it?"))}}
	stream := client.Messages.NewStreaming(ctx, params)
	var msg anthropic.Message
	for stream.Next() {
		if err := msg.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 3 || msg.Content[0].Type != "thinking" || msg.Content[0].Thinking != thought ||
		msg.Content[0].Signature != thinkingSignature(thought) || msg.Content[2].Type != "tool_use" {
		t.Fatalf("accumulated %+v", msg.Content)
	}
	followup := func(assistant anthropic.MessageParam) error {
		p := params
		p.Messages = append(append([]anthropic.MessageParam{}, params.Messages...), assistant,
			anthropic.NewUserMessage(anthropic.NewToolResultBlock(msg.Content[2].ID, "12:00", false)))
		_, err := client.Messages.New(ctx, p)
		return err
	}
	tampered := msg.ToParam()
	tampered.Content[0].OfThinking.Signature = thinkingSignature("something else")
	var apiErr *anthropic.Error
	if err := followup(tampered); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest ||
		!strings.Contains(err.Error(), "Invalid `signature` in `thinking` block") {
		t.Errorf("tampered signature: %v", err)
	}
	if err := followup(msg.ToParam()); err != nil {
		t.Errorf("followup with the accumulated message: %v", err)
	}
}
