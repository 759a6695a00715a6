package host

import (
	"github.com/jonboulle/clockwork"

	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// TestDirectiveAppliedOncePerPosition: the same directive at the same
// position is applied once per session, also after a restart and for a
// retried request; typed again at a new position it is applied again
// (docs/directives.md#applied-once).
func TestDirectiveAppliedOncePerPosition(t *testing.T) {
	dir := t.TempDir()
	clk := clockwork.NewFakeClockAt(t0)
	f := openFixture(t, dir, clk)
	const sid = "sess-once"
	clockAt := func(pos int) hostapi.HostDirective {
		return hostapi.HostDirective{Kind: "clock", Clock: &llm.ClockItem{DueAt: t0.Add(2 * time.Hour).Format(time.RFC3339), Task: "stretch"}, Position: pos}
	}
	stopAt := func(pos int) hostapi.HostDirective {
		return hostapi.HostDirective{Kind: "stopMessage", Text: "go on", MaxRepeats: 1, Position: pos}
	}
	prep := func(f *fixture, id string, ds ...hostapi.HostDirective) {
		t.Helper()
		f.prepare(t, hostapi.PrepareRequest{RequestID: id, SessionID: sid, Directives: ds})
	}
	check := func(f *fixture, wantTasks, wantUsed int) {
		t.Helper()
		ts, err := f.svc.store.ListTasks(sid)
		if err != nil || len(ts) != wantTasks {
			t.Fatalf("tasks = %d (%v), want %d", len(ts), err, wantTasks)
		}
		m, ok, err := f.svc.store.GetStopMessage(sid)
		if err != nil || !ok || m.Used != wantUsed {
			t.Fatalf("stopMessage = %+v %v %v, want used %d", m, ok, err, wantUsed)
		}
	}
	useStop := func(f *fixture) { // what a stopMessage trigger persists (docs/continuation.md)
		t.Helper()
		m, _, _ := f.svc.store.GetStopMessage(sid)
		m.Used++
		if err := f.svc.store.PutStopMessage(sid, m); err != nil {
			t.Fatal(err)
		}
	}

	prep(f, "r1", clockAt(0), stopAt(0))
	check(f, 1, 0)
	useStop(f)
	prep(f, "r2", clockAt(0), stopAt(0)) // the history resent by a later request
	prep(f, "r2", clockAt(0), stopAt(0)) // the same request retried
	check(f, 1, 1)

	if err := f.svc.Close(); err != nil {
		t.Fatal(err)
	}
	g := openFixture(t, dir, clk)
	prep(g, "r3", clockAt(0), stopAt(0))
	check(g, 1, 1)

	// Typed again in a new turn: applied again.
	prep(g, "r4", clockAt(2), stopAt(2))
	check(g, 2, 0)
	prep(g, "r5", clockAt(2), stopAt(2))
	check(g, 2, 0)

	// Other arguments at the same position are another directive.
	other := clockAt(2)
	other.Clock.Task = "stretch again"
	prep(g, "r6", other)
	check(g, 3, 0)

	// Responses with previous_response_id: positions count from that
	// response, so the same position after another response is new.
	g.prepare(t, hostapi.PrepareRequest{RequestID: "r7", SessionID: sid, PreviousResponseID: "resp_1", Directives: []hostapi.HostDirective{clockAt(0)}})
	g.prepare(t, hostapi.PrepareRequest{RequestID: "r8", SessionID: sid, PreviousResponseID: "resp_1", Directives: []hostapi.HostDirective{clockAt(0)}})
	check(g, 4, 0)
	g.prepare(t, hostapi.PrepareRequest{RequestID: "r9", SessionID: sid, PreviousResponseID: "resp_2", Directives: []hostapi.HostDirective{clockAt(0)}})
	check(g, 5, 0)

	m := scrape(t, g)
	if got := m[`chime_directive_duplicates_total{kind="clock"}`]; got != 3 { // r3, r5, r8: counted since the restart
		t.Errorf("clock duplicates = %v, want 3", got)
	}
	if got := m[`chime_directive_errors_total{kind="clock"}`]; got != 0 {
		t.Errorf("a duplicate counted as an error: %v", got)
	}
}

// TestDirectiveOnceIsPerSession: another session's digests never block a
// directive, whatever the session ids look like after sanitizing.
func TestDirectiveOnceIsPerSession(t *testing.T) {
	f := newFixture(t)
	d := hostapi.HostDirective{Kind: "clock", Clock: &llm.ClockItem{DueAt: t0.Add(time.Hour).Format(time.RFC3339), Task: "t"}}
	for _, sid := range []string{"a", "a/b", "ab", "A", "a/directives", "ünï"} {
		f.prepare(t, hostapi.PrepareRequest{RequestID: "r-" + sid, SessionID: sid, Directives: []hostapi.HostDirective{d}})
		if ts, _ := f.svc.store.ListTasks(sid); len(ts) != 1 {
			t.Errorf("session %q: %d tasks, want 1", sid, len(ts))
		}
	}
}

// TestFailedDirectiveIsNotRemembered: a directive that failed to apply was
// not applied, so a later copy is tried again (and fails again) rather
// than refused as a duplicate.
func TestFailedDirectiveIsNotRemembered(t *testing.T) {
	f := newFixture(t)
	const sid = "sess-fail"
	bad := hostapi.HostDirective{Kind: "clock", Clock: &llm.ClockItem{DueAt: "soon", Task: "t"}}
	for _, id := range []string{"f1", "f2"} {
		f.prepare(t, hostapi.PrepareRequest{RequestID: id, SessionID: sid, Directives: []hostapi.HostDirective{bad}})
	}
	m := scrape(t, f)
	if m[`chime_directive_errors_total{kind="clock"}`] != 2 || m[`chime_directive_duplicates_total{kind="clock"}`] != 0 {
		t.Errorf("errors %v, duplicates %v; want 2, 0", m[`chime_directive_errors_total{kind="clock"}`], m[`chime_directive_duplicates_total{kind="clock"}`])
	}
	if ds, err := f.svc.store.DirectiveDigests(sid); err != nil || len(ds) != 0 {
		t.Errorf("digests kept for a failed directive: %v %v", ds, err)
	}
}
