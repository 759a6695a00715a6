package llm

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/tidwall/gjson"
)

func parse(t *testing.T, p Protocol, body string) *Request {
	t.Helper()
	r, err := ParseRequest(p, []byte(body))
	if err != nil {
		t.Fatalf("ParseRequest(%s): %v", body, err)
	}
	return r
}

func edited(t *testing.T, r *Request) string {
	t.Helper()
	out := r.Bytes()
	if !json.Valid(out) {
		t.Fatalf("invalid JSON: %s", out)
	}
	return string(out)
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct {
		p    Protocol
		body string
		err  error
	}{
		{Chat, `{"messages":[}`, ErrMalformedJSON},
		{Chat, `{"messages":[]} trailing`, ErrMalformedJSON},
		{Chat, ``, ErrMalformedJSON},
		{Chat, `{"messages":["a\x"]}`, ErrMalformedJSON},
		{Responses, `{"input":[{"role":"user","content":"x",}]}`, ErrMalformedJSON},
		{Chat, `[{"role":"user"}]`, ErrBodyShape},
		{Chat, `"text"`, ErrBodyShape},
		{Chat, `{"model":"m"}`, ErrBodyShape},
		{Messages, `{"messages":{"role":"user"}}`, ErrBodyShape},
		{Chat, `{"messages":"hi"}`, ErrBodyShape},
		{Responses, `{"input":5}`, ErrBodyShape},
		{Unknown, `{"messages":[]}`, ErrBodyShape},
	}
	for _, tt := range tests {
		if _, err := ParseRequest(tt.p, []byte(tt.body)); !errors.Is(err, tt.err) {
			t.Errorf("%v %s: err = %v, want %v", tt.p, tt.body, err, tt.err)
		}
	}
	for _, ok := range []string{`{"input":"x"}`, `{"input":null}`, `{"model":"m"}`, `{"input":[]}`} {
		if _, err := ParseRequest(Responses, []byte(ok)); err != nil {
			t.Errorf("Responses %s: %v", ok, err)
		}
	}
}

func TestUneditedBodyIsReturnedAsIs(t *testing.T) {
	body := []byte(`{"model":"gpt-5", "messages":[{"role":"user","content":"plain"}] ,"stream":false}`)
	r, err := ParseRequest(Chat, body)
	must(t, err)
	if n := r.StripDirectives(); n != 0 {
		t.Fatalf("removed %d", n)
	}
	if out := r.Bytes(); &out[0] != &body[0] || r.Edited() {
		t.Error("Bytes copied an unedited body")
	}
	if r.Model() != "gpt-5" || r.Stream() || r.Protocol() != Chat {
		t.Errorf("Model=%q Stream=%v", r.Model(), r.Stream())
	}
}

