package resolve

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

type fakeTools struct{ calls atomic.Int32 }

func (f *fakeTools) Execute(context.Context, string, string, string, json.RawMessage) json.RawMessage {
	f.calls.Add(1)
	return json.RawMessage(`{"ok":true}`)
}

// toolSteps is a chain of the server-tool step alone over tools.
func toolSteps(t testing.TB, tools Tools) []Step {
	t.Helper()
	s, err := NewToolStep(tools, nil)
	if err != nil {
		t.Fatal(err)
	}
	return []Step{s}
}

func TestNewNeedsDependencies(t *testing.T) {
	t.Parallel()
	steps := toolSteps(t, &fakeTools{})
	if _, err := New(Config{Token: "t"}); err == nil {
		t.Fatal("New without steps succeeded")
	}
	if _, err := New(Config{Token: "t", Steps: append(steps, nil)}); err == nil {
		t.Fatal("New with a nil step succeeded")
	}
	if _, err := New(Config{Steps: steps}); err == nil {
		t.Fatal("New without a token succeeded")
	}
	if _, err := New(Config{Token: "t", Steps: steps}); err != nil {
		t.Fatal(err)
	}
	if _, err := NewToolStep(nil, nil); err == nil {
		t.Fatal("NewToolStep without Tools succeeded")
	}
	if _, err := NewHoldStep(HoldConfig{}); err == nil {
		t.Fatal("NewHoldStep without Reminders succeeded")
	}
}

// A cancelled id is remembered for CancelMemory, then forgotten.
func TestCancelMemoryExpires(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(llm.RenderJSON(llm.Chat, &llm.Turn{Text: "ok"}))
	}))
	defer srv.Close()
	tools := &fakeTools{}
	clk := clockwork.NewFakeClock()
	r, err := New(Config{Token: "t", Steps: toolSteps(t, tools), Clock: clk, CancelMemory: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req := hostapi.ResolveRequest{
		RequestID: "r1", Protocol: "chat", Path: "/v1/chat/completions", Reentry: srv.Listener.Addr().String(),
		Request: json.RawMessage(`{"messages":[{"role":"user","content":"hi"}]}`),
		Turn:    &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c", Name: "clock", Arguments: "{}"}}}, ServerTools: []string{"clock"},
	}
	r.Cancel("r1")
	if resp, _ := r.Resolve(context.Background(), req); resp.Reason != ReasonCancelled || tools.calls.Load() != 0 {
		t.Fatalf("resolve right after cancel: %+v, %d tool calls", resp, tools.calls.Load())
	}
	clk.Advance(50*time.Millisecond - time.Nanosecond)
	if resp, _ := r.Resolve(context.Background(), req); resp.Reason != ReasonCancelled || tools.calls.Load() != 0 {
		t.Fatalf("resolve just before the memory expired: %+v", resp)
	}
	clk.Advance(time.Nanosecond)
	if resp, _ := r.Resolve(context.Background(), req); resp.Reason != ReasonDone || resp.Hops != 1 || tools.calls.Load() != 1 {
		t.Fatalf("resolve after the memory expired: %+v", resp)
	}
	if r.Active() != 0 {
		t.Fatalf("%d chains still registered", r.Active())
	}
}

func TestCancelMemoryBounded(t *testing.T) {
	t.Parallel()
	r, _ := New(Config{Token: "t", Steps: toolSteps(t, &fakeTools{}), CancelMemory: time.Hour})
	for i := range maxRemembered + 5000 {
		r.Cancel(string(rune('a'+i%26)) + time.Duration(i).String())
	}
	if n := len(r.cancelled); n > maxRemembered+1 {
		t.Fatalf("%d ids remembered, bound %d", n, maxRemembered)
	}
}

func TestCopyHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	copyHeaders(h, map[string]string{
		"Authorization": "Bearer k", "anthropic-version": "2023-06-01", "Connection": "close, X-Secret-Hop",
		"x-secret-hop": "1", "Transfer-Encoding": "chunked", "TE": "trailers", ":path": "/x", "Host": "h",
		"X-Envoy-Original-Path": "/y", "X-Chime-Followup": "forged.mac", "Content-Length": "9", "Accept-Encoding": "br",
	})
	want := http.Header{"Authorization": {"Bearer k"}, "Anthropic-Version": {"2023-06-01"}}
	if len(h) != len(want) || h.Get("Authorization") != "Bearer k" || h.Get("Anthropic-Version") != "2023-06-01" {
		t.Fatalf("copied %v, want %v", h, want)
	}
}

func TestFold(t *testing.T) {
	t.Parallel()
	st := []string{"clock"}
	turns := []*llm.Turn{
		{ID: "a", Model: "m", Text: "one", ToolCalls: []llm.ToolCall{{ID: "1", Name: "clock"}}, Usage: llm.Usage{InputTokens: 1, OutputTokens: 2}},
		{ID: "b", Text: "two", ToolCalls: []llm.ToolCall{{ID: "2", Name: "clock"}, {ID: "3", Name: "exec"}},
			Finish: llm.Finish{Reason: llm.FinishToolCalls}, Usage: llm.Usage{InputTokens: 3, OutputTokens: 4}},
	}
	got := fold(turns, st)
	if got.ID != "a" || got.Text != "one\n\ntwo" || len(got.ToolCalls) != 1 || got.ToolCalls[0].ID != "3" ||
		got.Finish.Reason != llm.FinishToolCalls || got.Usage != (llm.Usage{InputTokens: 4, OutputTokens: 6}) {
		t.Fatalf("fold: %+v", got)
	}
	// Only server calls left: a plain stop.
	got = fold(turns[:1], st)
	if len(got.ToolCalls) != 0 || got.Finish.Reason != llm.FinishStop || len(turns[0].ToolCalls) != 1 {
		t.Fatalf("fold of a server-call turn: %+v (input %+v)", got, turns[0])
	}
}

