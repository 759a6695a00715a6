package llm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// docs/architecture.md "provider content is replayed verbatim": a turn parsed from JSON
// or SSE keeps thinking blocks, reasoning items and Chat reasoning_content,
// and a followup gives them back exactly, in their place.

// clientBody returns the body of a captured client request (testdata/clients).
func clientBody(t testing.TB, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "clients", name))
	if err != nil {
		t.Fatal(err)
	}
	body := gjson.GetBytes(raw, "body")
	if !body.IsObject() {
		t.Fatalf("%s: no body object", name)
	}
	return []byte(body.Raw)
}

func sample(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "responses", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sampleTurn parses a JSON body or folds an SSE sample.
func sampleTurn(t testing.TB, name string) *Turn {
	t.Helper()
	p, data := sampleProtocol(t, name), sample(t, name)
	if strings.HasSuffix(name, ".sse") {
		turn, b := buildTurn(mustRead(t, p, data))
		if !b.Terminated() {
			t.Fatalf("%s: not terminated", name)
		}
		return turn
	}
	turn, err := ParseResponse(p, data)
	if err != nil {
		t.Fatal(err)
	}
	return turn
}

// sseItem returns the item of the n-th response.output_item.done event of a
// Responses SSE sample, exactly as it was on the wire.
func sseItem(t testing.TB, data []byte, n int) string {
	t.Helper()
	for _, ev := range mustRead(t, Responses, data) {
		if ev.Type != "response.output_item.done" {
			continue
		}
		if n == 0 {
			return gjson.GetBytes(ev.Data, "item").Raw
		}
		n--
	}
	t.Fatal("no such output_item.done")
	return ""
}

// resultsFor answers every call of turn.
func resultsFor(turn *Turn) []ToolResult {
	var out []ToolResult
	for _, c := range turn.ToolCalls {
		out = append(out, ToolResult{CallID: c.ID, Name: c.Name, Output: `{"ok":true}`})
	}
	return out
}

// assistantParts returns the raw JSON of the parts of the assistant turn a
// followup appended: Messages the content blocks of the last assistant
// message, Responses the input items after the request's own ones.
func assistantParts(t testing.TB, p Protocol, request, followup []byte) []string {
	t.Helper()
	if !json.Valid(followup) {
		t.Fatalf("followup is not JSON:\n%s", followup)
	}
	var out []string
	switch p {
	case Messages:
		msgs := gjson.GetBytes(followup, "messages").Array()
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Get("role").String() == "assistant" {
				for _, b := range msgs[i].Get("content").Array() {
					out = append(out, b.Raw)
				}
				return out
			}
		}
		t.Fatal("no assistant message")
	case Responses:
		skip := len(gjson.GetBytes(request, "input").Array())
		for i, it := range gjson.GetBytes(followup, "input").Array() {
			if i >= skip && it.Get("type").String() != "function_call_output" {
				out = append(out, it.Raw)
			}
		}
	}
	return out
}