// TestDirectivesOnlyFromNewUserInput: tags in turns before the last
// assistant message are stripped but not read (docs/directives.md); every tag of
// the new user messages is read, with its message's position.
func TestDirectivesOnlyFromNewUserInput(t *testing.T) {
	r := parse(t, Chat, `{"messages":[
		{"role":"user","content":"<**stopMessage:\"old\"**>"},
		{"role":"user","content":[{"type":"text","text":"a <**route:r1**>"},{"type":"text","text":"<**clock:clear**>"}]},
		{"role":"assistant","content":"<**route:assistant-text-is-ignored**>"},
		{"role":"user","content":"no tags here <**route:new**>"},
		{"role":"system","content":"<**route:system-text-is-ignored**>"},
		{"role":"user","content":[{"type":"text","text":"<**stopMessage:clear**>"}]}]}`)
	ds := r.Directives()
	if len(ds) != 2 || ds[0].Route != "new" || ds[0].Position != 2 || ds[1].Kind != DirectiveStopMessageClear || ds[1].Position != 3 {
		t.Fatalf("got %+v", ds)
	}
	if i := r.FirstNewUserMessage(); i != 3 {
		t.Errorf("FirstNewUserMessage = %d, want 3", i)
	}
	if n := r.StripDirectives(); n != 5 {
		t.Errorf("removed %d, want 5", n)
	}
	if r.StripDirectives() != 0 || len(r.Directives()) != 2 {
		t.Error("second StripDirectives or Directives after strip changed")
	}
	out := edited(t, r)
	for path, want := range map[string]string{
		"messages.2.content":        "<**route:assistant-text-is-ignored**>",
		"messages.4.content":        "<**route:system-text-is-ignored**>",
		"messages.1.content.0.text": "a ",
		"messages.0.content":        "",
		"messages.3.content":        "no tags here ",
	} {
		if got := gjson.Get(out, path).Str; got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
}

func TestEscapedAndDuplicateKeys(t *testing.T) {
	// encoding/json and providers take the last duplicate; so does chime.
	r := parse(t, Chat, `{"messages":[{"role":"user","content":"<**route:first**>"}],"\u006dessages":[{"\u0072ole":"\u0075ser","content":"x\u003c**route:second**\u003ey"}]}`)
	if ds := r.Directives(); len(ds) != 1 || ds[0].Route != "second" {
		t.Fatalf("got %+v", ds)
	}
	r.StripDirectives()
	out := edited(t, r)
	var doc struct {
		Messages []struct{ Content string }
	}
	must(t, json.Unmarshal([]byte(out), &doc))
	if doc.Messages[0].Content != "xy" {
		t.Errorf("content = %q", doc.Messages[0].Content)
	}
}

func TestMessagesEmptiedTurns(t *testing.T) {
	r := parse(t, Messages, `{"messages":[
		{"role":"user","content":"<**stopMessage:\"go\"**>"},
		{"role":"assistant","content":"ok"},
		{"role":"user","content":[{"type":"text","text":"<**a**>"},{"type":"image","source":{"type":"url","url":"u"}},{"type":"text","text":" <**b**>\n"}]},
		{"role":"assistant","content":"ok"},
		{"role":"user","content":[{"type":"text","text":"<**c**>"},{"type":"text","text":"<**d**>","cache_control":{"type":"ephemeral"}}]}]}`)
	if n := r.StripDirectives(); n != 5 {
		t.Fatalf("removed %d", n)
	}
	out := edited(t, r)
	if got := gjson.Get(out, "messages.0.content").Str; got != StrippedPlaceholder {
		t.Errorf("emptied string turn = %q", got)
	}
	if got := gjson.Get(out, "messages.2.content").Raw; got != `[{"type":"image","source":{"type":"url","url":"u"}}]` {
		t.Errorf("blank text blocks not dropped: %s", got)
	}
	if got := gjson.Get(out, "messages.4.content").Raw; got != `[{"type":"text","text":"(chime directive)"}]` {
		t.Errorf("all-blank turn: %s", got)
	}
	// Appending to the final turn replaces its placeholder.
	must(t, r.AppendUserText("tick"))
	must(t, r.AppendUserText("tock"))
	out = edited(t, r)
	if got := gjson.Get(out, "messages.4.content").Raw; got != `[{"type":"text","text":"tick"},{"type":"text","text":"tock"}]` {
		t.Errorf("final turn after append: %s", got)
	}
}

func TestMessagesAppendShapes(t *testing.T) {
	tests := []struct{ name, body, path, want string }{
		{"string content", `{"messages":[{"role":"user","content":"hi"}]}`, "messages.0.content",
			`[{"type":"text","text":"hi"},{"type":"text","text":"T1"},{"type":"text","text":"T2"}]`},
		{"stripped string content", `{"messages":[{"role":"user","content":"hi <**x**>"}]}`, "messages.0.content",
			`[{"type":"text","text":"hi "},{"type":"text","text":"T1"},{"type":"text","text":"T2"}]`},
		{"after tool_result", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"out"}]}]}`, "messages.0.content",
			`[{"type":"tool_result","tool_use_id":"t","content":"out"},{"type":"text","text":"T1"},{"type":"text","text":"T2"}]`},
		{"empty string content", `{"messages":[{"role":"user","content":""}]}`, "messages.0.content",
			`[{"type":"text","text":"T1"},{"type":"text","text":"T2"}]`},
		{"null content", `{"messages":[{"role":"user","content":null}]}`, "messages.0.content",
			`[{"type":"text","text":"T1"},{"type":"text","text":"T2"}]`},
		{"last is assistant", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"}]}`, "messages.2",
			`{"role":"user","content":[{"type":"text","text":"T1"},{"type":"text","text":"T2"}]}`},
		{"no messages", `{"messages":[ ]}`, "messages",
			`[{"role":"user","content":[{"type":"text","text":"T1"},{"type":"text","text":"T2"}]} ]`},
		{"empty block list", `{"messages":[{"role":"user","content":[]}]}`, "messages.0.content",
			`[{"type":"text","text":"T1"},{"type":"text","text":"T2"}]`},
		// Claude Code's mid-conversation-system beta: the system message
		// stays last and the user turn gets the text, else two user turns
		// would follow each other once system is set aside.
		{"before a trailing system message", `{"messages":[{"role":"user","content":"hi"},{"role":"system","content":"s"}]}`, "messages",
			`[{"role":"user","content":[{"type":"text","text":"hi"},{"type":"text","text":"T1"},{"type":"text","text":"T2"}]},{"role":"system","content":"s"}]`},
		{"tool_result before two system messages", `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"out"}]},{"role":"system","content":"a"},{"role":"system","content":"b"}]}`, "messages",
			`[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":"out"},{"type":"text","text":"T1"},{"type":"text","text":"T2"}]},{"role":"system","content":"a"},{"role":"system","content":"b"}]`},
		{"system after assistant", `{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"system","content":"s"}]}`, "messages.3",
			`{"role":"user","content":[{"type":"text","text":"T1"},{"type":"text","text":"T2"}]}`},
		{"only a system message", `{"messages":[{"role":"system","content":"s"}]}`, "messages",
			`[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"T1"},{"type":"text","text":"T2"}]}]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := parse(t, Messages, tt.body)
			r.StripDirectives()
			must(t, r.AppendUserText("T1"))
			must(t, r.AppendUserText("T2"))
			if got := gjson.Get(edited(t, r), tt.path).Raw; got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	r := parse(t, Messages, `{"messages":[{"role":"user","content":5}]}`)
	if err := r.AppendUserText("x"); !errors.Is(err, ErrBodyShape) {
		t.Errorf("err = %v", err)
	}
	if err := r.AppendUserText(""); !errors.Is(err, ErrEmptyText) {
		t.Errorf("err = %v", err)
	}
}

func TestResponsesAppendShapes(t *testing.T) {
	item := func(s string) string {
		return `{"type":"message","role":"user","content":[{"type":"input_text","text":"` + s + `"}]}`
	}
	tests := []struct{ name, body, want string }{
		{"string input", `{"input":"hello"}`, `[` + item("hello") + `,` + item("T1") + `,` + item("T2") + `]`},
		{"stripped string input", `{"input":"hello <**x**>"}`, `[` + item("hello ") + `,` + item("T1") + `,` + item("T2") + `]`},
		{"emptied string input", `{"input":"<**x**>"}`, `[` + item("T1") + `,` + item("T2") + `]`},
		{"null input", `{"input":null}`, `[` + item("T1") + `,` + item("T2") + `]`},
		{"absent input", `{"model":"m"}`, `[` + item("T1") + `,` + item("T2") + `]`},
		{"empty list", `{"input":[]}`, `[` + item("T1") + `,` + item("T2") + `]`},
		{"item list", `{"input":[{"type":"function_call_output","call_id":"c","output":"o"}]}`,
			`[{"type":"function_call_output","call_id":"c","output":"o"},` + item("T1") + `,` + item("T2") + `]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := parse(t, Responses, tt.body)
			r.StripDirectives()
			must(t, r.AppendUserText("T1"))
			must(t, r.AppendUserText("T2"))
			if got := gjson.Get(edited(t, r), "input").Raw; got != tt.want {
				t.Errorf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
}

func TestChatAppendKeepsFormatting(t *testing.T) {
	body := "{\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"hi\"}\n  ],\n  \"model\": \"m\"\n}"
	r := parse(t, Chat, body)
	must(t, r.AppendUserText("line1\nline2 \"q\""))
	want := "{\n  \"messages\": [\n    {\"role\": \"user\", \"content\": \"hi\"},{\"role\":\"user\",\"content\":\"line1\\nline2 \\\"q\\\"\"}\n  ],\n  \"model\": \"m\"\n}"
	if got := edited(t, r); got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestSetStream(t *testing.T) {
	r := parse(t, Chat, `{"messages":[],"stream":false}`)
	r.SetStream(true)
	if !r.Stream() || edited(t, r) != `{"messages":[],"stream":true}` {
		t.Errorf("got %s", r.Bytes())
	}
	r.SetStream(false)
	if r.Stream() || edited(t, r) != `{"messages":[],"stream":false}` {
		t.Errorf("got %s", r.Bytes())
	}
	r = parse(t, Responses, `{}`)
	r.SetStream(true)
	must(t, r.InjectTools([]ToolSpec{{Name: "t"}}))
	if got := edited(t, r); got != `{"stream":true,"tools":[{"type":"function","name":"t","description":"","parameters":{"type":"object","properties":{}},"strict":false}]}` {
		t.Errorf("got %s", got)
	}
}

// The filter strips first, but the edits do not depend on the order.
func TestEditOrderIndependent(t *testing.T) {
	bodies := map[Protocol]string{
		Chat:      `{"messages":[{"role":"user","content":"a <**x**> b"}],"model":"m"}`,
		Responses: `{"input":"a <**x**> b","model":"m"}`,
		Messages:  `{"model":"m","messages":[{"role":"user","content":"a <**x**> b"}]}`,
	}
	for p, body := range bodies {
		run := func(stripFirst bool) string {
			r := parse(t, p, body)
			if stripFirst {
				r.StripDirectives()
			}
			must(t, r.InjectTools([]ToolSpec{{Name: "clock"}}))
			must(t, r.AppendUserText("T1"))
			r.SetStream(true)
			must(t, r.AppendUserText("T2"))
			if !stripFirst {
				r.StripDirectives()
			}
			return edited(t, r)
		}
		if a, b := run(true), run(false); a != b {
			t.Errorf("%v:\nstrip first %s\nstrip last  %s", p, a, b)
		}
	}
}