func TestPairKeyIgnoresIDsAndUsage(t *testing.T) {
	t.Parallel()
	a := &llm.Turn{ID: "x", Text: "t", ToolCalls: []llm.ToolCall{{ID: "1", Name: "clock", Arguments: "{}"}}, Usage: llm.Usage{InputTokens: 1}}
	b := &llm.Turn{ID: "y", Text: "t", ToolCalls: []llm.ToolCall{{ID: "2", Name: "clock", Arguments: "{}"}}, Usage: llm.Usage{InputTokens: 9}}
	res := []llm.ToolResult{{CallID: "1", Name: "clock", Output: "{}"}}
	if pairKey(a, res, "", a) != pairKey(b, res, "", b) {
		t.Fatal("ids or usage changed the key")
	}
	if pairKey(a, res, "", a) == pairKey(a, res, "u", a) || pairKey(a, nil, "", a) == pairKey(a, res, "", a) {
		t.Fatal("different hops share a key")
	}
	// Field boundaries matter: "ab"+"" differs from "a"+"b".
	if pairKey(&llm.Turn{Text: "ab"}, nil, "", &llm.Turn{}) == pairKey(&llm.Turn{Text: "a"}, nil, "b", &llm.Turn{}) {
		t.Fatal("ambiguous encoding")
	}
}

// countingObserver records FollowupFailed calls.
type countingObserver struct {
	nopObserver
	mu     sync.Mutex
	failed []string
}

func (o *countingObserver) FollowupFailed(kind, code string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.failed = append(o.failed, kind+"/"+code)
}

// A rejected followup is logged at warn with the provider's status and
// reason, never the conversation, the reminder text or credentials, and
// counted (docs/failures.md).
func TestRejectedFollowupLoggedAndCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":{"type":"invalid_request_error","message":"Item 'fc_1' of type 'function_call' was provided without its required 'reasoning' item"}}`))
	}))
	defer srv.Close()
	var logs bytes.Buffer
	obs := &countingObserver{}
	r, err := New(Config{Token: "t", Steps: toolSteps(t, &fakeTools{}), Observer: obs,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Resolve(context.Background(), hostapi.ResolveRequest{
		RequestID: "r1", Protocol: "responses", Path: "/v1/responses", Reentry: srv.Listener.Addr().String(),
		Headers: map[string]string{"authorization": "Bearer sk-secret-key"},
		Request: json.RawMessage(`{"store":false,"input":[{"role":"user","content":"water the ficus at noon"}]}`),
		Turn:    &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c", Name: "clock", Arguments: "{}"}}}, ServerTools: []string{"clock"},
	})
	if err != nil {
		t.Fatal(err)
	}
	const note = "[chime: the continuation failed: 400 invalid_request_error: Item 'fc_1' of type 'function_call' was provided without its required 'reasoning' item]"
	if resp.Reason != ReasonRejected || !resp.Continued || resp.Continuation.Text != note {
		t.Fatalf("resolve: %+v %+v", resp, resp.Continuation)
	}
	if len(obs.failed) != 1 || obs.failed[0] != "tool/400" {
		t.Errorf("counted %v", obs.failed)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "status=400") || !strings.Contains(out, "invalid_request_error") {
		t.Errorf("no warn line with the status and reason:\n%s", out)
	}
	for _, secret := range []string{"sk-secret-key", "ficus"} {
		if strings.Contains(out, secret) {
			t.Errorf("the log holds %q:\n%s", secret, out)
		}
	}
}

func TestStatusReason(t *testing.T) {
	long := strings.Repeat("é", maxReason+10)
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{400, `{"type":"error","error":{"type":"invalid_request_error","message":"bad\n  block"}}`, "400 invalid_request_error: bad block"},
		{429, `{"error":{"code":"rate_limit_exceeded","message":"slow down"}}`, "429 rate_limit_exceeded: slow down"},
		{403, `{"error":{"message":"nope"}}`, "403 nope"},
		{404, `<html>`, "404 Not Found"},
		{499, ``, "499"},
		{400, `{"error":{"type":"x","message":"` + long + `"}}`, "400 x: " + strings.Repeat("é", maxReason) + "…"},
	} {
		if got := statusReason(c.status, []byte(c.body)); got != c.want {
			t.Errorf("statusReason(%d, %q) = %q, want %q", c.status, c.body, got, c.want)
		}
	}
}

// FuzzStatusReason: any error body gives one line that starts with the
// status and quotes at most maxReason runes of the provider's message.
func FuzzStatusReason(f *testing.F) {
	f.Add(400, []byte(`{"type":"error","error":{"type":"invalid_request_error","message":"x"}}`))
	f.Add(500, []byte(`{"error":{"code":1,"message":{"a":1}}}`))
	f.Add(404, []byte("\xff\n{"))
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		got := statusReason(status, body)
		if strings.ContainsAny(got, "\r\n") || !strings.HasPrefix(got, strconv.Itoa(status)) {
			t.Fatalf("statusReason = %q", got)
		}
		if n := len([]rune(got)); n > len(strconv.Itoa(status))+1+maxType+1+2+maxReason+1 {
			t.Fatalf("reason of %d runes: %q", n, got)
		}
	})
}
