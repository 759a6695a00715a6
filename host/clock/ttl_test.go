package clock

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestReservationTTLIsMeasured(t *testing.T) {
	var m ttlMeter
	if got := m.current(); got != InitialReservationTTL {
		t.Fatalf("without samples: %v", got)
	}
	for range ttlMinSamples {
		m.observe(800 * time.Millisecond)
	}
	if got := m.current(); got != MinReservationTTL {
		t.Fatalf("fast answers: want the floor %v, got %v", MinReservationTTL, got)
	}
	for range ttlWindow { // slow non-streaming answers fill the window
		m.observe(40 * time.Second)
	}
	if got := m.current(); got != 80*time.Second {
		t.Fatalf("40 s answers: want 2 × p99 = 80 s, got %v", got)
	}
	for range ttlWindow {
		m.observe(10 * time.Minute)
	}
	if got := m.current(); got != DefaultReservationTTL {
		t.Fatalf("want the ceiling %v, got %v", DefaultReservationTTL, got)
	}
}

func TestCommitFeedsTheReservationTTL(t *testing.T) {
	f := newFixture(t)
	f.schedule(t, "s", "req", item(iso(t0.Add(30*time.Second)), "water"))
	if rs := f.reserve(t, "s", "r1"); len(rs) != 1 {
		t.Fatal("not reserved")
	}
	f.clock.Advance(3 * time.Second)
	if _, err := f.e.Commit(context.Background(), "r1"); err != nil {
		t.Fatal(err)
	}
	f.e.ttl.mu.Lock()
	got := f.e.ttl.samples
	f.e.ttl.mu.Unlock()
	if len(got) != 1 || got[0] != 3*time.Second {
		t.Fatalf("samples %v, want [3s]", got)
	}
}

// A reservation left by a process that died expires after the floor, not
// the measured expiry: its commit, sent while the host was down, is lost.
func TestReservationFromBeforeARestartExpiresSooner(t *testing.T) {
	f := newFixture(t)
	f.schedule(t, "s", "req", item(iso(t0.Add(30*time.Second)), "water"))
	if rs := f.reserve(t, "s", "r1"); len(rs) != 1 {
		t.Fatal("not reserved")
	}
	f.clock.Advance(time.Second)
	restarted, err := New(f.e.cfg) // same store, a new process
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(MinReservationTTL - time.Second)
	rs, err := restarted.Reserve(context.Background(), "s", "r2", f.clock.Now())
	if err != nil || len(rs) != 1 {
		t.Fatalf("after %v the orphaned reservation must be free: %v %v", MinReservationTTL, rs, err)
	}
}

// A reservation only the host process itself settles (a hold's followup,
// a wake run) is released at once by the next process: its owner died.
// A request's reservation from before the restart still waits for the
// floor, and in the process that made it the followup's holds.
func TestProcessOwnedReservationReleasedAfterRestart(t *testing.T) {
	f := newFixture(t)
	owned := func(id string) bool { return strings.HasSuffix(id, ":hold1") }
	f.e.cfg.OwnedByProcess = owned
	f.schedule(t, "s", "req", item(iso(t0.Add(30*time.Second)), "water"))
	f.schedule(t, "t", "req", item(iso(t0.Add(30*time.Second)), "tea"))
	if rs := f.reserve(t, "s", "r1:hold1"); len(rs) != 1 {
		t.Fatal("not reserved")
	}
	if rs := f.reserve(t, "t", "r2"); len(rs) != 1 {
		t.Fatal("not reserved")
	}
	f.clock.Advance(time.Second)
	if rs := f.reserve(t, "s", "r3"); len(rs) != 0 {
		t.Fatalf("the live process's followup reservation was taken: %v", rs)
	}
	restarted, err := New(f.e.cfg) // same store, a new process
	if err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Millisecond)
	rs, err := restarted.Reserve(context.Background(), "s", "r4", f.clock.Now())
	if err != nil || len(rs) != 1 {
		t.Fatalf("a dead process's followup reservation must be free at once: %v %v", rs, err)
	}
	if rs, _ := restarted.Reserve(context.Background(), "t", "r5", f.clock.Now()); len(rs) != 0 {
		t.Fatalf("a request's reservation must wait for the floor: %v", rs)
	}
}
