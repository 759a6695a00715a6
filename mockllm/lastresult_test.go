package mockllm

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/chimehq/chime/llm"
)

func TestLastToolOutputAndFill(t *testing.T) {
	const res = `{"ok":true,"timer_id":"tmr_42","remaining_s":4}`
	bodies := map[llm.Protocol]string{
		llm.Chat: `{"messages":[{"role":"tool","tool_call_id":"a","content":"{\"timer_id\":\"old\"}"},` +
			`{"role":"assistant","content":"x"},{"role":"tool","tool_call_id":"b","content":[{"type":"text","text":` + quote(res) + `}]}]}`,
		llm.Responses: `{"input":[{"type":"function_call_output","call_id":"a","output":"{}"},{"type":"function_call_output","call_id":"b","output":` + quote(res) + `}]}`,
		llm.Messages:  `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":` + quote(res) + `}]}]}`,
	}
	for p, body := range bodies {
		got := LastToolOutput(p, []byte(body))
		if got != res {
			t.Fatalf("%s: last output %q", p, got)
		}
		if args := fillFromResult(`{"timer_id":"{{lastResult.timer_id}}","n":"{{lastResult.remaining_s}}","x":"{{lastResult.nope}}"}`, got); args != `{"timer_id":"tmr_42","n":"4","x":""}` {
			t.Fatalf("%s: filled %s", p, args)
		}
	}
	if got := LastToolOutput(llm.Chat, []byte(`{"messages":[]}`)); got != "" {
		t.Fatalf("no result: %q", got)
	}
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// TestNamedQueues: a request naming a queue takes that queue's reply, one
// naming none the default queue's.
func TestNamedQueues(t *testing.T) {
	s := New()
	s.ScriptQueue("a", Reply{Text: "from a"})
	s.Script(Reply{Text: "from default"})
	srv := httptest.NewServer(s)
	defer srv.Close()
	ask := func(queue string) string {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("authorization", "Bearer k")
		if queue != "" {
			req.Header.Set(QueueHeader, queue)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		turn, err := llm.ParseResponse(llm.Chat, raw)
		if err != nil {
			t.Fatal(err)
		}
		return turn.Text
	}
	if got := ask("a"); got != "from a" {
		t.Fatalf("queue a: %q", got)
	}
	if got := ask("a"); got != "ok" {
		t.Fatalf("queue a, empty: %q", got)
	}
	if got := ask(""); got != "from default" {
		t.Fatalf("default: %q", got)
	}
}
