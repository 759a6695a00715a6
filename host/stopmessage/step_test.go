package stopmessage

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/host/internal/resolve/resolvetest"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

func newStep(t *testing.T, repeats int) (*Messages, resolve.Step) {
	t.Helper()
	m := New(newStore(t))
	if repeats > 0 {
		if err := m.ApplyDirective("s", hostapi.HostDirective{Kind: hostapi.DirectiveStopMessage, Text: "keep going", MaxRepeats: repeats}, t0); err != nil {
			t.Fatal(err)
		}
	}
	return m, m.Step(slog.New(slog.DiscardHandler))
}

func stoppedChain() *resolvetest.Chain {
	return &resolvetest.Chain{
		T:       &llm.Turn{Text: "I stopped.", Finish: llm.Finish{Reason: llm.FinishStop}},
		Session: "s", Request: "r", Clk: clockwork.NewFakeClockAt(t0.Add(time.Minute)),
	}
}

// A stopped turn of a session with an active state continues with the
// text, and used+1 is on disk when the followup is handed back (docs/continuation.md).
func TestStepTriggers(t *testing.T) {
	t.Parallel()
	m, s := newStep(t, 2)
	for _, fin := range []llm.FinishReason{llm.FinishStop, llm.FinishNone} {
		c := stoppedChain()
		c.T.Finish.Reason = fin
		f, ok, reason := s.Next(context.Background(), c)
		if !ok || reason != "" || f.UserText != "keep going" || f.ID != "" || f.Results != nil || f.Settle != nil || c.GuardCalls != 1 {
			t.Fatalf("finish %q: Next = %+v %v %q", fin, f, ok, reason)
		}
	}
	st, _, _ := m.store.GetStopMessage("s")
	if st.Used != 2 || st.LastUsedAt != t0.Add(time.Minute).UnixMilli() {
		t.Fatalf("state after two triggers: %+v", st)
	}
	// Used up: the step passes, so a hold may still apply.
	if _, ok, reason := s.Next(context.Background(), stoppedChain()); ok || reason != "" || s.Kind() != "stop" {
		t.Fatalf("used up: %v %q", ok, reason)
	}
}

func TestStepDoesNotTrigger(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		mod  func(*resolvetest.Chain)
	}{
		{"length", func(c *resolvetest.Chain) { c.T.Finish.Reason = llm.FinishLength }},
		{"tool calls", func(c *resolvetest.Chain) { c.T.ToolCalls = []llm.ToolCall{{ID: "1", Name: "exec"}} }},
		{"compaction", func(c *resolvetest.Chain) { c.IsCompaction = true }},
		{"no session", func(c *resolvetest.Chain) { c.Session = "" }},
		{"other session", func(c *resolvetest.Chain) { c.Session = "s2" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			m, s := newStep(t, 3)
			ch := stoppedChain()
			c.mod(ch)
			if _, ok, reason := s.Next(context.Background(), ch); ok || reason != "" || ch.GuardCalls != 0 {
				t.Fatalf("Next = %v %q, guard asked %d times", ok, reason, ch.GuardCalls)
			}
			if st, _, _ := m.store.GetStopMessage("s"); st.Used != 0 {
				t.Fatalf("used %d", st.Used)
			}
		})
	}
}

// At the hop limit the chain ends before a repeat is spent.
func TestStepHopGuard(t *testing.T) {
	t.Parallel()
	m, s := newStep(t, 3)
	c := stoppedChain()
	c.AtHopLimit = true
	if _, ok, reason := s.Next(context.Background(), c); ok || reason != resolve.ReasonMaxHops {
		t.Fatalf("Next = %v %q", ok, reason)
	}
	if st, _, _ := m.store.GetStopMessage("s"); st.Used != 0 {
		t.Fatalf("used %d at the hop limit", st.Used)
	}
}

type failingState struct{}

func (failingState) Active(string) bool { return true }
func (failingState) Consume(string, time.Time) (string, bool, error) {
	return "", false, errors.New("disk full")
}

// A use that cannot be written sends nothing and ends the chain (docs/continuation.md).
func TestStepWriteFailure(t *testing.T) {
	t.Parallel()
	s := &step{state: failingState{}, log: slog.New(slog.DiscardHandler)}
	if f, ok, reason := s.Next(context.Background(), stoppedChain()); ok || reason != resolve.ReasonError || f.UserText != "" {
		t.Fatalf("Next = %+v %v %q", f, ok, reason)
	}
}
