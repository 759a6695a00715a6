package resolve_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/host/internal/resolve/resolvetest"
	"github.com/chimehq/chime/llm"
)

var t0 = time.Date(2026, 2, 2, 21, 0, 0, 0, time.UTC)

// fakeReminders has one task due at due (none when zero) whose reminder is
// text, and records what the hold asked of it.
type fakeReminders struct {
	due        time.Time
	text       string
	reserveErr error

	mu  sync.Mutex
	log []string
}

func (f *fakeReminders) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.log = append(f.log, s)
}

func (f *fakeReminders) calls() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return fmt.Sprint(f.log)
}

func (f *fakeReminders) NextDue(_ context.Context, sid, rid string) (time.Time, bool) {
	return f.due, !f.due.IsZero()
}

func (f *fakeReminders) Reserve(_ context.Context, sid, rid string, now time.Time) (string, error) {
	f.record("reserve " + rid + " at " + now.Sub(t0).String())
	return f.text, f.reserveErr
}

func (f *fakeReminders) Commit(ctx context.Context, rid string) (int, error) {
	f.record(fmt.Sprintf("commit %s cancelled=%v", rid, ctx.Err() != nil))
	return 1, nil
}

func (f *fakeReminders) Rollback(ctx context.Context, rid string) (int, error) {
	f.record(fmt.Sprintf("rollback %s cancelled=%v", rid, ctx.Err() != nil))
	return 1, nil
}

type holdFixture struct {
	step   resolve.Step
	rem    *fakeReminders
	clk    *clockwork.FakeClock
	counts *[]string
}

func newHold(t *testing.T, rem *fakeReminders, mod ...func(*resolve.HoldConfig)) holdFixture {
	t.Helper()
	var counts []string
	cfg := resolve.HoldConfig{Reminders: rem, Count: func(o string) { counts = append(counts, o) }, Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mod {
		m(&cfg)
	}
	s, err := resolve.NewHoldStep(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return holdFixture{step: s, rem: rem, clk: clockwork.NewFakeClockAt(t0), counts: &counts}
}

func (h holdFixture) chain(turn *llm.Turn) *resolvetest.Chain {
	return &resolvetest.Chain{T: turn, Session: "s", Request: "r", Stream: true, Hops: 2, Clk: h.clk}
}

type nextResult struct {
	f      resolve.Followup
	ok     bool
	reason string
}

// nextAsync runs Next in a goroutine so the test can move the fake clock.
func nextAsync(ctx context.Context, s resolve.Step, c resolve.Chain) <-chan nextResult {
	out := make(chan nextResult, 1)
	go func() {
		f, ok, reason := s.Next(ctx, c)
		out <- nextResult{f, ok, reason}
	}()
	return out
}

func recvResult(t *testing.T, c <-chan nextResult) nextResult {
	t.Helper()
	select {
	case r := <-c:
		return r
	case <-time.After(5 * time.Second): // guards against a hang only
		t.Fatal("Next did not return")
		return nextResult{}
	}
}

var stopped = &llm.Turn{Text: "done", Finish: llm.Finish{Reason: llm.FinishStop}}

// The hold waits until the task is due, reserves it for the followup's
// id, and settles the reservation with the followup's outcome.
func TestHoldStepWaitsReservesAndSettles(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		outcome resolve.Outcome
		cancel  bool
		want    string
		counts  string
	}{
		{resolve.Delivered, false, "commit r:hold3 cancelled=false", "[committed]"},
		{resolve.Failed, false, "rollback r:hold3 cancelled=false", "[rolled_back]"},
		{resolve.Unsent, false, "rollback r:hold3 cancelled=false", "[rolled_back]"},
		// A cancelled chain still releases the reservation, on a context
		// that is not cancelled, and counts the hold as cancelled.
		{resolve.Failed, true, "rollback r:hold3 cancelled=false", "[cancelled]"},
	} {
		h := newHold(t, &fakeReminders{due: t0.Add(30 * time.Second), text: "[scheduled task:\"x\"]"})
		ctx, cancel := context.WithCancel(context.Background())
		done := nextAsync(ctx, h.step, h.chain(stopped))
		if err := h.clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		h.clk.Advance(30*time.Second - time.Millisecond)
		if got := h.rem.calls(); got != "[]" {
			t.Fatalf("before due: %s", got)
		}
		h.clk.Advance(time.Millisecond)
		r := recvResult(t, done)
		if !r.ok || r.reason != "" || r.f.ID != "r:hold3" || r.f.UserText != "[scheduled task:\"x\"]" || r.f.Settle == nil || h.step.Kind() != "hold" {
			t.Fatalf("Next = %+v", r)
		}
		if got := h.rem.calls(); got != "[reserve r:hold3 at 30s]" {
			t.Fatalf("reserved: %s", got)
		}
		if c.cancel {
			cancel()
		}
		r.f.Settle(c.outcome)
		cancel()
		if got, want := h.rem.calls(), "[reserve r:hold3 at 30s "+c.want+"]"; got != want {
			t.Errorf("outcome %v: %s, want %s", c.outcome, got, want)
		}
		if got := fmt.Sprint(*h.counts); got != c.counts {
			t.Errorf("outcome %v counted %s, want %s", c.outcome, got, c.counts)
		}
	}
}

func TestHoldStepDoesNotApply(t *testing.T) {
	t.Parallel()
	due := t0.Add(10 * time.Second)
	for _, c := range []struct {
		name string
		rem  *fakeReminders
		mod  func(*resolvetest.Chain)
		cfg  func(*resolve.HoldConfig)
	}{
		{name: "nothing due", rem: &fakeReminders{}},
		{name: "due after holdMax", rem: &fakeReminders{due: t0.Add(resolve.DefaultHoldMax + time.Millisecond)}},
		{name: "shorter holdMax", rem: &fakeReminders{due: due}, cfg: func(c *resolve.HoldConfig) { c.Max = 5 * time.Second }},
		{name: "tool calls", rem: &fakeReminders{due: due}, mod: func(c *resolvetest.Chain) {
			c.T = &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "1", Name: "exec"}}, Finish: llm.Finish{Reason: llm.FinishStop}}
		}},
		{name: "content filter", rem: &fakeReminders{due: due}, mod: func(c *resolvetest.Chain) {
			c.T = &llm.Turn{Finish: llm.Finish{Reason: llm.FinishOther}}
		}},
		{name: "compaction", rem: &fakeReminders{due: due}, mod: func(c *resolvetest.Chain) { c.IsCompaction = true }},
		{name: "no session", rem: &fakeReminders{due: due}, mod: func(c *resolvetest.Chain) { c.Session = "" }},
		{name: "JSON client without holdNonStreaming", rem: &fakeReminders{due: due},
			mod: func(c *resolvetest.Chain) { c.Stream = false }, cfg: func(c *resolve.HoldConfig) { c.NoNonStreaming = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var mods []func(*resolve.HoldConfig)
			if c.cfg != nil {
				mods = append(mods, c.cfg)
			}
			h := newHold(t, c.rem, mods...)
			ch := h.chain(stopped)
			if c.mod != nil {
				c.mod(ch)
			}
			if _, ok, reason := h.step.Next(context.Background(), ch); ok || reason != "" {
				t.Fatalf("Next = %v %q, want no decision", ok, reason)
			}
			if got := c.rem.calls(); got != "[]" || ch.GuardCalls != 0 || len(*h.counts) != 0 {
				t.Fatalf("reminders %s, guard %d, counts %v", got, ch.GuardCalls, *h.counts)
			}
		})
	}
}

