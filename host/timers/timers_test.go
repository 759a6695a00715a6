package timers

import (
	"bytes"
	"context"
	"fmt"
	"runtime/pprof"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

const (
	timerTool  = hostapi.TimerToolName
	readTimer  = hostapi.ReadTimerToolName
	stopTimer  = hostapi.StopTimerToolName
	cancelTool = hostapi.CancelTimerToolName
	pauseTool  = hostapi.PauseTimerToolName
	resumeTool = hostapi.ResumeTimerToolName
)

func TestTimerTimesOutThenContinuesToItsOwnEnd(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.async(t, ctx, "s1", timerTool, create(6, 2, "build"), 1)
	f.mono.Advance(2 * time.Second)
	r := recv(t, res)
	if !r.OK || !r.TimedOut || r.Status != Running || r.RemainingS != 4 || r.ElapsedS != 2 || r.TotalS != 6 || r.Reason != "build" {
		t.Fatalf("first wait: %+v", r)
	}
	if r.WaitedS == nil || *r.WaitedS != 2 {
		t.Fatalf("waited_s: %v", r.WaitedS)
	}
	// The model checks on something for a second, then waits again with a
	// long timeout: the timer's own end (6 s after creation) stands.
	f.mono.Advance(time.Second)
	res = f.async(t, ctx, "s1", timerTool, cont(r.TimerID, 60), 1)
	f.mono.Advance(3 * time.Second)
	r = recv(t, res)
	if !r.OK || r.TimedOut || r.Status != Completed || r.RemainingS != 0 || r.ElapsedS != 6 {
		t.Fatalf("second wait: %+v", r)
	}
	if *r.WaitedS != 3 {
		t.Fatalf("the continued wait lasted %v s, want 3 (6 after creation, not 2+6)", *r.WaitedS)
	}
	none(t, f.notices) // it completed under a wait: no notice
	// Waiting on it again answers at once.
	if r := f.call(t, ctx, "s1", timerTool, cont(r.TimerID, 5)); !r.OK || r.Status != Completed {
		t.Fatalf("wait on a completed timer: %+v", r)
	}
}

func TestCancelledTimerNotifiesOnceStoppedNever(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.async(t, ctx, "s1", timerTool, create(10, 1, `deploy "prod"`), 1)
	f.mono.Advance(time.Second)
	a := recv(t, res)
	res = f.async(t, ctx, "s1", timerTool, create(10, 1, "other"), 1)
	f.mono.Advance(time.Second)
	b := recv(t, res)

	if r := f.call(t, ctx, "s1", cancelTool, idReason(a.TimerID, "doing other work")); !r.OK || r.Status != Background {
		t.Fatalf("cancel: %+v", r)
	}
	if r := f.call(t, ctx, "s1", stopTimer, idReason(b.TimerID, "done")); !r.OK || r.Status != Stopped || r.RemainingS != 9 {
		t.Fatalf("stop: %+v", r)
	}
	f.mono.Advance(8 * time.Second)
	f.tick()
	n := recv(t, f.notices)
	want := `[timer completed: "deploy \"prod\"" id=` + a.TimerID + ` after 10s]`
	if n.Text != want || n.SessionID != "s1" || n.TimerID != a.TimerID {
		t.Fatalf("notice %+v, want text %s", n, want)
	}
	f.mono.Advance(time.Hour)
	f.tick()
	none(t, f.notices)
	if r := f.call(t, ctx, "s1", readTimer, idArgs(b.TimerID)); r.Status != Stopped {
		t.Fatalf("stopped timer reads %+v", r)
	}
	// A finished timer cannot be stopped or cancelled again.
	if r := f.call(t, ctx, "s1", cancelTool, idReason(a.TimerID, "")); r.OK || !strings.Contains(r.Reason, "wrong state") {
		t.Fatalf("cancel of a completed timer: %+v", r)
	}
}

func TestPauseShiftsCompletionAndResumeShiftsBack(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.async(t, ctx, "s1", timerTool, create(10, 1, "p"), 1)
	f.mono.Advance(time.Second)
	id := recv(t, res).TimerID
	if r := f.call(t, ctx, "s1", pauseTool, pause(id, 3)); !r.OK || r.Status != Paused || r.RemainingS != 9 {
		t.Fatalf("pause: %+v", r)
	}
	f.mono.Advance(3 * time.Second) // the pause ends by itself
	f.tick()
	if r := f.call(t, ctx, "s1", readTimer, idArgs(id)); r.Status != Running || r.RemainingS != 9 {
		t.Fatalf("after the pause: %+v", r)
	}
	// 9 s left: completion is at 13 s after creation, 3 s later than unpaused.
	res = f.async(t, ctx, "s1", timerTool, cont(id, 0), 1)
	f.mono.Advance(9 * time.Second)
	if r := recv(t, res); r.Status != Completed || *r.WaitedS != 9 {
		t.Fatalf("completion: %+v", r)
	}

	// resume_timer early: paused for 30 s, resumed after 2 s.
	res = f.async(t, ctx, "s1", timerTool, create(10, 1, "q"), 1)
	f.mono.Advance(time.Second)
	id = recv(t, res).TimerID
	f.call(t, ctx, "s1", pauseTool, pause(id, 30))
	f.mono.Advance(2 * time.Second)
	if r := f.call(t, ctx, "s1", resumeTool, idReason(id, "")); !r.OK || r.Status != Running || r.RemainingS != 9 {
		t.Fatalf("resume: %+v", r)
	}
	if r := f.call(t, ctx, "s1", resumeTool, idReason(id, "")); r.OK || !strings.Contains(r.Reason, "only a paused timer") {
		t.Fatalf("resume of a running timer: %+v", r)
	}
	res = f.async(t, ctx, "s1", timerTool, cont(id, 0), 1)
	f.mono.Advance(9 * time.Second)
	if r := recv(t, res); r.Status != Completed {
		t.Fatalf("after an early resume: %+v", r)
	}
}

func TestParallelWaitsReturnAfterTheLongest(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	a := f.async(t, ctx, "s1", timerTool, create(2, 0, "short"), 1)
	b := f.async(t, ctx, "s1", timerTool, create(5, 0, "long"), 2)
	f.mono.Advance(2 * time.Second)
	if r := recv(t, a); r.Status != Completed {
		t.Fatalf("short: %+v", r)
	}
	none(t, b)
	f.mono.Advance(3 * time.Second)
	if r := recv(t, b); r.Status != Completed || *r.WaitedS != 5 {
		t.Fatalf("long: %+v", r)
	}
}

func TestCallerLeavingSendsTheTimerToTheBackground(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	res := f.async(t, ctx, "s1", timerTool, create(10, 8, "ci"), 1)
	f.mono.Advance(3 * time.Second)
	cancel() // the client disconnected
	r := recv(t, res)
	if r.Status != Background || r.TimedOut {
		t.Fatalf("after the disconnect: %+v", r)
	}
	if f.m.Live() != 1 {
		t.Fatal("the timer stopped with its wait")
	}
	f.mono.Advance(7 * time.Second)
	f.tick()
	if n := recv(t, f.notices); n.TimerID != r.TimerID {
		t.Fatalf("notice %+v", n)
	}
}

func TestCancelTimerEndsAHeldWait(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.async(t, ctx, "s1", timerTool, create(100, 50, "x"), 1)
	v, err := f.m.List("s1")
	if err != nil || len(v) != 1 || v[0].Status != Waiting {
		t.Fatalf("list while waiting: %+v %v", v, err)
	}
	if _, err := f.m.Cancel("s1", v[0].TimerID, "from the dashboard"); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, res); r.Status != Background || r.TimedOut {
		t.Fatalf("held call after cancel: %+v", r)
	}
	res = f.async(t, ctx, "s1", timerTool, cont(v[0].TimerID, 50), 1)
	if _, err := f.m.Stop("s1", v[0].TimerID, "from the dashboard"); err != nil {
		t.Fatal(err)
	}
	if r := recv(t, res); r.Status != Stopped {
		t.Fatalf("held call after stop: %+v", r)
	}
}

