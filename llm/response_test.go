package llm

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// sampleProtocol derives the protocol from a sample file name prefix.
func sampleProtocol(t testing.TB, name string) Protocol {
	switch {
	case strings.HasPrefix(name, "chat_"):
		return Chat
	case strings.HasPrefix(name, "responses_"):
		return Responses
	case strings.HasPrefix(name, "messages_"):
		return Messages
	}
	t.Fatalf("sample %s: unknown protocol prefix", name)
	return Unknown
}

// samples returns the sample files matching pattern with their expected turns.
func samples(t testing.TB, pattern string) map[string][2][]byte {
	files, err := filepath.Glob(filepath.Join("testdata", "responses", pattern))
	if err != nil || len(files) == 0 {
		t.Fatalf("no samples for %s: %v", pattern, err)
	}
	out := map[string][2][]byte{}
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		stem := base[:strings.Index(base, ".")]
		want, err := os.ReadFile(filepath.Join("testdata", "responses", stem+".turn.json"))
		if err != nil {
			t.Fatalf("expected turn for %s: %v", base, err)
		}
		out[base] = [2][]byte{body, want}
	}
	return out
}

func decodeTurn(t testing.TB, b []byte) *Turn {
	var turn Turn
	if err := json.Unmarshal(b, &turn); err != nil {
		t.Fatalf("decode turn: %v", err)
	}
	return &turn
}

