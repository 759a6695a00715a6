package timers

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

// restart builds a new manager over the same store at host time at, as a
// host started after a crash would, and restores it.
func (f *fixture) restart(t *testing.T, at time.Time) (*fixture, int, int) {
	t.Helper()
	g := newFixtureOn(t, f.store, clockwork.NewFakeClockAt(at))
	r, c, err := g.m.Restore(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return g, r, c
}

func TestRestartCompletesBackgroundTimerThatEndedWhileDown(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.async(t, ctx, "s1", timerTool, create(60, 1, "nightly"), 1)
	f.mono.Advance(time.Second)
	id := recv(t, res).TimerID
	f.call(t, ctx, "s1", cancelTool, idReason(id, ""))
	// kill -9 at t0+1s; the host comes back an hour later.
	g, restored, completed := f.restart(t, t0.Add(time.Hour))
	if restored != 1 || completed != 1 {
		t.Fatalf("restored %d, completed %d", restored, completed)
	}
	if n := recv(t, g.notices); n.TimerID != id {
		t.Fatalf("notice %+v", n)
	}
	if r := g.call(t, ctx, "s1", readTimer, idArgs(id)); r.Status != Completed {
		t.Fatalf("after restart: %+v", r)
	}
	// A second restart does not notify again.
	h, _, completed := g.restart(t, t0.Add(2*time.Hour))
	if completed != 0 {
		t.Fatal("completed twice")
	}
	none(t, h.notices)
}

func TestRestartResumesRunningPausedAndCutWaits(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	mk := func(total float64) string {
		res := f.async(t, ctx, "s1", timerTool, create(total, 1, ""), 1)
		f.mono.Advance(time.Second)
		return recv(t, res).TimerID
	}
	running := mk(100)                                 // created at +0, ends at +100
	paused := mk(100)                                  // created at +1, 99 left at +2
	f.call(t, ctx, "s1", pauseTool, pause(paused, 10)) // pause ends at +12
	longPause := mk(100)                               // created at +2
	f.call(t, ctx, "s1", pauseTool, pause(longPause, 3600))
	waiting := f.async(t, ctx, "s1", timerTool, create(100, 90, "held"), 1)
	_ = waiting // the process dies with this call held

	g, restored, completed := f.restart(t, t0.Add(20*time.Second))
	if restored != 4 || completed != 0 {
		t.Fatalf("restored %d, completed %d", restored, completed)
	}
	read := func(id string) Result { return g.call(t, ctx, "s1", readTimer, idArgs(id)) }
	if r := read(running); r.Status != Running || r.RemainingS != 80 {
		t.Fatalf("running: %+v", r)
	}
	// Its pause ended at +12 while down; it counted from then: 99 − 8.
	if r := read(paused); r.Status != Running || r.RemainingS != 91 {
		t.Fatalf("paused: %+v", r)
	}
	if r := read(longPause); r.Status != Paused || r.RemainingS != 99 {
		t.Fatalf("long pause: %+v", r)
	}
	vs, _ := g.m.List("s1")
	var cut View
	for _, v := range vs {
		if v.Reason == "held" {
			cut = v
		}
	}
	if cut.Status != Background {
		t.Fatalf("a wait cut by the restart: %+v", cut)
	}
}

func TestPruneDropsOldFinishedTimers(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.async(t, ctx, "s1", timerTool, create(1, 0, ""), 1)
	f.mono.Advance(time.Second)
	id := recv(t, res).TimerID
	if n, _ := f.m.Prune(ctx); n != 0 {
		t.Fatal("pruned a fresh timer")
	}
	f.mono.Advance(DefaultRetention + time.Minute)
	if n, err := f.m.Prune(ctx); n != 1 || err != nil {
		t.Fatalf("pruned %d, %v", n, err)
	}
	if r := f.call(t, ctx, "s1", readTimer, idArgs(id)); r.OK {
		t.Fatalf("still readable: %+v", r)
	}
}

func TestHistoryRecordsEveryTransition(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.async(t, ctx, "s1", timerTool, create(10, 1, "h"), 1)
	f.mono.Advance(time.Second)
	id := recv(t, res).TimerID
	f.call(t, ctx, "s1", pauseTool, pause(id, 5))
	f.call(t, ctx, "s1", resumeTool, idReason(id, "early"))
	f.call(t, ctx, "s1", cancelTool, idReason(id, "later"))
	f.call(t, ctx, "s1", stopTimer, idReason(id, "done"))
	rec, ok, err := f.store.GetTimer("s1", id)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	var got []string
	for _, h := range rec.History {
		got = append(got, h.Status+":"+h.Reason)
	}
	want := []string{"Running:created", "Waiting:timer call waiting", "Running:wait timed out",
		"Paused:hold on", "Running:early", "Background:later", "Stopped:done"}
	if len(got) != len(want) {
		t.Fatalf("history %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("history %q, want %q", got, want)
		}
	}
}