func TestHoldStepEnds(t *testing.T) {
	t.Parallel()
	t.Run("length finish, due now, at the hop limit", func(t *testing.T) {
		t.Parallel()
		h := newHold(t, &fakeReminders{due: t0, text: "x"})
		ch := h.chain(&llm.Turn{Finish: llm.Finish{Reason: llm.FinishLength}})
		ch.AtHopLimit = true
		if _, ok, reason := h.step.Next(context.Background(), ch); ok || reason != resolve.ReasonMaxHops || h.rem.calls() != "[]" {
			t.Fatalf("Next = %v %q, reminders %s", ok, reason, h.rem.calls())
		}
	})
	t.Run("nothing left once due", func(t *testing.T) {
		t.Parallel()
		h := newHold(t, &fakeReminders{due: t0.Add(-time.Second), reserveErr: errors.New("disk gone")})
		if _, ok, reason := h.step.Next(context.Background(), h.chain(stopped)); ok || reason != resolve.ReasonDone {
			t.Fatalf("Next = %v %q", ok, reason)
		}
		if got := fmt.Sprint(*h.counts); got != "[empty]" || h.rem.calls() != "[reserve r:hold3 at 0s]" {
			t.Fatalf("counts %s, reminders %s", got, h.rem.calls())
		}
	})
	t.Run("cancelled while holding", func(t *testing.T) {
		t.Parallel()
		h := newHold(t, &fakeReminders{due: t0.Add(time.Minute), text: "x"})
		ctx, cancel := context.WithCancel(context.Background())
		done := nextAsync(ctx, h.step, h.chain(stopped))
		if err := h.clk.BlockUntilContext(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		cancel()
		r := recvResult(t, done)
		if r.ok || r.reason != resolve.ReasonCancelled || h.rem.calls() != "[]" || fmt.Sprint(*h.counts) != "[cancelled]" {
			t.Fatalf("Next = %+v, reminders %s, counts %v", r, h.rem.calls(), *h.counts)
		}
	})
}