func TestSessionIsolation(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	res := f.async(t, ctx, "owner", timerTool, create(60, 1, "mine"), 1)
	f.mono.Advance(time.Second)
	id := recv(t, res).TimerID
	for name, args := range map[string]map[string]any{
		timerTool: cont(id, 1), readTimer: idArgs(id), stopTimer: idReason(id, ""),
		cancelTool: idReason(id, ""), pauseTool: pause(id, 5), resumeTool: idReason(id, ""),
	} {
		r := f.call(t, ctx, "intruder", name, args)
		if r.OK || !strings.Contains(r.Reason, "unknown timer") {
			t.Errorf("%s from another session: %+v", name, r)
		}
	}
	if r := f.call(t, ctx, "intruder", readTimer, idArgs("")); !r.OK {
		t.Fatalf("list: %+v", r)
	}
	if vs, _ := f.m.List("intruder"); len(vs) != 0 {
		t.Fatalf("intruder lists %v", vs)
	}
	if r := f.call(t, ctx, "owner", readTimer, idArgs(id)); r.Status != Running {
		t.Fatalf("owner's timer was touched: %+v", r)
	}
	if r := f.call(t, ctx, "", readTimer, idArgs(id)); r.OK || !strings.Contains(r.Reason, "no session") {
		t.Fatalf("no session: %+v", r)
	}
}

