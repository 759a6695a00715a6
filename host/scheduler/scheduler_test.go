package scheduler

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// call is one Runner.Run the test sees; the run ends when out is sent.
type call struct {
	sid     string
	reason  Reason
	attempt int
	out     chan Outcome
}

type fakeRunner struct {
	calls chan call
	mu    sync.Mutex
	live  map[string]int // session → runs in flight
	over  bool           // two runs of one session overlapped
}

func newRunner() *fakeRunner {
	return &fakeRunner{calls: make(chan call, 100), live: map[string]int{}}
}

func (f *fakeRunner) Run(_ context.Context, sid string, r Reason, attempt int) Outcome {
	f.mu.Lock()
	f.live[sid]++
	if f.live[sid] > 1 {
		f.over = true
	}
	f.mu.Unlock()
	c := call{sid: sid, reason: r, attempt: attempt, out: make(chan Outcome)}
	f.calls <- c
	out := <-c.out
	f.mu.Lock()
	f.live[sid]--
	f.mu.Unlock()
	return out
}

func (f *fakeRunner) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-f.calls:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no run started")
		return call{}
	}
}

func (f *fakeRunner) none(t *testing.T) {
	t.Helper()
	select {
	case c := <-f.calls:
		t.Fatalf("unexpected run of %s (%s)", c.sid, c.reason)
	default:
	}
}

func setup(t *testing.T, maxConc int) (*Scheduler, *clockwork.FakeClock, *fakeRunner) {
	t.Helper()
	clk := clockwork.NewFakeClockAt(t0)
	r := newRunner()
	s := New(Config{Runner: r, Clock: clk, MaxConcurrent: maxConc, Logger: slog.New(slog.DiscardHandler)})
	return s, clk, r
}

// step advances the clock and fires what is due, as Run would.
func step(s *Scheduler, clk *clockwork.FakeClock, d time.Duration) {
	clk.Advance(d)
	s.fire(clk.Now())
}

// settle waits until the scheduler has no run in flight.
func settle(t *testing.T, s *Scheduler) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.mu.Lock()
		n := s.running
		s.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("runs did not end")
		}
		time.Sleep(time.Millisecond) // polling for goroutines, not timing
	}
}

func TestCoalescingKeepsHighestReason(t *testing.T) {
	s, clk, r := setup(t, 8)
	s.RequestWake("a", ReasonInterval)
	step(s, clk, 100*time.Millisecond)
	s.RequestWake("a", ReasonManual)
	s.RequestWake("a", ReasonTask)
	step(s, clk, 100*time.Millisecond)
	r.none(t) // still inside the 250 ms window
	step(s, clk, 60*time.Millisecond)
	c := r.next(t)
	if c.sid != "a" || c.reason != ReasonManual {
		t.Fatalf("run %s %s, want a manual", c.sid, c.reason)
	}
	c.out <- Outcome{}
	settle(t, s)
	r.none(t)
}

func TestRunsOfOneSessionDoNotOverlap(t *testing.T) {
	s, clk, r := setup(t, 8)
	s.RequestWake("a", ReasonCron)
	step(s, clk, 250*time.Millisecond)
	first := r.next(t)
	s.RequestWake("a", ReasonTimer)
	step(s, clk, time.Second)
	r.none(t) // due, but the first run is still going
	first.out <- Outcome{}
	second := r.next(t)
	if second.reason != ReasonTimer {
		t.Fatalf("second run %s", second.reason)
	}
	second.out <- Outcome{}
	settle(t, s)
	if r.over {
		t.Fatal("two runs of one session overlapped")
	}
}

func TestConcurrencyBoundAndPriorityOrder(t *testing.T) {
	s, clk, r := setup(t, 1)
	s.RequestWake("blocker", ReasonCron)
	step(s, clk, 250*time.Millisecond)
	blocker := r.next(t)
	s.RequestWake("low", ReasonInterval)
	s.RequestWake("mid", ReasonTask)
	s.RequestWake("high", ReasonHook)
	step(s, clk, 250*time.Millisecond)
	r.none(t) // one slot, taken
	blocker.out <- Outcome{}
	var order []string
	for range 3 {
		c := r.next(t)
		order = append(order, c.sid)
		c.out <- Outcome{}
	}
	if order[0] != "high" || order[1] != "mid" || order[2] != "low" {
		t.Fatalf("order %v, want high mid low", order)
	}
	settle(t, s)
}

