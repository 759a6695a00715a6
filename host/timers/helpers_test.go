package timers

import (
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

type fixture struct {
	m       *Manager
	store   *storage.Store
	mono    *clockwork.FakeClock
	offset  *time.Duration // the NTP offset of host time
	offMu   *sync.Mutex
	notices chan Notice
}

func newFixture(t *testing.T, mod ...func(*Config)) *fixture {
	t.Helper()
	st, err := storage.Open("", storage.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return newFixtureOn(t, st, clockwork.NewFakeClockAt(t0), mod...)
}

// newFixtureOn builds a manager over st, as a restarted host would.
func newFixtureOn(t *testing.T, st *storage.Store, mono *clockwork.FakeClock, mod ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{store: st, mono: mono, offset: new(time.Duration), offMu: &sync.Mutex{}, notices: make(chan Notice, 100)}
	host := timesource.WithOffset(mono, func() time.Duration {
		f.offMu.Lock()
		defer f.offMu.Unlock()
		return *f.offset
	})
	cfg := Config{
		Store: st, Clock: host, Mono: mono, Logger: slog.New(slog.DiscardHandler),
		Notify: func(_ context.Context, n Notice) error { f.notices <- n; return nil },
	}
	for _, fn := range mod {
		fn(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// setOffset steps host time (an NTP correction) without moving waits.
func (f *fixture) setOffset(d time.Duration) {
	f.offMu.Lock()
	defer f.offMu.Unlock()
	*f.offset = d
}

// call runs a tool and decodes its result.
func (f *fixture) call(t *testing.T, ctx context.Context, session, name string, args map[string]any) Result {
	t.Helper()
	raw, _ := json.Marshal(args)
	var r Result
	if err := json.Unmarshal(f.m.Execute(ctx, session, name, raw), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// async starts a tool call whose wait the test drives with the clock; it
// returns once the call is held (its wait timer armed).
func (f *fixture) async(t *testing.T, ctx context.Context, session, name string, args map[string]any, waitersAfter int) <-chan Result {
	t.Helper()
	out := make(chan Result, 1)
	go func() {
		raw, _ := json.Marshal(args)
		var r Result
		_ = json.Unmarshal(f.m.Execute(ctx, session, name, raw), &r)
		out <- r
	}()
	f.block(t, waitersAfter)
	return out
}

// block waits until n clock waiters exist (held calls, the scheduler).
func (f *fixture) block(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := f.mono.BlockUntilContext(ctx, n); err != nil {
		t.Fatalf("%d clock waiters never appeared: %v", n, err)
	}
}

// recv takes one value; the timeout is a failure guard, not a measurement.
func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatal("nothing arrived")
	}
	var z T
	return z
}

func none[T any](t *testing.T, c <-chan T) {
	t.Helper()
	select {
	case v := <-c:
		t.Fatalf("unexpected %v", v)
	default:
	}
}

// tick runs one scheduler pass at the fake now.
func (f *fixture) tick() { f.m.fireDue(context.Background(), f.mono.Now()) }

func create(total, timeout float64, reason string) map[string]any {
	return map[string]any{"total_duration": total, "timeout_duration": timeout, "timer_id": "", "reason": reason}
}

func cont(id string, timeout float64) map[string]any {
	return map[string]any{"total_duration": 0, "timeout_duration": timeout, "timer_id": id, "reason": ""}
}

func idArgs(id string) map[string]any { return map[string]any{"timer_id": id} }

func idReason(id, reason string) map[string]any {
	return map[string]any{"timer_id": id, "reason": reason}
}

func pause(id string, d float64) map[string]any {
	return map[string]any{"timer_id": id, "pause_duration": d, "reason": "hold on"}
}