func TestFollowupReplaysThinkingBlocks(t *testing.T) {
	request := clientBody(t, "claude-code-2.1.197-messages-turn1.json")
	if gjson.GetBytes(request, "thinking.type").String() != "adaptive" {
		t.Fatal("the Claude Code fixture enables thinking")
	}
	jsonBody := sample(t, "messages_thinkj.body.json")
	block := func(i int) string { return gjson.GetBytes(jsonBody, "content."+string(rune('0'+i))).Raw }
	cases := []struct {
		name string
		want []string // "text"/"tool_use" stand for the block of that type
	}{
		// JSON: the provider's bytes, whitespace and escapes included.
		{"messages_thinkj.body.json", []string{block(0), block(1), "text", block(3), block(4), "tool_use"}},
		// SSE: each block as a non-streaming response would hold it.
		{"messages_think.sse", []string{
			`{"type":"thinking","thinking":"The user wants the time; call <clock> & \"search\" ☕.","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"}`,
			`{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}`,
			`{"type":"server_tool_use","id":"srvtoolu_01WYG3","name":"web_search","input":{"query": "time zones"}}`,
			`{"type":"web_search_tool_result","tool_use_id":"srvtoolu_01WYG3","content":[{"type":"web_search_result","title":"Time","url":"https://example.com/time","encrypted_content":"Eo8BCioIAhgBIiQ3"}]}`,
			"text", "tool_use"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			turn := sampleTurn(t, c.name)
			out, err := BuildFollowup(Messages, request, turn, resultsFor(turn), "")
			if err != nil {
				t.Fatal(err)
			}
			got := assistantParts(t, Messages, request, out)
			if len(got) != len(c.want) {
				t.Fatalf("assistant content has %d blocks, want %d:\n%s", len(got), len(c.want), strings.Join(got, "\n"))
			}
			for i, w := range c.want {
				typ := gjson.Get(got[i], "type").String()
				switch w {
				case "text":
					if typ != "text" || gjson.Get(got[i], "text").String() != "Checking the clock." {
						t.Errorf("block %d: %s, want the one text block", i, got[i])
					}
				case "tool_use":
					if typ != "tool_use" || gjson.Get(got[i], "id").String() != turn.ToolCalls[0].ID {
						t.Errorf("block %d: %s, want the tool_use", i, got[i])
					}
				default:
					if got[i] != w {
						t.Errorf("block %d not replayed byte for byte:\n got  %s\n want %s", i, got[i], w)
					}
				}
			}
			if !strings.HasPrefix(got[0], `{"type":`) || gjson.Get(got[0], "type").String() != "thinking" {
				t.Errorf("the signed thinking block must come first: %s", got[0])
			}
			// The tool_result answers the tool_use in the next user message.
			msgs := gjson.GetBytes(out, "messages").Array()
			last := msgs[len(msgs)-1]
			if last.Get("role").String() != "user" || last.Get("content.0.tool_use_id").String() != turn.ToolCalls[0].ID {
				t.Errorf("last message: %s", last.Raw)
			}
		})
	}
}

func TestFollowupReplaysReasoningItems(t *testing.T) {
	request := clientBody(t, "codex-cli-0.169-responses-turn1.json")
	if gjson.GetBytes(request, "store").Bool() || gjson.GetBytes(request, "include.0").String() != "reasoning.encrypted_content" {
		t.Fatal("the Codex fixture sends store:false with include reasoning.encrypted_content")
	}
	jsonBody, sseBody := sample(t, "responses_reasonj.body.json"), sample(t, "responses_reason.sse")
	out := func(i int) string { return gjson.GetBytes(jsonBody, "output."+string(rune('0'+i))).Raw }
	cases := []struct {
		name string
		want []string
	}{
		{"responses_reasonj.body.json", []string{out(0), "message", out(2), "function_call", out(4)}},
		{"responses_reason.sse", []string{sseItem(t, sseBody, 0), "message", "function_call"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			turn := sampleTurn(t, c.name)
			body, err := BuildFollowup(Responses, request, turn, resultsFor(turn), "")
			if err != nil {
				t.Fatal(err)
			}
			got := assistantParts(t, Responses, request, body)
			if len(got) != len(c.want) {
				t.Fatalf("%d items, want %d:\n%s", len(got), len(c.want), strings.Join(got, "\n"))
			}
			for i, w := range c.want {
				typ := gjson.Get(got[i], "type").String()
				switch w {
				case "message":
					if typ != "message" || gjson.Get(got[i], "content.0.text").String() != turn.Text {
						t.Errorf("item %d: %s, want the message", i, got[i])
					}
				case "function_call":
					if typ != "function_call" || gjson.Get(got[i], "call_id").String() != turn.ToolCalls[0].ID {
						t.Errorf("item %d: %s, want the function_call", i, got[i])
					}
				default:
					if got[i] != w {
						t.Errorf("item %d not replayed byte for byte:\n got  %s\n want %s", i, got[i], w)
					}
				}
			}
			if gjson.Get(got[0], "type").String() != "reasoning" || gjson.Get(got[0], "encrypted_content").String() == "" {
				t.Errorf("the reasoning item with its encrypted_content comes first: %s", got[0])
			}
		})
	}
}

