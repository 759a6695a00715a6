package resolve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/host/internal/resolve/resolvetest"
	"github.com/chimehq/chime/llm"
)

// recordingTools answers every call with its name and records the calls.
type recordingTools struct{ calls []string }

func (r *recordingTools) Execute(_ context.Context, sid, rid, name string, args json.RawMessage) json.RawMessage {
	r.calls = append(r.calls, fmt.Sprintf("%s %s %s %s", sid, rid, name, args))
	return json.RawMessage(fmt.Sprintf(`{"ok":true,"tool":%q}`, name))
}

func newToolStep(t *testing.T) (resolve.Step, *recordingTools) {
	t.Helper()
	tools := &recordingTools{}
	s, err := resolve.NewToolStep(tools, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, tools
}

func TestToolStep(t *testing.T) {
	t.Parallel()
	call := func(id, name string) llm.ToolCall { return llm.ToolCall{ID: id, Name: name, Arguments: `{"a":1}`} }
	for _, c := range []struct {
		name       string
		calls      []llm.ToolCall
		atLimit    bool
		wantOK     bool
		wantReason string
		wantRun    []string
	}{
		{name: "no calls"},
		{name: "client calls only", calls: []llm.ToolCall{call("1", "exec")}},
		{name: "server calls", calls: []llm.ToolCall{call("1", "clock"), call("", "clock")}, wantOK: true,
			wantRun: []string{`s r clock {"a":1}`, `s r clock {"a":1}`}},
		// docs/architecture.md#mixed-calls: the server calls run, the client answers its own.
		{name: "mixed", calls: []llm.ToolCall{call("1", "exec"), call("2", "clock")}, wantReason: resolve.ReasonClientTools,
			wantRun: []string{`s r clock {"a":1}`}},
		// The hop guard ends the chain before anything runs.
		{name: "hop limit", calls: []llm.ToolCall{call("1", "clock")}, atLimit: true, wantReason: resolve.ReasonMaxHops},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, tools := newToolStep(t)
			ch := &resolvetest.Chain{T: &llm.Turn{ToolCalls: c.calls}, Session: "s", Request: "r", Server: []string{"clock"},
				AtHopLimit: c.atLimit, Proto: llm.Chat, Body: []byte(`{}`)}
			f, ok, reason := s.Next(context.Background(), ch)
			if ok != c.wantOK || reason != c.wantReason {
				t.Fatalf("Next = ok %v reason %q, want %v %q", ok, reason, c.wantOK, c.wantReason)
			}
			if fmt.Sprint(tools.calls) != fmt.Sprint(c.wantRun) {
				t.Fatalf("ran %q, want %q", tools.calls, c.wantRun)
			}
			if !ok {
				return
			}
			if s.Kind() != "tool" || f.ID != "" || f.UserText != "" || f.Settle != nil || !ch.Assigned || ch.GuardCalls != 1 {
				t.Fatalf("followup %+v, chain %+v", f, ch)
			}
			// One result per call, named by the call's id (assigned when missing).
			if len(f.Results) != 2 || f.Results[0].CallID != "1" || f.Results[1].CallID == "" || f.Results[1].CallID != ch.T.ToolCalls[1].ID ||
				f.Results[1].Output != `{"ok":true,"tool":"clock"}` {
				t.Fatalf("results %+v", f.Results)
			}
		})
	}
}

// A chain cancelled while its tools run ends with the cancel, not a followup.
func TestToolStepStoppedWhileRunning(t *testing.T) {
	t.Parallel()
	s, _ := newToolStep(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch := &resolvetest.Chain{T: &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "1", Name: "clock"}}}, Session: "s", Request: "r", Server: []string{"clock"}}
	if _, ok, reason := s.Next(ctx, ch); ok || reason != resolve.ReasonCancelled {
		t.Fatalf("Next = %v %q", ok, reason)
	}
}

// barrierTools holds every "timer" call until all of them have started, so
// the test deadlocks (and fails on its guard) unless they run in parallel.
type barrierTools struct {
	started chan string
	release chan struct{}
	mu      sync.Mutex
	order   []string
}

func (b *barrierTools) Blocking(name string) bool { return name == "timer" }

func (b *barrierTools) Execute(_ context.Context, _, _, name string, args json.RawMessage) json.RawMessage {
	b.mu.Lock()
	b.order = append(b.order, name+string(args))
	b.mu.Unlock()
	if name == "timer" {
		b.started <- string(args)
		<-b.release
	}
	return json.RawMessage(fmt.Sprintf(`{"ok":true,"args":%s}`, args))
}

// docs/timers.md: several timer calls of one turn wait in parallel, and
// the results keep the order of the calls.
func TestToolStepRunsBlockingCallsInParallel(t *testing.T) {
	t.Parallel()
	tools := &barrierTools{started: make(chan string, 3), release: make(chan struct{})}
	s, err := resolve.NewToolStep(tools, nil)
	if err != nil {
		t.Fatal(err)
	}
	calls := []llm.ToolCall{{ID: "1", Name: "timer", Arguments: `{"n":1}`}, {ID: "2", Name: "clock", Arguments: `{"n":2}`}, {ID: "3", Name: "timer", Arguments: `{"n":3}`}}
	ch := &resolvetest.Chain{T: &llm.Turn{ToolCalls: calls}, Session: "s", Request: "r", Server: []string{"clock", "timer"}, Proto: llm.Chat, Body: []byte(`{}`)}
	type next struct {
		f  resolve.Followup
		ok bool
	}
	done := make(chan next, 1)
	go func() {
		f, ok, _ := s.Next(context.Background(), ch)
		done <- next{f, ok}
	}()
	for range 2 { // both timer calls are held at once
		select {
		case <-tools.started:
		case <-time.After(10 * time.Second):
			t.Fatal("the timer calls did not run in parallel")
		}
	}
	close(tools.release)
	n := <-done
	if !n.ok || len(n.f.Results) != 3 {
		t.Fatalf("followup %+v", n)
	}
	for i, want := range []string{`{"ok":true,"args":{"n":1}}`, `{"ok":true,"args":{"n":2}}`, `{"ok":true,"args":{"n":3}}`} {
		if n.f.Results[i].Output != want || n.f.Results[i].CallID != calls[i].ID {
			t.Fatalf("result %d: %+v", i, n.f.Results[i])
		}
	}
}

// A mixed turn is not followed up, so its blocking calls do not run.
func TestToolStepMixedTurnSkipsBlockingCalls(t *testing.T) {
	t.Parallel()
	tools := &barrierTools{started: make(chan string, 3), release: make(chan struct{})}
	s, _ := resolve.NewToolStep(tools, nil)
	ch := &resolvetest.Chain{T: &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "1", Name: "exec"}, {ID: "2", Name: "timer", Arguments: `{}`}, {ID: "3", Name: "clock", Arguments: `{}`}}},
		Session: "s", Request: "r", Server: []string{"clock", "timer"}}
	if _, ok, reason := s.Next(context.Background(), ch); ok || reason != resolve.ReasonClientTools {
		t.Fatalf("Next = %v %q", ok, reason)
	}
	if fmt.Sprint(tools.order) != "[clock{}]" {
		t.Fatalf("ran %v", tools.order)
	}
}