func TestParseResponseSamples(t *testing.T) {
	for name, s := range samples(t, "*.body.json") {
		t.Run(name, func(t *testing.T) {
			got, err := ParseResponse(sampleProtocol(t, name), s[0])
			if err != nil {
				t.Fatal(err)
			}
			if want := decodeTurn(t, s[1]); !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestParseResponseErrors(t *testing.T) {
	var perr *ProviderError
	cases := []struct {
		name string
		p    Protocol
		body string
		is   func(error) bool
	}{
		{"not json", Chat, `{"id":`, func(err error) bool { return errors.Is(err, ErrNotJSON) }},
		{"array", Messages, `[1]`, func(err error) bool { return err != nil && strings.Contains(err.Error(), "not a JSON object") }},
		{"no choices", Chat, `{"id":"x","choices":[]}`, func(err error) bool { return err != nil && strings.Contains(err.Error(), "no choices") }},
		{"openai error", Responses, `{"error":{"type":"server_error","message":"boom"}}`,
			func(err error) bool {
				return errors.As(err, &perr) && perr.Message == "boom" && perr.Type == "server_error"
			}},
		{"anthropic error", Messages, `{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
			func(err error) bool { return errors.As(err, &perr) && perr.Type == "overloaded_error" }},
		{"unknown protocol", Unknown, `{}`, func(err error) bool { return err != nil && strings.Contains(err.Error(), "unknown") }},
	}
	for _, c := range cases {
		_, err := ParseResponse(c.p, []byte(c.body))
		if !c.is(err) {
			t.Errorf("%s: unexpected error %v", c.name, err)
		}
	}
}

// canonicalTurns are the turns the render round-trip tests use.
func canonicalTurns() map[string]*Turn {
	return map[string]*Turn{
		"text": {ID: "id-1", Model: "m-1", Text: "Hello, world! ünïcødé ☕ \"quoted\"\n\tand <tags> & \u2028 sep",
			Finish: Finish{Reason: FinishStop}, Usage: Usage{InputTokens: 11, OutputTokens: 7}},
		"tools": {ID: "id-2", Model: "m-2", Text: "Calling tools.", ToolCalls: []ToolCall{
			{ID: "call_a", Name: "clock", Arguments: `{"action":"get"}`},
			{ID: "call_b", Name: "shell", Arguments: `{"cmd":"echo \"hi\" && ls -la /tmp/some/longer/path","timeout":30}`},
		}, Finish: Finish{Reason: FinishToolCalls}, Usage: Usage{InputTokens: 50, OutputTokens: 25}},
		"tool only": {ID: "id-3", Model: "m-3", ToolCalls: []ToolCall{{ID: "call_c", Name: "timer", Arguments: `{"seconds":5}`}},
			Finish: Finish{Reason: FinishToolCalls}, Usage: Usage{InputTokens: 1, OutputTokens: 2}},
		"length": {ID: "id-4", Model: "m-4", Text: "cut off mid", Finish: Finish{Reason: FinishLength}, Usage: Usage{InputTokens: 3, OutputTokens: 4}},
		"empty":  {ID: "id-5", Model: "m-5", Finish: Finish{Reason: FinishStop}},
	}
}

// assertSameTurn compares the protocol-independent content of two turns.
func assertSameTurn(t testing.TB, got, want *Turn) {
	t.Helper()
	if got.ID != want.ID || got.Model != want.Model || got.Text != want.Text ||
		got.Finish.Reason != want.Finish.Reason || got.Usage != want.Usage {
		t.Errorf("turn mismatch\n got  %+v\n want %+v", got, want)
	}
	if len(got.ToolCalls) != len(want.ToolCalls) {
		t.Fatalf("tool calls: got %+v want %+v", got.ToolCalls, want.ToolCalls)
	}
	for i := range got.ToolCalls {
		if got.ToolCalls[i] != want.ToolCalls[i] {
			t.Errorf("tool call %d: got %+v want %+v", i, got.ToolCalls[i], want.ToolCalls[i])
		}
	}
}

func TestRenderJSONRoundTrip(t *testing.T) {
	for name, turn := range canonicalTurns() {
		for _, p := range []Protocol{Chat, Responses, Messages} {
			body := RenderJSON(p, turn)
			if !json.Valid(body) {
				t.Fatalf("%s/%s: invalid JSON %s", name, p, body)
			}
			got, err := ParseResponse(p, body)
			if err != nil {
				t.Fatalf("%s/%s: %v\n%s", name, p, err, body)
			}
			assertSameTurn(t, got, turn)
		}
	}
}

func TestRenderJSONFinishValues(t *testing.T) {
	cases := []struct {
		p    Protocol
		f    Finish
		path string
		want string
	}{
		{Chat, Finish{Reason: FinishStop}, `"finish_reason":"stop"`, ""},
		{Chat, Finish{Reason: FinishOther, Raw: "content_filter"}, `"finish_reason":"content_filter"`, ""},
		{Messages, Finish{Reason: FinishStop, Raw: "stop_sequence"}, `"stop_reason":"stop_sequence"`, ""},
		{Messages, Finish{Reason: FinishStop, Raw: "stop"}, `"stop_reason":"end_turn"`, ""}, // Chat's raw is not reused
		{Messages, Finish{Reason: FinishLength}, `"stop_reason":"max_tokens"`, ""},
		{Responses, Finish{Reason: FinishLength}, `"incomplete_details":{"reason":"max_output_tokens"}`, ""},
		{Responses, Finish{Reason: FinishOther, Raw: "content_filter"}, `"status":"incomplete"`, ""},
		{Responses, Finish{Reason: FinishStop}, `"status":"completed"`, ""},
	}
	for _, c := range cases {
		body := string(RenderJSON(c.p, &Turn{Text: "x", Finish: c.f}))
		if !strings.Contains(body, c.path) {
			t.Errorf("%s %+v: %s missing from %s", c.p, c.f, c.path, body)
		}
	}
}

func TestRenderJSONMessagesInvalidInput(t *testing.T) {
	turn := &Turn{ToolCalls: []ToolCall{{ID: "t1", Name: "x", Arguments: "not json"}, {ID: "t2", Name: "y", Arguments: " [1]"}}}
	got, err := ParseResponse(Messages, RenderJSON(Messages, turn))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range got.ToolCalls {
		if c.Arguments != "{}" {
			t.Errorf("input %q, want {} for a non-object argument", c.Arguments)
		}
	}
	if got.Finish.Reason != FinishToolCalls {
		t.Errorf("missing finish should default to tool_calls, got %v", got.Finish)
	}
}

func TestRenderJSONFillsIDs(t *testing.T) {
	turn := &Turn{ToolCalls: []ToolCall{{Name: "a", Arguments: "{}"}, {Name: "b", Arguments: "{}"}}}
	for _, p := range []Protocol{Chat, Responses, Messages} {
		got, err := ParseResponse(p, RenderJSON(p, turn))
		if err != nil {
			t.Fatal(err)
		}
		if got.ID == "" || got.Model == "" || got.ToolCalls[0].ID == "" || got.ToolCalls[0].ID == got.ToolCalls[1].ID {
			t.Errorf("%s: ids not filled uniquely: %+v", p, got)
		}
	}
	if RenderJSON(Unknown, turn) != nil {
		t.Error("unknown protocol should render nothing")
	}
}

func TestMerge(t *testing.T) {
	orig := &Turn{ID: "o", Model: "mo", Text: "Let me check.", ToolCalls: []ToolCall{{Name: "clock"}},
		Finish: Finish{Reason: FinishToolCalls}, Usage: Usage{10, 5}}
	cont := &Turn{ID: "c", Model: "mc", Text: "It is noon.", ToolCalls: []ToolCall{{Name: "shell", Arguments: "{}"}},
		Finish: Finish{Reason: FinishToolCalls, Raw: "tool_use"}, Usage: Usage{20, 7}}
	got := Merge(orig, cont)
	want := &Turn{ID: "o", Model: "mo", Text: "Let me check.\n\nIt is noon.", ToolCalls: []ToolCall{{Name: "shell", Arguments: "{}"}},
		Finish: Finish{Reason: FinishToolCalls, Raw: "tool_use"}, Usage: Usage{30, 12}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	got.ToolCalls[0].Name = "changed"
	if cont.ToolCalls[0].Name != "shell" {
		t.Error("Merge must not alias the continuation's tool calls")
	}
	for _, c := range []struct{ a, b, want string }{
		{"", "b", "b"}, {"a", "", "a"}, {"a\n", "b", "a\nb"}, {"a", "\nb", "a\nb"},
	} {
		if got := Merge(&Turn{Text: c.a}, &Turn{Text: c.b}).Text; got != c.want {
			t.Errorf("Merge(%q,%q) text %q, want %q", c.a, c.b, got, c.want)
		}
	}
	if got := Merge(nil, &Turn{ID: "c", Text: "x"}); got.ID != "c" || got.Text != "x" {
		t.Errorf("nil original: %+v", got)
	}
}

func TestServerClientCalls(t *testing.T) {
	turn := &Turn{ToolCalls: []ToolCall{{Name: "clock"}, {Name: "shell"}, {Name: "timer"}, {Name: "read"}}}
	server := []string{"clock", "timer"}
	if got := turn.ServerCalls(server); len(got) != 2 || got[0].Name != "clock" || got[1].Name != "timer" {
		t.Errorf("server calls %+v", got)
	}
	if got := turn.ClientCalls(server); len(got) != 2 || got[0].Name != "shell" || got[1].Name != "read" {
		t.Errorf("client calls %+v", got)
	}
	if got := turn.ClientCalls(nil); len(got) != 4 {
		t.Errorf("no server tools: all calls are client calls, got %d", len(got))
	}
}

func TestFinishJSON(t *testing.T) {
	cases := map[string]Finish{
		`"stop"`:                             {Reason: FinishStop},
		`"end_turn"`:                         {Reason: FinishStop, Raw: "end_turn"},
		`"max_tokens"`:                       {Reason: FinishLength, Raw: "max_tokens"},
		`"max_output_tokens"`:                {Reason: FinishLength, Raw: "max_output_tokens"},
		`"tool_use"`:                         {Reason: FinishToolCalls, Raw: "tool_use"},
		`"weird"`:                            {Reason: FinishOther, Raw: "weird"},
		`{"reason":"length"}`:                {Reason: FinishLength},
		`{"reason":"stop","raw":"end_turn"}`: {Reason: FinishStop, Raw: "end_turn"},
	}
	for in, want := range cases {
		var f Finish
		if err := json.Unmarshal([]byte(in), &f); err != nil || f != want {
			t.Errorf("%s: got %+v, %v; want %+v", in, f, err, want)
		}
	}
	var f Finish
	if err := json.Unmarshal([]byte(`12`), &f); err == nil {
		t.Error("a number is not a finish")
	}
}