func TestFollowupKeepsChatReasoningContent(t *testing.T) {
	request := []byte(`{"model":"deepseek-reasoner","messages":[{"role":"user","content":"time?"}]}`)
	for _, name := range []string{"chat_reasonj.body.json", "chat_reason.sse"} {
		t.Run(name, func(t *testing.T) {
			turn := sampleTurn(t, name)
			out, err := BuildFollowup(Chat, request, turn, resultsFor(turn), "")
			if err != nil {
				t.Fatal(err)
			}
			a := gjson.GetBytes(out, "messages.1")
			if a.Get("role").String() != "assistant" || a.Get("reasoning_content").String() != "The user wants the time." {
				t.Fatalf("assistant message lost reasoning_content: %s", a.Raw)
			}
			if a.Get("content").String() != "Checking." || a.Get("tool_calls.0.id").String() != turn.ToolCalls[0].ID {
				t.Errorf("assistant message: %s", a.Raw)
			}
			if name == "chat_reasonj.body.json" && a.Get("provider_specific").Raw != `{"k": [1, 2]}` {
				t.Errorf("provider extra not kept verbatim: %s", a.Raw)
			}
			if a.Get("refusal").Exists() || a.Get("annotations").Exists() {
				t.Errorf("response-only members must not be sent back: %s", a.Raw)
			}
		})
	}
}

// TestItemsSurviveHostAPI: the filter sends the turn to the host as JSON
// (ResolveRequest) and the host builds the followup from what it decoded;
// the result must be the same bytes.
func TestItemsSurviveHostAPI(t *testing.T) {
	for _, c := range []struct {
		sample  string
		request []byte
	}{
		{"messages_thinkj.body.json", clientBody(t, "claude-code-2.1.197-messages-turn1.json")},
		{"messages_think.sse", clientBody(t, "claude-code-2.1.197-messages-turn1.json")},
		{"responses_reasonj.body.json", clientBody(t, "codex-cli-0.169-responses-turn1.json")},
		{"responses_reason.sse", clientBody(t, "codex-cli-0.169-responses-turn1.json")},
		{"chat_reasonj.body.json", []byte(`{"messages":[{"role":"user","content":"x"}]}`)},
	} {
		t.Run(c.sample, func(t *testing.T) {
			p := sampleProtocol(t, c.sample)
			turn := sampleTurn(t, c.sample)
			if !turn.HasProviderItems() {
				t.Fatal("sample without provider items")
			}
			// The turn crosses to the host inside hostapi.ResolveRequest as
			// its "turn" member.
			type resolveBody struct {
				Turn *Turn `json:"turn"`
			}
			wire, err := json.Marshal(resolveBody{Turn: turn})
			if err != nil {
				t.Fatal(err)
			}
			var back resolveBody
			if err := json.Unmarshal(wire, &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Turn, turn) {
				t.Fatalf("turn changed on the wire:\n got  %+v\n want %+v", back.Turn, turn)
			}
			want, err := BuildFollowup(p, c.request, turn, resultsFor(turn), "")
			if err != nil {
				t.Fatal(err)
			}
			// The request travels byte for byte (the filter splices it in;
			// json.Marshal would compact it): only the turn is under test.
			got, err := BuildFollowup(p, c.request, back.Turn, resultsFor(back.Turn), "")
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Error("the followup built from the decoded turn differs")
			}
		})
	}
}