func TestFailedRunRetriesWithBackoff(t *testing.T) {
	s, clk, r := setup(t, 8)
	s.RequestWake("a", ReasonCron)
	step(s, clk, 250*time.Millisecond)
	want := []time.Duration{time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, time.Hour}
	c := r.next(t)
	for i, d := range want {
		if c.attempt != i {
			t.Fatalf("run %d: attempt %d", i, c.attempt)
		}
		c.out <- Outcome{Failed: true}
		settle(t, s)
		step(s, clk, d-time.Millisecond)
		r.none(t)
		step(s, clk, time.Millisecond)
		c = r.next(t)
		if c.reason != ReasonRetry {
			t.Fatalf("retry %d reason %s", i, c.reason)
		}
	}
	c.out <- Outcome{} // success resets the count
	settle(t, s)
	s.RequestWake("a", ReasonManual)
	step(s, clk, 250*time.Millisecond)
	if c = r.next(t); c.attempt != 0 {
		t.Fatalf("attempt after success %d", c.attempt)
	}
	c.out <- Outcome{}
	settle(t, s)
}

func TestNewWakeBringsRetryForward(t *testing.T) {
	s, clk, r := setup(t, 8)
	s.RequestWake("a", ReasonCron)
	step(s, clk, 250*time.Millisecond)
	c := r.next(t)
	c.out <- Outcome{Failed: true}
	settle(t, s)
	step(s, clk, time.Second) // first retry
	c = r.next(t)
	c.out <- Outcome{Failed: true} // next retry in 30 s
	settle(t, s)
	s.RequestWake("a", ReasonManual)
	step(s, clk, 250*time.Millisecond)
	c = r.next(t)
	if c.reason != ReasonManual || c.attempt != 2 {
		t.Fatalf("got %s attempt %d", c.reason, c.attempt)
	}
	c.out <- Outcome{}
	settle(t, s)
}

func TestDeferDoesNotCountAsFailure(t *testing.T) {
	s, clk, r := setup(t, 8)
	s.RequestWake("a", ReasonTask)
	step(s, clk, 250*time.Millisecond)
	c := r.next(t)
	c.out <- Outcome{Defer: 5 * time.Second}
	settle(t, s)
	step(s, clk, 4*time.Second)
	r.none(t)
	step(s, clk, time.Second)
	c = r.next(t)
	if c.reason != ReasonTask || c.attempt != 0 {
		t.Fatalf("deferred run %s attempt %d", c.reason, c.attempt)
	}
	c.out <- Outcome{}
	settle(t, s)
}

func TestHeartbeatIntervalWithoutBacklog(t *testing.T) {
	s, clk, r := setup(t, 8)
	s.SetHeartbeat("a", 2*time.Second, clk.Now().Add(2*time.Second))
	step(s, clk, 2*time.Second)
	r.none(t) // the interval wake waits out its coalescing window
	step(s, clk, 250*time.Millisecond)
	c := r.next(t)
	if c.reason != ReasonInterval {
		t.Fatalf("reason %s", c.reason)
	}
	c.out <- Outcome{}
	settle(t, s)
	// The host sleeps through ten beats: one wake, not ten.
	step(s, clk, 20*time.Second)
	step(s, clk, 250*time.Millisecond)
	c = r.next(t)
	c.out <- Outcome{}
	settle(t, s)
	r.none(t)
	next, ok := s.NextHeartbeat("a")
	if !ok || next.Sub(clk.Now()) > 2*time.Second || !next.After(clk.Now()) {
		t.Fatalf("next beat %v at %v", next, clk.Now())
	}
	s.SetHeartbeat("a", 0, time.Time{})
	step(s, clk, 10*time.Second)
	r.none(t)
	if s.Len() != 0 {
		t.Fatalf("state kept for %d sessions after heartbeat off", s.Len())
	}
}

func TestRunLoopRearms(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	r := newRunner()
	s := New(Config{Runner: r, Clock: clk, Logger: slog.New(slog.DiscardHandler)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	// Idle, the loop still wakes every minute.
	for range 3 {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(RearmEvery)
	}
	s.SetHeartbeat("a", 2*time.Hour, clk.Now().Add(2*time.Hour))
	for range 121 {
		if err := clk.BlockUntilContext(ctx, 1); err != nil {
			t.Fatal(err)
		}
		clk.Advance(RearmEvery)
	}
	c := r.next(t)
	c.out <- Outcome{}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestRetryDelays(t *testing.T) {
	want := []time.Duration{time.Second, 30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, time.Hour}
	for i, d := range want {
		if got := RetryDelay(i + 1); got != d {
			t.Fatalf("RetryDelay(%d) = %v, want %v", i+1, got, d)
		}
	}
}