func TestBadArgumentsAreResults(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxPerSession = 1 })
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		args map[string]any
		want string
	}{
		{timerTool, create(0, 1, ""), "total_duration must be more than 0"},
		{timerTool, create(-1, 1, ""), "bad duration"},
		{timerTool, create(1e12, 1, ""), "bad duration"},
		{timerTool, create(5, -2, ""), "bad duration"},
		{timerTool, map[string]any{"timeout_duration": 1, "timer_id": "", "reason": ""}, "total_duration is required"},
		{timerTool, map[string]any{"total_duration": 1, "timeout_duration": 1, "timer_id": "", "reason": "", "extra": 1}, "unknown field"},
		{timerTool, map[string]any{"total_duration": "5", "timeout_duration": 1, "timer_id": "", "reason": ""}, "cannot unmarshal"},
		{stopTimer, idReason("", ""), "needs timer_id"},
		{stopTimer, idReason("../../x", ""), "unknown timer"},
		{pauseTool, pause("tmr_nope", 0), "pause_duration must be more than 0"},
		{timerTool, create(5, 1, strings.Repeat("x", 600)), "reason is 600 bytes"},
		{"no_such_tool", idArgs(""), "unknown timer tool"},
	} {
		if r := f.call(t, ctx, "s1", tc.name, tc.args); r.OK || !strings.Contains(r.Reason, tc.want) {
			t.Errorf("%s %v: %+v, want reason with %q", tc.name, tc.args, r, tc.want)
		}
	}
	res := f.async(t, ctx, "s1", timerTool, create(60, 1, ""), 1)
	f.mono.Advance(time.Second)
	recv(t, res)
	if r := f.call(t, ctx, "s1", timerTool, create(60, 1, "")); r.OK || !strings.Contains(r.Reason, "too many timers") {
		t.Fatalf("over the cap: %+v", r)
	}
}

func TestWaitIsClampedToMaxWaitAndSaysSo(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxWait = 30 * time.Second })
	res := f.async(t, context.Background(), "s1", timerTool, create(600, 120, ""), 1)
	f.mono.Advance(30 * time.Second)
	r := recv(t, res)
	if !r.TimedOut || *r.WaitedS != 30 || !strings.Contains(r.Note, "timerMaxWait") {
		t.Fatalf("clamped wait: %+v", r)
	}
}

func TestNTPStepMovesNeitherWaitsNorEnds(t *testing.T) {
	f := newFixture(t)
	res := f.async(t, context.Background(), "s1", timerTool, create(10, 4, ""), 1)
	f.setOffset(time.Hour) // host time jumps an hour ahead
	f.tick()
	f.mono.Advance(4 * time.Second)
	r := recv(t, res)
	if r.Status != Running || r.RemainingS != 6 {
		t.Fatalf("after an NTP step: %+v", r)
	}
}

