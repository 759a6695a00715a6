package host

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// The filter API bodies and the dashboard path are untrusted input
// (issue 17, defect 7): any of them gets one of the documented statuses
// with a JSON body, never a 5xx or a panic (docs/failures.md).

// fuzzCall posts body to path with the token and checks the status.
func fuzzCall(t *testing.T, fx *fixture, method, path string, body []byte, allowed ...int) {
	t.Helper()
	r := newRequest(method, path, body)
	r.Header.Set("Authorization", "Bearer "+testToken)
	rec := serve(fx.svc, r)
	for _, c := range allowed {
		if rec.Code == c {
			// A redirect is the mux cleaning a path (".."), with its HTML.
			if c != http.StatusNoContent && c/100 != 3 && !json.Valid(rec.Body.Bytes()) {
				t.Fatalf("%s %s: %d with a non-JSON body %q", method, path, c, rec.Body)
			}
			return
		}
	}
	t.Fatalf("%s %s: status %d for %q: %s", method, path, rec.Code, body, rec.Body)
}

// noNetwork fails every followup at once: a fuzzed resolve must not reach
// a real proxy on this machine.
type noNetwork struct{}

func (noNetwork) RoundTrip(*http.Request) (*http.Response, error) {
	return nil, errors.New("fuzz: no network")
}

func FuzzResolveBody(f *testing.F) {
	fx := openFixture(f, f.TempDir(), clockwork.NewFakeClockAt(t0), func(c *Config) {
		c.Clock = clockwork.NewRealClock() // holds wait on it: they must end
		c.HoldMax = time.Millisecond
		c.MaxChainDuration = 2 * time.Second
		c.FollowupClient = &http.Client{Transport: noNetwork{}}
	})
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		turn := &llm.Turn{Finish: llm.Finish{Reason: llm.FinishToolCalls}, ToolCalls: []llm.ToolCall{{ID: "c1", Name: "clock", Arguments: `{"action":"get"}`}}}
		req := hostapi.ResolveRequest{RequestID: "r-" + p.String(), SessionID: "s", Protocol: p.String(), Path: paths[p],
			Reentry: "127.0.0.1:9", Request: json.RawMessage(originals[p]), Turn: turn, ServerTools: []string{"clock"}, Streaming: true}
		b, _ := json.Marshal(req)
		f.Add(b)
	}
	for _, s := range []string{`{}`, `{"requestId":"r","protocol":"nope"}`, `{"requestId":"r","protocol":"chat","request":"x","turn":{}}`, `[`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzCall(t, fx, http.MethodPost, hostapi.PathResolve, body, http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge)
	})
}

func FuzzToolsExecuteBody(f *testing.F) {
	fx := newFixture(f)
	for _, s := range []string{
		`{"sessionId":"s","requestId":"r","name":"clock","arguments":{"action":"get"}}`,
		`{"sessionId":"s","requestId":"r","name":"clock","arguments":"{\"action\":\"list\"}","timezone":"Asia/Kathmandu"}`,
		`{"sessionId":"s","name":"clock","arguments":{"action":"schedule","items":[{"dueAt":"2026-02-02T22:00:00Z","task":"t"}]}}`,
		`{"name":"nope"}`, `{"name":"clock","arguments":null}`, `{"timezone":"../../etc"}`, `{`, `null`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		fuzzCall(t, fx, http.MethodPost, PathToolsExecute, body, http.StatusOK, http.StatusBadRequest)
	})
}

// FuzzOutcomeBody covers commit, rollback and cancel (the first byte picks).
func FuzzOutcomeBody(f *testing.F) {
	fx := newFixture(f)
	for _, s := range []string{`{"requestId":"r"}`, `{"requestId":""}`, `{"requestId":"a/b/../c"}`, `{"requestId":7}`, `{}`, `[]`, ``} {
		for _, p := range []byte{0, 1, 2} {
			f.Add(p, []byte(s))
		}
	}
	paths := []string{hostapi.PathCommit, hostapi.PathRollback, hostapi.PathCancel}
	f.Fuzz(func(t *testing.T, which byte, body []byte) {
		fuzzCall(t, fx, http.MethodPost, paths[int(which)%len(paths)], body, http.StatusNoContent, http.StatusBadRequest)
	})
}

// FuzzDashboardSessionID: the {id} of /api/sessions/{id}/tasks.
func FuzzDashboardSessionID(f *testing.F) {
	fx := newFixture(f)
	fx.schedule(f, "sess-1", "water", t0.Add(time.Hour))
	for _, s := range []string{"sess-1", "unknown", "a/b", "..", "~abc", "%00", "x?include=text", string(make([]byte, 300))} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		fuzzCall(t, fx, http.MethodGet, "/api/sessions/"+url.PathEscape(id)+"/tasks", nil,
			http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect)
	})
}
