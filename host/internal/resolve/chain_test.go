package resolve

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// fakeStep answers Next with decide, given how often it was asked before.
type fakeStep struct {
	kind   string
	decide func(asked int, c Chain) (Followup, bool, string)
	asked  int
}

func (s *fakeStep) Kind() string { return s.kind }

func (s *fakeStep) Next(_ context.Context, c Chain) (Followup, bool, string) {
	s.asked++
	if s.decide == nil {
		return Followup{}, false, ""
	}
	return s.decide(s.asked-1, c)
}

// upstream answers every followup with status and, on 200, a stop turn
// "answer <n>"; it records the request ids and bodies.
type upstream struct {
	srv    *httptest.Server
	status int
	mu     sync.Mutex
	ids    []string
	bodies []string
}

func newUpstream(t *testing.T, status int) *upstream {
	u := &upstream{status: status}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.ids = append(u.ids, r.Header.Get("X-Request-Id"))
		u.bodies = append(u.bodies, string(body))
		n := len(u.ids)
		u.mu.Unlock()
		if u.status != http.StatusOK {
			w.WriteHeader(u.status)
			return
		}
		_, _ = w.Write(llm.RenderJSON(llm.Chat, &llm.Turn{Text: fmt.Sprint("answer ", n), Finish: llm.Finish{Reason: llm.FinishStop}}))
	}))
	t.Cleanup(u.srv.Close)
	return u
}

type kindObserver struct {
	nopObserver
	followups []string
}

func (o *kindObserver) Followup(kind string) { o.followups = append(o.followups, kind) }

func runChain(t *testing.T, u *upstream, maxHops int, steps ...Step) (hostapi.ResolveResponse, *kindObserver) {
	t.Helper()
	obs := &kindObserver{}
	r, err := New(Config{Token: "t", Steps: steps, Observer: obs, MaxHops: maxHops, Logger: quiet()})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := r.Resolve(context.Background(), hostapi.ResolveRequest{
		RequestID: "r", SessionID: "s", Protocol: "chat", Path: "/v1/chat/completions", Reentry: u.srv.Listener.Addr().String(),
		Request: json.RawMessage(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`),
		Turn:    &llm.Turn{Text: "first", Finish: llm.Finish{Reason: llm.FinishStop}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return resp, obs
}

// once continues the first time it is asked with user text, then passes.
func once(text string) func(int, Chain) (Followup, bool, string) {
	return func(asked int, _ Chain) (Followup, bool, string) {
		if asked > 0 {
			return Followup{}, false, ""
		}
		return Followup{UserText: text}, true, ""
	}
}

// The steps decide in their order: a step that passes lets the next
// decide, the first that continues sends its followup under its kind, and
// later steps are not asked for that turn.
func TestChainAsksStepsInOrder(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, http.StatusOK)
	first := &fakeStep{kind: "first"}
	second := &fakeStep{kind: "second", decide: once("go on")}
	third := &fakeStep{kind: "third", decide: once("third text")}
	resp, obs := runChain(t, u, 0, first, second, third)

	if resp.Reason != ReasonDone || resp.Hops != 2 || !resp.Continued || resp.Continuation.Text != "answer 1\n\nanswer 2" {
		t.Fatalf("resolve: %+v", resp)
	}
	// Turn 1: first passes, second continues. Turn 2: all pass, third
	// continues the chain once, so turn 3 asks all three again.
	if first.asked != 3 || second.asked != 3 || third.asked != 2 {
		t.Fatalf("asked %d %d %d times", first.asked, second.asked, third.asked)
	}
	if fmt.Sprint(u.ids) != "[r:second1 r:third2]" || fmt.Sprint(obs.followups) != "[second third]" {
		t.Fatalf("followup ids %v, counted %v", u.ids, obs.followups)
	}
	if !strings.Contains(u.bodies[0], `"go on"`) || strings.Contains(u.bodies[0], "third text") || !strings.Contains(u.bodies[1], `"third text"`) {
		t.Fatalf("first followup body %s", u.bodies[0])
	}
}

// A step's reason ends the chain; later steps are not asked.
func TestChainEndsOnAStepReason(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, http.StatusOK)
	ender := &fakeStep{kind: "end", decide: func(int, Chain) (Followup, bool, string) { return Followup{UserText: "x"}, true, ReasonClientTools }}
	later := &fakeStep{kind: "later", decide: once("x")}
	resp, _ := runChain(t, u, 0, ender, later)
	if resp.Reason != ReasonClientTools || resp.Continued || resp.Hops != 0 || later.asked != 0 || len(u.ids) != 0 {
		t.Fatalf("resolve %+v, later asked %d, %d followups", resp, later.asked, len(u.ids))
	}
}

// The hop guard is the chain's: a step asks it through Chain.Guard.
func TestChainHopGuard(t *testing.T) {
	t.Parallel()
	u := newUpstream(t, http.StatusOK)
	always := &fakeStep{kind: "stop", decide: func(n int, c Chain) (Followup, bool, string) {
		if reason := c.Guard(); reason != "" {
			return Followup{}, false, reason
		}
		return Followup{UserText: fmt.Sprint("more ", n)}, true, ""
	}}
	resp, _ := runChain(t, u, 2, always)
	if resp.Reason != ReasonMaxHops || resp.Hops != 2 || fmt.Sprint(u.ids) != "[r:stop1 r:stop2]" {
		t.Fatalf("resolve %+v, ids %v", resp, u.ids)
	}
}

// Settle learns what became of the followup, exactly once.
func TestChainSettlesFollowups(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		status int
		f      Followup
		want   string
		reason string
	}{
		{"delivered", http.StatusOK, Followup{ID: "r:mine", UserText: "x"}, "[delivered]", ReasonDone},
		{"failed", http.StatusServiceUnavailable, Followup{ID: "r:mine", UserText: "x"}, "[failed]", ReasonUpstreamError},
		{"unsent", http.StatusOK, Followup{ID: "r:mine"}, "[unsent]", ReasonError}, // nothing to send: no body
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			u := newUpstream(t, c.status)
			var got []string
			f := c.f
			f.Settle = func(o Outcome) {
				got = append(got, map[Outcome]string{Unsent: "unsent", Delivered: "delivered", Failed: "failed"}[o])
			}
			step := &fakeStep{kind: "hold", decide: func(n int, _ Chain) (Followup, bool, string) {
				if n > 0 {
					return Followup{}, false, ""
				}
				return f, true, ""
			}}
			resp, _ := runChain(t, u, 0, step)
			if fmt.Sprint(got) != c.want || resp.Reason != c.reason {
				t.Fatalf("settled %v, reason %q; want %s %q", got, resp.Reason, c.want, c.reason)
			}
			if c.name != "unsent" && fmt.Sprint(u.ids) != "[r:mine]" {
				t.Fatalf("sent under %v, want the step's id", u.ids)
			}
		})
	}
}
