package mockllm

// These tests point the official SDKs' clients at the mock provider and at
// spliced streams, and compare what each SDK accumulates with the canonical
// turn (task: real clients; docs/architecture.md#response-path, §2).

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/chimehq/chime/llm"
)

// sdkCase is one turn the SDKs must read back: scripted into the mock, or
// spliced from an original stream and a continuation.
type sdkCase struct {
	name  string
	reply Reply     // scripted reply (when orig is nil)
	orig  *llm.Turn // original turn, for splice cases
	cont  *llm.Turn // continuation, for splice cases
	want  *llm.Turn
	// oneText: the whole reply is "part one.\n\npart two." in one text
	// block or message output item.
	oneText bool
}

const wholeReply = "part one.\n\npart two."

var serverTools = []string{"clock"}

func sdkCases() []sdkCase {
	spliceOrig := &llm.Turn{ID: "orig", Model: "model-o", Text: "Let me check the time.",
		ToolCalls: []llm.ToolCall{{ID: "call_srv", Name: "clock", Arguments: `{"action":"get"}`}},
		Finish:    llm.Finish{Reason: llm.FinishToolCalls}, Usage: llm.Usage{InputTokens: 40, OutputTokens: 12}}
	spliceCont := &llm.Turn{Text: "It is 15:04 UTC — time for a café ☕.", Finish: llm.Finish{Reason: llm.FinishStop},
		Usage: llm.Usage{InputTokens: 60, OutputTokens: 9}}
	mixedOrig := &llm.Turn{ID: "orig2", Model: "model-o", Text: "Reading and checking.", ToolCalls: []llm.ToolCall{
		{ID: "call_read", Name: "read_file", Arguments: `{"path":"main.go"}`},
		{ID: "call_clock", Name: "clock", Arguments: `{"action":"get"}`},
	}, Finish: llm.Finish{Reason: llm.FinishToolCalls}, Usage: llm.Usage{InputTokens: 10, OutputTokens: 10}}
	mixedCont := &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "call_shell", Name: "shell", Arguments: `{"cmd":"date"}`}},
		Finish: llm.Finish{Reason: llm.FinishToolCalls}, Usage: llm.Usage{InputTokens: 5, OutputTokens: 5}}
	mixedWant := llm.Merge(mixedOrig, mixedCont)
	mixedWant.ToolCalls = []llm.ToolCall{mixedOrig.ToolCalls[0], mixedCont.ToolCalls[0]}
	// issue 8: the reply continues after the first turn's text closed; the
	// client must still get one text block with the whole reply.
	partOne := &llm.Turn{ID: "orig3", Model: "model-o", Text: "part one.", Finish: llm.Finish{Reason: llm.FinishStop},
		Usage: llm.Usage{InputTokens: 8, OutputTokens: 3}}
	partTwo := &llm.Turn{Text: "part two.", Finish: llm.Finish{Reason: llm.FinishStop}, Usage: llm.Usage{InputTokens: 9, OutputTokens: 3}}
	clockOne := *partOne
	clockOne.ToolCalls = []llm.ToolCall{{ID: "call_clk", Name: "clock", Arguments: `{"action":"get","items":[],"taskId":""}`}}
	clockOne.Finish = llm.Finish{Reason: llm.FinishToolCalls}
	heldOne := *partOne
	heldOne.Finish = llm.Finish{Reason: llm.FinishLength} // a hold also follows a length finish (docs/continuation.md#holds)
	return []sdkCase{
		{name: "text", reply: Reply{Text: "Hello from the mock provider, streamed in pieces. Ünïcødé too: 日本語."},
			want: &llm.Turn{Text: "Hello from the mock provider, streamed in pieces. Ünïcødé too: 日本語.", Finish: llm.Finish{Reason: llm.FinishStop}}},
		{name: "tools", reply: Reply{Text: "Two tools.", ToolCalls: []ToolCall{
			{Name: "get_weather", Arguments: []byte(`{"city":"Paris","units":"metric"}`)},
			{Name: "shell", Arguments: []byte(`"{\"cmd\":\"ls -la\"}"`)}}},
			want: &llm.Turn{Text: "Two tools.", ToolCalls: []llm.ToolCall{
				{Name: "get_weather", Arguments: `{"city":"Paris","units":"metric"}`}, {Name: "shell", Arguments: `{"cmd":"ls -la"}`}},
				Finish: llm.Finish{Reason: llm.FinishToolCalls}}},
		{name: "length", reply: Reply{Text: "cut", Finish: "length"},
			want: &llm.Turn{Text: "cut", Finish: llm.Finish{Reason: llm.FinishLength}}},
		{name: "splice server call", orig: spliceOrig, cont: spliceCont, want: llm.Merge(spliceOrig, spliceCont)},
		{name: "splice mixed calls", orig: mixedOrig, cont: mixedCont, want: mixedWant},
		{name: "stopMessage continuation", orig: partOne, cont: partTwo, want: llm.Merge(partOne, partTwo), oneText: true},
		{name: "clock interception", orig: &clockOne, cont: partTwo, want: llm.Merge(&clockOne, partTwo), oneText: true},
		{name: "hold", orig: &heldOne, cont: partTwo, want: llm.Merge(&heldOne, partTwo), oneText: true},
	}
}

