package host

import (
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// docs/timers.md#notices: a background timer's completion is injected into
// the session's next request with reservation and commit, once.
func TestTimerNoticeInjectedOnceIntoTheNextRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec, err := f.svc.timers.Create("sess", "build #7", 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.timers.Cancel("sess", rec.TimerID, ""); err != nil {
		t.Fatal(err)
	}
	stopped, _ := f.svc.timers.Create("sess", "never told", 6*time.Second)
	if _, err := f.svc.timers.Stop("sess", stopped.TimerID, ""); err != nil {
		t.Fatal(err)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: "sess"}); ans.Reserved || !ans.MayContinue {
		t.Fatalf("before the end: %+v", ans)
	}
	f.clk.Advance(6 * time.Second) // no scheduler runs here: prepare applies the end
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r2", SessionID: "sess"})
	want := `[timer completed: "build #7" id=` + rec.TimerID + ` after 6s]`
	if !ans.Reserved || ans.Reminders != want {
		t.Fatalf("after the end: %+v, want %q", ans, want)
	}
	// Another session's request gets nothing.
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r3", SessionID: "other"}); ans.Reserved {
		t.Fatalf("leaked: %+v", ans)
	}
	// Rolled back (the upstream failed): the next request gets it again.
	f.outcome(t, hostapi.PathRollback, "r2")
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r4", SessionID: "sess"}); ans.Reminders != want {
		t.Fatalf("after a rollback: %+v", ans)
	}
	f.outcome(t, hostapi.PathCommit, "r4")
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r5", SessionID: "sess"}); ans.Reserved || strings.Contains(ans.Reminders, "never told") {
		t.Fatalf("after the commit: %+v", ans)
	}
}

// Timer tools through the host's executor: ok results, and the session of
// the request decides which timers a call can see.
func TestTimerToolsThroughTheExecutor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec, err := f.svc.timers.Create("a", "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r := f.tool(t, "a", "r1", hostapi.ReadTimerToolName, `{"timer_id":"`+rec.TimerID+`"}`)
	if !r.ok() || r["status"] != "Running" {
		t.Fatalf("read: %v", r)
	}
	r = f.tool(t, "b", "r2", hostapi.StopTimerToolName, `{"timer_id":"`+rec.TimerID+`","reason":""}`)
	if r.ok() || !strings.Contains(r["reason"].(string), "unknown timer") {
		t.Fatalf("other session: %v", r)
	}
}
