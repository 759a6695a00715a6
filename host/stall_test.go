package host

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/hostapi"
)

// Issue 17 defect 3: a host stalled past the filter's deadline (SIGSTOP, a
// long GC, a kill between reserve and answer) must not strand due
// reminders behind reservations nobody will commit.

func TestPrepareAfterTheFiltersDeadlineReservesNothing(t *testing.T) {
	f := newFixture(t)
	f.schedule(t, "s", "water", t0.Add(30*time.Second))
	late := f.prepare(t, hostapi.PrepareRequest{RequestID: "late", SessionID: "s", DeadlineMs: t0.Add(-5 * time.Second).UnixMilli()})
	if late.Reserved || late.Reminders != "" {
		t.Fatalf("a prepare 5 s past its deadline reserved %q", late.Reminders)
	}
	inTime := f.prepare(t, hostapi.PrepareRequest{RequestID: "next", SessionID: "s", DeadlineMs: t0.Add(200 * time.Millisecond).UnixMilli()})
	if !inTime.Reserved || inTime.Reminders != reminderFor("water") {
		t.Fatalf("the next request must get the reminder at once: %+v", inTime)
	}
	if !metricHas(t, f, "chime_late_prepares_total 1") {
		t.Fatal("late prepare not counted")
	}
}

func TestRollbackBeforePrepareLeavesATombstone(t *testing.T) {
	f := newFixture(t)
	f.schedule(t, "s", "water", t0.Add(30*time.Second))
	// The filter timed out, failed open and rolled back before the stalled
	// host read the prepare.
	if code := f.outcome(t, hostapi.PathRollback, "r1"); code != http.StatusNoContent {
		t.Fatalf("rollback of an unknown id: %d", code)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: "s"}); ans.Reserved {
		t.Fatalf("a prepare after its rollback reserved %q", ans.Reminders)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r2", SessionID: "s"}); !ans.Reserved {
		t.Fatal("the next request must get the reminder")
	}
	// The tombstone does not disturb the real reservation's outcome.
	if code := f.outcome(t, hostapi.PathCommit, "r2"); code != http.StatusNoContent {
		t.Fatalf("commit: %d", code)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r3", SessionID: "s"}); ans.Reserved {
		t.Fatal("delivered twice")
	}
}

func TestUnansweredReservationExpiresWithinSeconds(t *testing.T) {
	f := newFixture(t)
	f.schedule(t, "s", "water", t0.Add(30*time.Second))
	if !f.prepare(t, hostapi.PrepareRequest{RequestID: "lost", SessionID: "s"}).Reserved {
		t.Fatal("not reserved")
	}
	// Nobody answers "lost" (the filter's callout died with the host).
	f.clk.Advance(clock.InitialReservationTTL - time.Second)
	if f.prepare(t, hostapi.PrepareRequest{RequestID: "early", SessionID: "s"}).Reserved {
		t.Fatal("taken before the reservation expired")
	}
	f.clk.Advance(time.Second)
	if !f.prepare(t, hostapi.PrepareRequest{RequestID: "after", SessionID: "s"}).Reserved {
		t.Fatalf("still blocked %s after an unanswered reserve", clock.InitialReservationTTL)
	}
}

func metricHas(t *testing.T, f *fixture, line string) bool {
	t.Helper()
	rec := f.do(t, http.MethodGet, "/metrics", "", nil)
	for _, l := range splitLines(rec.Body.String()) {
		if l == line {
			return true
		}
	}
	return false
}

func splitLines(s string) []string { return strings.Split(s, "\n") }