func TestMergeKeepsProviderItems(t *testing.T) {
	thinking := `{"type":"thinking","thinking":"t","signature":"s"}`
	orig := &Turn{Text: "Let me check.", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "clock", Arguments: "{}"}},
		Items: []Item{{Kind: ItemRaw, Raw: thinking}, {Kind: ItemText}, {Kind: ItemToolCall}}}
	cont := &Turn{Text: "It is noon.", Finish: Finish{Reason: FinishStop}}
	m := Merge(orig, cont)
	want := []Item{{Kind: ItemRaw, Raw: thinking}, {Kind: ItemText}}
	if !reflect.DeepEqual(m.Items, want) {
		t.Fatalf("items %+v, want %+v", m.Items, want)
	}
	body := RenderJSON(Messages, m)
	content := gjson.GetBytes(body, "content").Array()
	if len(content) != 2 || content[0].Raw != thinking || content[1].Get("text").String() != "Let me check.\n\nIt is noon." {
		t.Fatalf("merged Messages response: %s", body)
	}

	// The continuation's own reasoning stays with its calls, after the one
	// message item.
	rs1, rs2 := `{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"A"}`, `{"type":"reasoning","id":"rs_2","summary":[],"encrypted_content":"B"}`
	orig = &Turn{Text: "one", Items: []Item{{Kind: ItemRaw, Raw: rs1}, {Kind: ItemText}}}
	cont = &Turn{Text: "two", ToolCalls: []ToolCall{{ID: "call_1", Name: "shell", Arguments: "{}"}},
		Items: []Item{{Kind: ItemRaw, Raw: rs2}, {Kind: ItemText}, {Kind: ItemToolCall}}}
	body = RenderJSON(Responses, Merge(orig, cont))
	var types []string
	for _, it := range gjson.GetBytes(body, "output").Array() {
		types = append(types, it.Get("type").String()+":"+it.Get("id").String())
	}
	if got := strings.Join(types, " "); got != "reasoning:rs_1 message:msg_chime_1 reasoning:rs_2 function_call:fc_chime_3" {
		t.Fatalf("merged Responses output: %s\n%s", got, body)
	}
	if gjson.GetBytes(body, "output.0").Raw != rs1 || gjson.GetBytes(body, "output.2").Raw != rs2 {
		t.Errorf("reasoning items not kept byte for byte: %s", body)
	}
	if gjson.GetBytes(body, "output.1.content.0.text").String() != "one\n\ntwo" {
		t.Errorf("one message item with both texts: %s", body)
	}

	// Chat: reasoning of both turns is joined; other extras keep the last value.
	orig = &Turn{Text: "a", Items: []Item{{Kind: ItemFields, Raw: `{"reasoning_content":"r1","x":1}`}}}
	cont = &Turn{Text: "b", Items: []Item{{Kind: ItemFields, Raw: `{"reasoning_content":"r2","x":2}`}}}
	body = RenderJSON(Chat, Merge(orig, cont))
	msg := gjson.GetBytes(body, "choices.0.message")
	if msg.Get("reasoning_content").String() != "r1r2" || msg.Get("x").Int() != 2 || msg.Get("content").String() != "a\n\nb" {
		t.Errorf("merged Chat message: %s", msg.Raw)
	}

	// No provider content: no items, as before.
	if m := Merge(&Turn{Text: "a"}, &Turn{Text: "b", ToolCalls: []ToolCall{{Name: "x"}}}); m.Items != nil {
		t.Errorf("items %+v for plain turns", m.Items)
	}
}