// splicedServer serves, for any protocol path, what the filter would send:
// the original stream up to the first server-tool call, then the splice. For
// non-streaming requests it serves the merged JSON.
func splicedServer(t *testing.T, orig, cont *llm.Turn) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := llm.DetectProtocol(r.URL.Path)
		body := make([]byte, r.ContentLength)
		_, _ = r.Body.Read(body)
		if !strings.Contains(string(body), `"stream":true`) {
			merged := llm.Merge(orig, cont)
			merged.ToolCalls = append(orig.ClientCalls(serverTools), cont.ToolCalls...)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(llm.RenderJSON(p, merged))
			return
		}
		reader := llm.NewStreamReader(p)
		evs, err := reader.Feed(llm.RenderSSE(p, orig, llm.RenderOptions{ChunkBytes: 5, ChatUsage: true}))
		if err != nil {
			t.Error(err)
		}
		// As the filter does: forward until a server-tool call or an event
		// that must wait (the text's close, finish, terminal), then splice
		// the continuation plus the original's withheld client calls.
		sp := llm.NewSplicer(p)
		var b llm.TurnBuilder
		var out []byte
		held, seen := false, 0
		for _, ev := range evs {
			held = held || ev.StartsToolCall(serverTools) || ev.MustHold()
			if !held {
				out = append(out, ev.Raw...)
			}
			sp.Add(ev, !held)
			b.Add(ev)
			if !held {
				seen = b.NumCalls()
			}
		}
		withheld := llm.Turn{ToolCalls: b.Turn().ToolCalls[seen:]}
		rest := *cont
		rest.ToolCalls = append(withheld.ClientCalls(serverTools), cont.ToolCalls...)
		out = append(out, sp.Continue(&rest, llm.RenderOptions{ChunkBytes: 7})...)
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write(out)
	}))
}

func (c sdkCase) server(t *testing.T) *httptest.Server {
	if c.orig != nil {
		return splicedServer(t, c.orig, c.cont)
	}
	m := New()
	srv := httptest.NewServer(m)
	// Four requests per protocol run: two per SDK mode; script generously.
	for range 12 {
		m.Script(c.reply)
	}
	return srv
}

func compareTurn(t *testing.T, label string, got, want *llm.Turn) {
	t.Helper()
	if got.Text != want.Text {
		t.Errorf("%s: text %q, want %q", label, got.Text, want.Text)
	}
	if got.Finish.Reason != want.Finish.Reason {
		t.Errorf("%s: finish %+v, want %+v", label, got.Finish, want.Finish)
	}
	if len(got.ToolCalls) != len(want.ToolCalls) {
		t.Fatalf("%s: tool calls %+v, want %+v", label, got.ToolCalls, want.ToolCalls)
	}
	for i, c := range got.ToolCalls {
		if c.Name != want.ToolCalls[i].Name || c.Arguments != want.ToolCalls[i].Arguments || c.ID == "" {
			t.Errorf("%s: tool call %d %+v, want %+v", label, i, c, want.ToolCalls[i])
		}
	}
	if want.Usage != (llm.Usage{}) && got.Usage != want.Usage {
		t.Errorf("%s: usage %+v, want %+v", label, got.Usage, want.Usage)
	}
}

