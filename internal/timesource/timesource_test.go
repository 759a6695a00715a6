package timesource

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

var t0 = time.Date(2026, 2, 2, 21, 0, 0, 0, time.UTC)

// block waits until fake has n waiters, failing the test after a while.
func block(t *testing.T, fake *clockwork.FakeClock, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := fake.BlockUntilContext(ctx, n); err != nil {
		t.Fatalf("waiting for %d waiters: %v", n, err)
	}
}

func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("nothing received")
		var zero T
		return zero
	}
}

func TestWithOffsetShiftsNowNotWaits(t *testing.T) {
	t.Parallel()
	fake := clockwork.NewFakeClockAt(t0)
	var off atomic.Int64
	off.Store(int64(-12 * time.Millisecond))
	c := WithOffset(fake, func() time.Duration { return time.Duration(off.Load()) })
	if got := c.Now(); !got.Equal(t0.Add(-12 * time.Millisecond)) {
		t.Fatalf("Now %v", got)
	}
	if d := c.Until(t0); d != 12*time.Millisecond {
		t.Fatalf("Until %v", d)
	}
	if d := c.Since(t0); d != -12*time.Millisecond {
		t.Fatalf("Since %v", d)
	}
	timer := c.NewTimer(10 * time.Second)
	off.Store(int64(time.Hour)) // an NTP step during the wait
	fake.Advance(10*time.Second - time.Nanosecond)
	select {
	case <-timer.Chan():
		t.Fatal("the offset step cut the wait")
	default:
	}
	fake.Advance(time.Nanosecond)
	recv(t, timer.Chan())
	if got := c.Now(); !got.Equal(t0.Add(10*time.Second + time.Hour)) {
		t.Fatalf("Now after the step %v", got)
	}
}

func TestWait(t *testing.T) {
	t.Parallel()
	fake := clockwork.NewFakeClockAt(t0)
	done := make(chan error, 1)
	go func() { done <- Wait(context.Background(), fake, time.Minute) }()
	block(t, fake, 1)
	fake.Advance(time.Minute)
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}

	cause := errors.New("client went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	go func() { done <- Wait(ctx, fake, time.Minute) }()
	block(t, fake, 1)
	cancel(cause)
	if err := recv(t, done); !errors.Is(err, cause) {
		t.Fatalf("cancelled wait: %v", err)
	}
	block(t, fake, 0)
	if err := Wait(ctx, fake, 0); !errors.Is(err, cause) {
		t.Fatalf("wait on an ended context: %v", err)
	}
	if err := Wait(context.Background(), fake, -time.Second); err != nil {
		t.Fatalf("past wait: %v", err)
	}
}

// Several waits run at once on one clock and each ends at its own time
// (docs/timers.md: several timer calls wait in parallel).
func TestConcurrentWaits(t *testing.T) {
	t.Parallel()
	fake := clockwork.NewFakeClockAt(t0)
	ended := make(chan time.Duration, 3)
	for _, d := range []time.Duration{30 * time.Second, 10 * time.Second, 20 * time.Second} {
		go func() {
			if err := Wait(context.Background(), fake, d); err == nil {
				ended <- d
			}
		}()
	}
	block(t, fake, 3)
	for _, want := range []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second} {
		fake.Advance(10 * time.Second)
		if got := recv(t, ended); got != want {
			t.Fatalf("at %v the wait of %v ended", want, got)
		}
	}
}

// WaitUntil re-arms at most every MaxStep and reads host time again, so
// an offset that moves host time forward ends the wait at the next step.
func TestWaitUntilRearms(t *testing.T) {
	t.Parallel()
	fake := clockwork.NewFakeClockAt(t0)
	var off atomic.Int64
	c := WithOffset(fake, func() time.Duration { return time.Duration(off.Load()) })
	done := make(chan error, 1)
	go func() { done <- WaitUntil(context.Background(), c, t0.Add(5*time.Minute)) }()
	for range 2 {
		block(t, fake, 1)
		fake.Advance(MaxStep)
	}
	block(t, fake, 1) // still waiting after 2 min
	select {
	case err := <-done:
		t.Fatalf("ended early: %v", err)
	default:
	}
	off.Store(int64(3 * time.Minute)) // NTP: host time is 3 min later than thought
	fake.Advance(MaxStep)
	if err := recv(t, done); err != nil {
		t.Fatal(err)
	}
	if err := WaitUntil(context.Background(), c, t0); err != nil {
		t.Fatalf("past instant: %v", err)
	}
}

func TestOrReal(t *testing.T) {
	t.Parallel()
	fake := clockwork.NewFakeClockAt(t0)
	if OrReal(fake) != Clock(fake) {
		t.Fatal("OrReal replaced a clock")
	}
	if d := time.Since(OrReal(nil).Now()); d < 0 || d > time.Minute {
		t.Fatalf("OrReal(nil) is not the process clock: %v", d)
	}
}