func TestSegmentsLayout(t *testing.T) {
	raw := `{"type":"thinking"}`
	calls := []ToolCall{{ID: "a"}, {ID: "b"}}
	for _, c := range []struct {
		name string
		turn Turn
		want string
	}{
		{"no items", Turn{Text: "x", ToolCalls: calls}, "text call0 call1"},
		{"raw first", Turn{Text: "x", ToolCalls: calls, Items: []Item{{Kind: ItemRaw, Raw: raw}, {Kind: ItemText}, {Kind: ItemToolCall}, {Kind: ItemToolCall}}}, "raw text call0 call1"},
		{"interleaved", Turn{ToolCalls: calls, Items: []Item{{Kind: ItemRaw, Raw: raw}, {Kind: ItemToolCall}, {Kind: ItemRaw, Raw: raw}, {Kind: ItemToolCall}}}, "raw call0 raw call1"},
		{"text added later goes before the calls", Turn{Text: "note", ToolCalls: calls[:1], Items: []Item{{Kind: ItemRaw, Raw: raw}, {Kind: ItemToolCall}}}, "raw text call0"},
		{"text without calls goes after raw", Turn{Text: "note", Items: []Item{{Kind: ItemRaw, Raw: raw}}}, "raw text"},
		{"fewer calls than markers", Turn{ToolCalls: calls[:1], Items: []Item{{Kind: ItemRaw, Raw: raw}, {Kind: ItemToolCall}, {Kind: ItemToolCall}}}, "raw call0"},
		{"more calls than markers", Turn{ToolCalls: calls, Items: []Item{{Kind: ItemRaw, Raw: raw}, {Kind: ItemToolCall}}}, "raw call0 call1"},
		{"empty text is left out", Turn{Items: []Item{{Kind: ItemRaw, Raw: raw}, {Kind: ItemText}}}, "raw"},
		{"broken raw is never rendered", Turn{Text: "x", Items: []Item{{Kind: ItemRaw, Raw: `{"a":`}, {Kind: ItemText}}}, "text"},
	} {
		var got []string
		for _, s := range c.turn.segments() {
			switch s.kind {
			case ItemRaw:
				got = append(got, "raw")
			case ItemText:
				got = append(got, "text")
			case ItemToolCall:
				got = append(got, "call"+string(rune('0'+s.call)))
			}
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s: %q, want %q", c.name, strings.Join(got, " "), c.want)
		}
	}
}

func TestBuildFollowupRejectsBrokenItems(t *testing.T) {
	req := []byte(`{"messages":[{"role":"user","content":"x"}]}`)
	for _, items := range [][]Item{
		{{Kind: ItemRaw, Raw: `{"type":"thinking"`}},
		{{Kind: ItemRaw, Raw: `"a string"`}},
		{{Kind: ItemFields, Raw: `[1]`}},
		{{Kind: "mystery"}},
	} {
		turn := &Turn{Text: "t", Items: items}
		if _, err := BuildFollowup(Messages, req, turn, nil, "go on"); err == nil || !strings.Contains(err.Error(), "item 0") {
			t.Errorf("items %+v: err %v", items, err)
		}
		if err := turn.CheckItems(); err == nil {
			t.Errorf("CheckItems accepted %+v", items)
		}
	}
}

// A turn with only raw content (no text, no calls) adds no assistant
// message: a lone thinking block or reasoning item is not a valid turn.
func TestFollowupRawOnlyTurnAddsNoAssistant(t *testing.T) {
	turn := &Turn{Items: []Item{{Kind: ItemRaw, Raw: `{"type":"reasoning","id":"rs_1","summary":[]}`}}}
	out, err := BuildFollowup(Responses, []byte(`{"input":[]}`), turn, nil, "go on")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), "rs_1") || gjson.GetBytes(out, "input.#").Int() != 1 {
		t.Errorf("followup: %s", out)
	}
}

func TestTurnBuilderChatFields(t *testing.T) {
	var b TurnBuilder
	for _, d := range []string{
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","reasoning_content":"a<"}}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":"b","meta":{"n":1}}}]}`,
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"reasoning_content":null,"meta":{"n":2},"content":"hi"}}]}`,
	} {
		for _, ev := range mustRead(t, Chat, []byte("data: "+d+"\n\n")) {
			b.Add(ev)
		}
	}
	turn := b.Turn()
	want := []Item{{Kind: ItemFields, Raw: `{"reasoning_content":"a<b","meta":{"n":2}}`}}
	if !reflect.DeepEqual(turn.Items, want) || turn.Text != "hi" {
		t.Errorf("turn %+v", turn)
	}
}
