package clock

import (
	"context"
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
