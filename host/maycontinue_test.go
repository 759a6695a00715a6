package host

import (
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// Issue 17, defect 4: a background timer is a pending notice for
// mayContinue only when it ends within holds.max of the response's end;
// one ending in hours costs no resolve round trip, as a far task does not.
func TestPrepareMayContinueTimers(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	background(t, f, "sess-timer-far", "nightly", 3*time.Hour)
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: "sess-timer-far"}); ans.MayContinue {
		t.Error("a timer ending in 3 h: mayContinue")
	}
	background(t, f, "sess-timer-near", "build", 30*time.Second)
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r2", SessionID: "sess-timer-near"}); !ans.MayContinue {
		t.Error("a timer ending in 30 s: no mayContinue")
	}
}

// background starts a timer that runs on without a waiting call: its end
// is a notice for the session's next request.
func background(t *testing.T, f *fixture, sid, reason string, d time.Duration) {
	t.Helper()
	rec, err := f.svc.timers.Create(sid, reason, d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.timers.Cancel(sid, rec.TimerID, ""); err != nil {
		t.Fatal(err)
	}
}
