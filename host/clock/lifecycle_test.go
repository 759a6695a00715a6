package clock

import (
	"context"
	"testing"
	"time"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

func openDisk(t *testing.T, dir string) *storage.Store {
	t.Helper()
	st, err := storage.Open(dir, storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func TestSweep(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	expiredOnce := f.schedule(t, "a", "r", item(iso(t0.Add(time.Minute)), "expired"))
	dueUndelivered := f.schedule(t, "a", "r", item(iso(t0.Add(30*time.Minute)), "due, undelivered"))
	deliveredRecent := f.schedule(t, "b", "r", item(iso(t0.Add(25*time.Minute)), "delivered, in retention"))
	missed := item(iso(t0.Add(2*time.Minute)), "missed repeat")
	missed["repeat"] = "every 1h"
	missedRepeat := f.schedule(t, "b", "r", missed)

	f.clock.Set(t0.Add(25 * time.Minute))
	f.reserve(t, "b", "rb")
	if n, _ := f.e.Commit(ctx, "rb"); n != 1 {
		t.Fatal("commit")
	}
	// An orphaned reservation record from a request that never finished.
	if err := f.store.Update(func(tx *storage.Tx) error {
		if err := tx.PutReservation(storage.Reservation{RequestID: "lost", SessionID: "a", ReservedAt: t0.Add(-20 * time.Minute).UnixMilli()}); err != nil {
			return err
		}
		return tx.PutReservation(storage.Reservation{RequestID: "recent", SessionID: "a", ReservedAt: t0.UnixMilli()})
	}); err != nil {
		t.Fatal(err)
	}

	// t0+45m: expiredOnce expired at t0+21m; dueUndelivered expires at
	// t0+50m; deliveredRecent exactly at its t0+45m boundary (kept).
	now := f.clock.Add(20 * time.Minute)
	n, err := f.e.Sweep(ctx, now)
	if err != nil || n != 1 {
		t.Fatalf("sweep deleted %d (%v), want 1", n, err)
	}
	if _, ok, _ := f.store.GetTask("a", expiredOnce); ok {
		t.Fatal("expired task survived")
	}
	f.task(t, "a", dueUndelivered)
	if got := f.task(t, "b", deliveredRecent); got.DeliveredAt == 0 {
		t.Fatal("delivered task lost its delivery")
	}
	rep := f.task(t, "b", missedRepeat)
	if rep.DueAt != t0.Add(62*time.Minute).UnixMilli() || rep.DeliveredAt != 0 {
		t.Fatalf("missed repeat not re-armed to the next slot: %v", time.UnixMilli(rep.DueAt).UTC())
	}
	err = f.store.View(func(tx *storage.Tx) error {
		if _, ok, _ := tx.Reservation("lost"); ok {
			t.Error("orphaned reservation kept")
		}
		if _, ok, _ := tx.Reservation("recent"); !ok {
			t.Error("recent reservation dropped")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestSweepKeepsDueUndeliveredUntilExpiry(t *testing.T) {
	f := newFixture(t)
	id := f.schedule(t, "s", "r", item(iso(t0.Add(time.Minute)), "x"))
	due := t0.Add(time.Minute)
	if n, _ := f.e.Sweep(context.Background(), due.Add(DefaultRetention)); n != 0 {
		t.Fatal("deleted at the retention boundary")
	}
	f.task(t, "s", id)
	delivered := f.schedule(t, "s", "r", item(iso(t0.Add(2*time.Minute)), "y"))
	f.clock.Set(t0.Add(2 * time.Minute))
	f.reserve(t, "s", "q")
	f.e.Commit(context.Background(), "q")
	if n, _ := f.e.Sweep(context.Background(), due.Add(DefaultRetention+time.Millisecond)); n != 1 {
		t.Fatal("expired task not deleted")
	}
	f.task(t, "s", delivered) // delivered but still inside its retention
}

// A due-but-undelivered task survives a restart (startup scan) and is then
// injected.
func TestDueTaskSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock(t0)
	st := openDisk(t, dir)
	f := newFixtureOn(t, st, clk)
	id := f.schedule(t, "s", "r", item(iso(t0.Add(time.Minute)), "persist me"))
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Set(t0.Add(10 * time.Minute)) // due while the host was down
	f2 := newFixtureOn(t, openDisk(t, dir), clk)
	if n, err := f2.e.Sweep(context.Background(), clk.Now()); n != 0 || err != nil {
		t.Fatalf("startup scan: %d %v", n, err)
	}
	rs := f2.reserve(t, "s", "after-restart")
	if len(rs) != 1 || rs[0].TaskID != id {
		t.Fatalf("not injected after restart: %v", ids(rs))
	}
}

// tickerSpy records the sweep ticker's period and whether Run stopped it.
type tickerSpy struct {
	fakeClock
	period  chan time.Duration
	stopped chan struct{}
}

func (c tickerSpy) NewTicker(d time.Duration) timesource.Ticker {
	c.period <- d
	return spiedTicker{c.fakeClock.NewTicker(d), c.stopped}
}

type spiedTicker struct {
	timesource.Ticker
	stopped chan struct{}
}

func (t spiedTicker) Stop() { t.Ticker.Stop(); close(t.stopped) }

func TestRunSweepsAtStartAndOnTick(t *testing.T) {
	clk := tickerSpy{newFakeClock(t0), make(chan time.Duration, 1), make(chan struct{})}
	f := newFixture(t, func(c *Config) { c.Clock = clk })
	a := f.schedule(t, "s", "r", item(iso(t0.Add(time.Minute)), "a"))
	b := f.schedule(t, "s", "r", item(iso(t0.Add(time.Hour)), "b"))
	clk.Set(t0.Add(30 * time.Minute)) // a expired, b not

	swept := make(chan struct{}, 8) // a long Advance may queue a second tick
	f.e.afterSweep = func() { swept <- struct{}{} }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.e.Run(ctx) }()

	<-swept // startup scan
	if _, ok, _ := f.store.GetTask("s", a); ok {
		t.Fatal("startup scan kept an expired task")
	}
	f.task(t, "s", b)
	if d := <-clk.period; d != DefaultSweepEvery {
		t.Errorf("tick every %v", d)
	}
	bctx, stop := context.WithTimeout(ctx, 5*time.Second)
	defer stop()
	if err := clk.BlockUntilContext(bctx, 1); err != nil {
		t.Fatal("the sweep ticker is not on the injected clock")
	}
	clk.Set(t0.Add(2 * time.Hour)) // the tick fires during the move
	<-swept
	if _, ok, _ := f.store.GetTask("s", b); ok {
		t.Fatal("tick did not sweep")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	<-clk.stopped
}

func TestNextDue(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, ok := f.e.NextDue(ctx, "s", "r"); ok {
		t.Fatal("no tasks, yet a next due")
	}
	if _, ok := f.e.NextDue(ctx, "", "r"); ok {
		t.Fatal("no session, yet a next due")
	}
	stamped := f.schedule(t, "s", "req", item(iso(t0.Add(20*time.Second)), "stamped"))
	f.schedule(t, "s", "req", item(iso(t0.Add(3*time.Minute)), "later"))
	f.schedule(t, "s", "req", item(iso(t0.Add(2*time.Minute)), "sooner"))
	_ = stamped
	// For the scheduling chain the stamped task does not count.
	at, ok := f.e.NextDue(ctx, "s", "req:hold")
	if !ok || !at.Equal(t0.Add(2*time.Minute-DefaultDueWindow)) {
		t.Fatalf("next due for chain: %v %v", at, ok)
	}
	// For another request it does.
	at, ok = f.e.NextDue(ctx, "s", "other")
	if !ok || !at.Equal(t0.Add(20*time.Second-DefaultDueWindow)) {
		t.Fatalf("next due: %v %v", at, ok)
	}
	// Delivered tasks do not count.
	f.reserve(t, "s", "other")
	f.e.Commit(ctx, "other")
	at, ok = f.e.NextDue(ctx, "s", "x")
	if !ok || !at.Equal(t0.Add(2*time.Minute-DefaultDueWindow)) {
		t.Fatalf("after delivery: %v %v", at, ok)
	}
}

func TestNewRequiresStore(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("engine without store")
	}
}