func TestSchedulerCostsNoGoroutinePerTimer(t *testing.T) {
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := timersGoroutines()
	for i := range 2000 {
		if _, err := f.m.Create("s"+string(rune('a'+i%20)), "", time.Duration(i+1)*time.Second); err == nil {
			continue
		}
		f.m.cfg.MaxPerSession = 1 << 20 // raise the cap and retry once
		if _, err := f.m.Create("s", "", time.Second); err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan error, 1)
	go func() { done <- f.m.Run(ctx) }()
	f.block(t, 1)
	if n := timersGoroutines() - before; n > 1 {
		t.Fatalf("%d goroutines in this package's code for 2000 timers, want the scheduler's one", n)
	}
	// Every one is fired by the one scheduler: 2000 s later all are done.
	for range 40 {
		f.mono.Advance(60 * time.Second)
		f.block(t, 1)
	}
	if f.m.Live() != 0 {
		t.Fatalf("%d timers still live", f.m.Live())
	}
	cancel()
	recv(t, done)
}

// timersGoroutines counts the goroutines that run or were started by this
// package's own code (a frame in one of its files that is not a test
// file): the process's whole count also moves with the storage's
// background work (a flush, a compaction) and with goroutines of earlier
// tests still ending.
func timersGoroutines() int {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		panic(err)
	}
	n := 0
	for _, g := range strings.Split(buf.String(), "\n\n") {
		if strings.Contains(g, "timers.timersGoroutines") {
			continue // the caller's
		}
		for _, line := range strings.Split(g, "\n") {
			if strings.HasPrefix(line, "\t") && strings.Contains(line, "/host/timers/") && !strings.Contains(line, "_test.go:") {
				n++
				break
			}
		}
	}
	return n
}

// Timers due in the same pass are fired together, so that their
// write-through commits share disk syncs instead of queueing behind one
// each (BenchmarkTimers10k): every firing here waits in Fired until all
// of them are in, which one-after-another firing never reaches.
func TestDueTimersFireTogether(t *testing.T) {
	const n = 4
	var in atomic.Int32
	all := make(chan struct{})
	var alone atomic.Bool
	f := newFixture(t, func(c *Config) {
		c.Fired = func(time.Duration) {
			if in.Add(1) == n {
				close(all)
			}
			select {
			case <-all:
			case <-time.After(5 * time.Second): // a failure guard, not a measurement
				alone.Store(true)
			}
		}
	})
	for i := range n {
		if _, err := f.m.Create(fmt.Sprintf("s%d", i), "build", 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	f.mono.Advance(10 * time.Second)
	f.tick()
	if alone.Load() {
		t.Fatalf("the %d due timers were fired one at a time", n)
	}
	if live := f.m.Live(); live != 0 {
		t.Fatalf("%d timers still live after the pass", live)
	}
	for i := range n {
		views, err := f.m.List(fmt.Sprintf("s%d", i))
		if err != nil || len(views) != 1 || views[0].Status != Completed {
			t.Fatalf("session s%d: %+v, %v", i, views, err)
		}
	}
}

// A session's timers due in the same pass still fire in the order they
// fell due, so their notices queue in that order.
func TestOneSessionsDueTimersFireInOrder(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var want []string
	for i := range 5 {
		for _, s := range []string{"s1", fmt.Sprintf("other%d", i)} {
			rec, err := f.m.Create(s, "step", time.Duration(10+i)*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if r := f.call(t, ctx, s, cancelTool, idReason(rec.TimerID, "")); !r.OK || r.Status != Background {
				t.Fatalf("cancel: %+v", r)
			}
			if s == "s1" {
				want = append(want, rec.TimerID)
			}
		}
	}
	f.mono.Advance(15 * time.Second)
	f.tick()
	var got []string
	for range 10 {
		if n := recv(t, f.notices); n.SessionID == "s1" {
			got = append(got, n.TimerID)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("s1's notices in order %v, want %v", got, want)
	}
}
