package host

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/jonboulle/clockwork"
)

const testToken = "test-secret-token"

// t0 is the start of every test clock.
var t0 = time.Date(2026, 2, 2, 21, 0, 0, 0, time.UTC)

type fixture struct {
	svc *Service
	clk *clockwork.FakeClock // the service's wall clock and every wait of it
	dir string
}

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// newFixture opens a Service on a fresh on-disk store with NTP disabled
// and a fake clock at t0.
func newFixture(t testing.TB, mod ...func(*Config)) *fixture {
	t.Helper()
	return openFixture(t, t.TempDir(), clockwork.NewFakeClockAt(t0), mod...)
}

func openFixture(t testing.TB, dir string, clk *clockwork.FakeClock, mod ...func(*Config)) *fixture {
	t.Helper()
	cfg := Config{DataDir: dir, Token: testToken, Clock: clk}
	for _, m := range mod {
		m(&cfg)
	}
	svc, err := New(cfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	return &fixture{svc: svc, clk: clk, dir: dir}
}

// do sends one request from loopback; token "" sends no authorization.
func (f *fixture) do(t testing.TB, method, path, token string, body any) *httptest.ResponseRecorder {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req := httptest.NewRequest(method, path, rd)
	req.RemoteAddr, req.Host = "127.0.0.1:40000", "127.0.0.1:8787" // a local caller, as a browser on this machine
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	f.svc.Handler().ServeHTTP(rec, req)
	return rec
}

func (f *fixture) prepare(t testing.TB, req hostapi.PrepareRequest) hostapi.PrepareResponse {
	t.Helper()
	rec := f.do(t, http.MethodPost, hostapi.PathPrepare, testToken, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("prepare: %d %s", rec.Code, rec.Body)
	}
	var ans hostapi.PrepareResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &ans); err != nil {
		t.Fatalf("prepare answer %q: %v", rec.Body, err)
	}
	return ans
}

func (f *fixture) outcome(t testing.TB, path, requestID string) int {
	t.Helper()
	return f.do(t, http.MethodPost, path, testToken, hostapi.OutcomeRequest{RequestID: requestID}).Code
}

// result is a decoded tool result.
type result map[string]any

func (r result) ok() bool { v, _ := r["ok"].(bool); return v }

func (r result) errText() string { s, _ := r["error"].(string); return s }

// tool calls POST /v1/tools/execute with the token and decodes the result.
func (f *fixture) tool(t testing.TB, session, request, name, args string) result {
	t.Helper()
	rec := f.do(t, http.MethodPost, PathToolsExecute, testToken, ToolCall{
		SessionID: session, RequestID: request, Name: name, Arguments: json.RawMessage(args),
	})
	if rec.Code != http.StatusOK {
		t.Fatalf("tools/execute: %d %s", rec.Code, rec.Body)
	}
	var r result
	if err := json.Unmarshal(rec.Body.Bytes(), &r); err != nil {
		t.Fatalf("tool result %q: %v", rec.Body, err)
	}
	return r
}

// schedule adds one task through the clock tool and returns its id.
func (f *fixture) schedule(t testing.TB, session, task string, due time.Time) string {
	t.Helper()
	args, _ := json.Marshal(map[string]any{
		"action": "schedule", "taskId": "",
		"items": []map[string]any{{"dueAt": due.Format(time.RFC3339), "task": task, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}},
	})
	r := f.tool(t, session, "sched-"+task, "clock", string(args))
	if !r.ok() {
		t.Fatalf("schedule %q: %s", task, r.errText())
	}
	sched := r["scheduled"].([]any)
	return sched[0].(map[string]any)["taskId"].(string)
}

func reminderFor(tasks ...string) string {
	var b strings.Builder
	for _, task := range tasks {
		b.WriteString(`[scheduled task:"` + task + "\"]\n")
	}
	return b.String() + "You may call tools to do these tasks."
}

var bg = context.Background()

func newRequest(method, path string, body []byte) *http.Request {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	req.RemoteAddr, req.Host = "127.0.0.1:40000", "127.0.0.1:8787"
	return req
}

func serve(s *Service, req *http.Request) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, req)
	return rec
}

// allTools is what prepare announces with every family enabled.
var allTools = append([]string{hostapi.ClockToolName}, hostapi.TimerToolNames()...)
