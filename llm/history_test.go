package llm

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func TestTrimHistoryCutsAtUserTurns(t *testing.T) {
	chat := `{"model":"m","messages":[{"role":"system","content":"sys"},` +
		`{"role":"user","content":"u1"},{"role":"assistant","content":"a1"},` +
		`{"role":"user","content":"u2"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},` +
		`{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"assistant","content":"a2"},` +
		`{"role":"user","content":"u3"}]}`
	messages := `{"model":"m","system":"sys","messages":[{"role":"user","content":"u1"},{"role":"assistant","content":"a1"},` +
		`{"role":"user","content":[{"type":"text","text":"u2"}]},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},` +
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"r"}]},{"role":"assistant","content":"a2"},` +
		`{"role":"user","content":"u3"}]}`
	responses := `{"model":"m","instructions":"ins","input":[{"role":"developer","content":"dev"},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"u1"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"a1"}]},` +
		`{"role":"user","content":"u2"},{"type":"reasoning","id":"rs1","summary":[]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},` +
		`{"type":"function_call_output","call_id":"c1","output":"r"},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"u3"}]}]}`
	cases := []struct {
		name  string
		p     Protocol
		body  string
		path  string
		turns int
		want  string // the texts of the kept items, by a crude content probe
	}{
		{"chat 2", Chat, chat, "messages", 2, "sys u2 f r a2 u3"},
		{"chat 1", Chat, chat, "messages", 1, "sys u3"},
		{"chat all", Chat, chat, "messages", 3, "sys u1 a1 u2 f r a2 u3"},
		{"chat more", Chat, chat, "messages", 9, "sys u1 a1 u2 f r a2 u3"},
		{"messages 2", Messages, messages, "messages", 2, "u2 f r a2 u3"},
		{"messages 1", Messages, messages, "messages", 1, "u3"},
		{"responses 2", Responses, responses, "input", 2, "dev u2 rs1 f r u3"},
		{"responses 1", Responses, responses, "input", 1, "dev u3"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := TrimHistory(tc.p, []byte(tc.body), tc.turns)
			if err != nil {
				t.Fatal(err)
			}
			if !json.Valid(out) {
				t.Fatalf("invalid JSON: %s", out)
			}
			if got := probe(gjson.GetBytes(out, tc.path)); got != tc.want {
				t.Fatalf("kept %q, want %q", got, tc.want)
			}
			for _, k := range []string{"model", "system", "instructions"} {
				if gjson.Get(tc.body, k).Raw != gjson.GetBytes(out, k).Raw {
					t.Fatalf("%s changed", k)
				}
			}
		})
	}
}

// probe names each item by its text, tool name, reasoning id or result.
func probe(list gjson.Result) string {
	var out []string
	for _, it := range list.Array() {
		for _, path := range []string{"content", "content.0.text", "content.0.name", "content.0.content", "tool_calls.0.function.name", "name", "id", "output"} {
			v := it.Get(path)
			if v.Type == gjson.String && v.String() != "" {
				out = append(out, v.String())
				break
			}
		}
	}
	return strings.Join(out, " ")
}

func TestTrimHistoryLeavesShortAndStringBodies(t *testing.T) {
	for _, body := range []string{
		`{"input":"just text"}`, `{"model":"m"}`,
	} {
		out, err := TrimHistory(Responses, []byte(body), 1)
		if err != nil || string(out) != body {
			t.Fatalf("%s: got %s, %v", body, out, err)
		}
	}
	if _, err := TrimHistory(Chat, []byte(`{"messages":{}}`), 1); err == nil {
		t.Fatal("a non-list messages must be an error")
	}
	if _, err := TrimHistory(Chat, []byte(`{"messages":[`), 1); err == nil {
		t.Fatal("broken JSON must be an error")
	}
}

func TestTrimHistoryRealClients(t *testing.T) {
	for _, tc := range []struct {
		file string
		p    Protocol
	}{
		{"claude-code-2.1.197-messages-tool-roundtrip.json", Messages},
		{"codex-cli-0.169-responses-turn1.json", Responses},
	} {
		raw, err := os.ReadFile("testdata/clients/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		body := []byte(gjson.GetBytes(raw, "body").Raw)
		out, err := TrimHistory(tc.p, body, 1)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if _, err := ParseRequest(tc.p, out); err != nil {
			t.Fatalf("%s: trimmed body does not parse: %v", tc.file, err)
		}
	}
}

func FuzzTrimHistory(f *testing.F) {
	f.Add(`{"messages":[{"role":"user","content":"a"},{"role":"assistant","content":"b"},{"role":"user","content":"c"}]}`, 1)
	f.Add(`{"input":[{"role":"developer","content":"d"},{"role":"user","content":"a"},{"role":"user","content":"c"}]}`, 1)
	f.Add(`{"messages":"x"}`, 2)
	f.Fuzz(func(t *testing.T, body string, turns int) {
		for _, p := range []Protocol{Chat, Messages, Responses} {
			out, err := TrimHistory(p, []byte(body), turns%8)
			if err == nil && !json.Valid(out) && json.Valid([]byte(body)) {
				t.Fatalf("valid input gave invalid output: %s", out)
			}
		}
	})
}