func openaiClient(base string) openai.Client {
	return openai.NewClient(option.WithBaseURL(base+"/v1/"), option.WithAPIKey("test-key"), option.WithMaxRetries(0))
}

func TestOpenAIChatSDK(t *testing.T) {
	ctx := context.Background()
	for _, c := range sdkCases() {
		t.Run(c.name, func(t *testing.T) {
			srv := c.server(t)
			defer srv.Close()
			client := openaiClient(srv.URL)
			params := openai.ChatCompletionNewParams{
				Model:         "gpt-test",
				Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
			}
			stream := client.Chat.Completions.NewStreaming(ctx, params)
			var acc openai.ChatCompletionAccumulator
			chunks := 0
			for stream.Next() {
				chunks++
				if !acc.AddChunk(stream.Current()) {
					t.Fatalf("accumulator rejected chunk %d: %s", chunks, stream.Current().RawJSON())
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if len(acc.Choices) != 1 {
				t.Fatalf("choices %d", len(acc.Choices))
			}
			compareTurn(t, "stream", chatTurn(acc.ChatCompletion), c.want)
			if c.oneText && acc.Choices[0].Message.Content != wholeReply {
				t.Errorf("accumulated content %q, want %q", acc.Choices[0].Message.Content, wholeReply)
			}

			res, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-test",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
			if err != nil {
				t.Fatal(err)
			}
			compareTurn(t, "json", chatTurn(*res), c.want)
		})
	}
}

func chatTurn(cc openai.ChatCompletion) *llm.Turn {
	msg := cc.Choices[0].Message
	t := &llm.Turn{Text: msg.Content, Finish: llm.ParseFinish(cc.Choices[0].FinishReason),
		Usage: llm.Usage{InputTokens: int(cc.Usage.PromptTokens), OutputTokens: int(cc.Usage.CompletionTokens)}}
	for _, tc := range msg.ToolCalls {
		t.ToolCalls = append(t.ToolCalls, llm.ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
	}
	return t
}

func TestOpenAIResponsesSDK(t *testing.T) {
	ctx := context.Background()
	for _, c := range sdkCases() {
		t.Run(c.name, func(t *testing.T) {
			srv := c.server(t)
			defer srv.Close()
			client := openaiClient(srv.URL)
			params := responses.ResponseNewParams{Model: "gpt-test", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}}
			stream := client.Responses.NewStreaming(ctx, params)
			var deltas strings.Builder
			var final *responses.Response
			var doneTexts []string // output_text.done, content_part.done, output_item.done of messages
			starts, lastSeq, messages := 0, int64(-1), 0
			for stream.Next() {
				ev := stream.Current()
				if ev.SequenceNumber <= lastSeq {
					t.Errorf("sequence_number %d after %d", ev.SequenceNumber, lastSeq)
				}
				lastSeq = ev.SequenceNumber
				switch ev.Type {
				case "response.created":
					starts++
				case "response.output_item.added":
					if ev.Item.Type == "message" {
						messages++
					}
				case "response.output_text.done":
					doneTexts = append(doneTexts, ev.AsResponseOutputTextDone().Text)
				case "response.content_part.done":
					doneTexts = append(doneTexts, ev.AsResponseContentPartDone().Part.Text)
				case "response.output_item.done":
					if item := ev.AsResponseOutputItemDone().Item; item.Type == "message" {
						for _, part := range item.Content {
							doneTexts = append(doneTexts, part.Text)
						}
					}
				case "response.output_text.delta":
					deltas.WriteString(ev.AsResponseOutputTextDelta().Delta)
				case "response.completed":
					r := ev.AsResponseCompleted().Response
					final = &r
				case "response.incomplete":
					r := ev.AsResponseIncomplete().Response
					final = &r
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if starts != 1 || final == nil {
				t.Fatalf("%d response.created, final %v", starts, final != nil)
			}
			got := responsesTurn(final)
			compareTurn(t, "stream", got, c.want)
			if deltas.String() != c.want.Text {
				t.Errorf("deltas %q, want %q", deltas.String(), c.want.Text)
			}
			if c.oneText {
				var items []string
				for _, item := range final.Output {
					if item.Type == "message" {
						for _, part := range item.Content {
							items = append(items, part.Text)
						}
					}
				}
				if messages != 1 || len(items) != 1 || items[0] != wholeReply {
					t.Errorf("%d message items added; final message parts %q; want one holding %q", messages, items, wholeReply)
				}
				if len(doneTexts) != 3 || doneTexts[0] != wholeReply || doneTexts[1] != wholeReply || doneTexts[2] != wholeReply {
					t.Errorf("done events carry %q, want the whole reply three times", doneTexts)
				}
			}

			res, err := client.Responses.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			compareTurn(t, "json", responsesTurn(res), c.want)
		})
	}
}

func responsesTurn(r *responses.Response) *llm.Turn {
	t := &llm.Turn{Text: r.OutputText(), Usage: llm.Usage{InputTokens: int(r.Usage.InputTokens), OutputTokens: int(r.Usage.OutputTokens)}}
	for _, item := range r.Output {
		if item.Type == "function_call" {
			fc := item.AsFunctionCall()
			t.ToolCalls = append(t.ToolCalls, llm.ToolCall{ID: fc.CallID, Name: fc.Name, Arguments: fc.Arguments})
		}
	}
	switch {
	case r.Status == "incomplete" && r.IncompleteDetails.Reason == "max_output_tokens":
		t.Finish.Reason = llm.FinishLength
	case r.Status == "completed" && len(t.ToolCalls) > 0:
		t.Finish.Reason = llm.FinishToolCalls
	case r.Status == "completed":
		t.Finish.Reason = llm.FinishStop
	default:
		t.Finish.Reason = llm.FinishOther
	}
	return t
}

func TestAnthropicMessagesSDK(t *testing.T) {
	ctx := context.Background()
	for _, c := range sdkCases() {
		t.Run(c.name, func(t *testing.T) {
			srv := c.server(t)
			defer srv.Close()
			client := anthropic.NewClient(anthropicoption.WithBaseURL(srv.URL), anthropicoption.WithAPIKey("test-key"),
				anthropicoption.WithMaxRetries(0))
			params := anthropic.MessageNewParams{Model: "claude-test", MaxTokens: 1024,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("hi"))}}
			stream := client.Messages.NewStreaming(ctx, params)
			var msg anthropic.Message
			starts := 0
			for stream.Next() {
				ev := stream.Current()
				if ev.Type == "message_start" {
					starts++
				}
				if err := msg.Accumulate(ev); err != nil {
					t.Fatalf("accumulate %s: %v", ev.Type, err)
				}
			}
			if err := stream.Err(); err != nil {
				t.Fatal(err)
			}
			if starts != 1 {
				t.Errorf("%d message_start events", starts)
			}
			compareTurn(t, "stream", messagesTurn(&msg), c.want)
			if c.oneText {
				var texts []string
				for _, b := range msg.Content {
					if b.Type == "text" {
						texts = append(texts, b.Text)
					}
				}
				if len(texts) != 1 || texts[0] != wholeReply {
					t.Errorf("text blocks %q, want one holding %q", texts, wholeReply)
				}
			}

			res, err := client.Messages.New(ctx, params)
			if err != nil {
				t.Fatal(err)
			}
			compareTurn(t, "json", messagesTurn(res), c.want)
		})
	}
}

func messagesTurn(m *anthropic.Message) *llm.Turn {
	t := &llm.Turn{Finish: llm.ParseFinish(string(m.StopReason)),
		Usage: llm.Usage{InputTokens: int(m.Usage.InputTokens), OutputTokens: int(m.Usage.OutputTokens)}}
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			t.Text += b.Text
		case "tool_use":
			t.ToolCalls = append(t.ToolCalls, llm.ToolCall{ID: b.ID, Name: b.Name, Arguments: string(b.Input)})
		}
	}
	return t
}
