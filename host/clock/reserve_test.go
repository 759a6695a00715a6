package clock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestDueWindowAndExpiryBoundaries(t *testing.T) {
	f := newFixture(t)
	due := t0.Add(time.Hour)
	id := f.schedule(t, "s", "r0", item(iso(due), "x"))
	steps := []struct {
		at   time.Time
		want bool
	}{
		{due.Add(-61 * time.Second), false},
		{due.Add(-60 * time.Second), true}, // now >= dueAt - dueWindow
		{due.Add(20 * time.Minute), true},  // still within retention
		{due.Add(20*time.Minute + time.Millisecond), false},
	}
	for i, s := range steps {
		f.clock.Set(s.at)
		got := f.reserve(t, "s", fmt.Sprintf("r%d", i+1))
		if (len(got) == 1) != s.want {
			t.Fatalf("at %v: reserved %v, want %v", s.at.Sub(due), ids(got), s.want)
		}
		if s.want && got[0].TaskID != id {
			t.Fatalf("wrong task %v", got)
		}
		if _, err := f.e.Rollback(context.Background(), fmt.Sprintf("r%d", i+1)); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNotBeforeRequestID(t *testing.T) {
	f := newFixture(t)
	// Scheduled inside the due window: stamped with the scheduling request.
	inWindow := f.schedule(t, "s", "abc", item(iso(t0.Add(30*time.Second)), "soon"))
	// Outside the window: not stamped.
	outside := f.schedule(t, "s", "abc", item(iso(t0.Add(5*time.Minute)), "later"))
	if got := f.task(t, "s", inWindow).NotBeforeRequestID; got != "abc" {
		t.Fatalf("stamp = %q", got)
	}
	if got := f.task(t, "s", outside).NotBeforeRequestID; got != "" {
		t.Fatalf("outside-window task stamped %q", got)
	}
	for _, blocked := range []string{"abc", "abc:clock_followup", "abc:1:2"} {
		if rs := f.reserve(t, "s", blocked); len(rs) != 0 {
			t.Fatalf("%s got %v", blocked, ids(rs))
		}
	}
	// "abcd" merely shares a prefix without the colon: not blocked.
	if rs := f.reserve(t, "s", "abcd"); len(rs) != 1 || rs[0].TaskID != inWindow {
		t.Fatalf("abcd got %v", ids(rs))
	}
	if _, err := f.e.Rollback(context.Background(), "abcd"); err != nil {
		t.Fatal(err)
	}
	// When the unstamped task is due, the original request chain gets it.
	f.clock.Set(t0.Add(5 * time.Minute))
	rs := f.reserve(t, "s", "abc:clock_followup")
	if len(rs) != 1 || rs[0].TaskID != outside {
		t.Fatalf("chain should get the unstamped task only: %v", ids(rs))
	}
}

func TestReservationIsExclusiveAndTimesOut(t *testing.T) {
	f := newFixture(t)
	id := f.schedule(t, "s", "r0", item(iso(t0.Add(10*time.Minute)), "x"))
	f.clock.Set(t0.Add(10 * time.Minute))
	if got := ids(f.reserve(t, "s", "r1")); fmt.Sprint(got) != fmt.Sprint([]string{id}) {
		t.Fatalf("r1: %v", got)
	}
	// Idempotent for the same request.
	if got := f.reserve(t, "s", "r1"); len(got) != 1 {
		t.Fatalf("r1 again: %v", ids(got))
	}
	// Another in-flight request does not get it twice.
	if got := f.reserve(t, "s", "r2"); len(got) != 0 {
		t.Fatalf("r2 while r1 holds it: %v", ids(got))
	}
	// After the reservation TTL it is free again.
	f.clock.Add(DefaultReservationTTL)
	if got := f.reserve(t, "s", "r2"); len(got) != 1 {
		t.Fatalf("r2 after TTL: %v", ids(got))
	}
	// r1's late commit no longer owns the task; r2's does.
	if n, err := f.e.Commit(context.Background(), "r1"); n != 0 || err != nil {
		t.Fatalf("stale commit: %d %v", n, err)
	}
	if n, err := f.e.Commit(context.Background(), "r2"); n != 1 || err != nil {
		t.Fatalf("commit r2: %d %v", n, err)
	}
	if got := f.task(t, "s", id); got.DeliveryCount != 1 {
		t.Fatalf("delivered %d times", got.DeliveryCount)
	}
}

func TestCommitMarksDelivered(t *testing.T) {
	f := newFixture(t)
	id := f.schedule(t, "s", "r0", item(iso(t0.Add(time.Hour)), "x"))
	at := f.clock.Add(time.Hour)
	if got := f.reserve(t, "s", "r1"); len(got) != 1 {
		t.Fatal("not reserved")
	}
	f.clock.Add(2 * time.Second)
	n, err := f.e.Commit(context.Background(), "r1")
	if err != nil || n != 1 {
		t.Fatalf("commit: %d %v", n, err)
	}
	got := f.task(t, "s", id)
	if got.DeliveredAt != at.Add(2*time.Second).UnixMilli() || got.DeliveryCount != 1 || got.ReservedBy != "" {
		t.Fatalf("after commit: %+v", got)
	}
	if rs := f.reserve(t, "s", "r2"); len(rs) != 0 {
		t.Fatal("delivered task injected again")
	}
	item := mustOK(t, f.call(t, "s", "r3", args("list", "")))["items"].([]any)[0].(map[string]any)
	if item["deliveredAt"] != "2026-02-02T22:00:02Z" || item["deliveryCount"] != float64(1) {
		t.Fatalf("list after delivery: %v", item)
	}
	// Commit twice, or of an unknown request: nothing.
	if n, err := f.e.Commit(context.Background(), "r1"); n != 0 || err != nil {
		t.Fatalf("second commit: %d %v", n, err)
	}
	if n, err := f.e.Commit(context.Background(), "never-seen"); n != 0 || err != nil {
		t.Fatalf("unknown commit: %d %v", n, err)
	}
	if _, err := f.e.Reserve(context.Background(), "s", "", t0); !errors.Is(err, ErrNoRequestID) {
		t.Fatalf("empty request id: %v", err)
	}
}

func TestRollbackReleases(t *testing.T) {
	f := newFixture(t)
	id := f.schedule(t, "s", "r0", item(iso(t0.Add(time.Hour)), "x"))
	f.clock.Add(time.Hour)
	f.reserve(t, "s", "r1")
	n, err := f.e.Rollback(context.Background(), "r1")
	if err != nil || n != 1 {
		t.Fatalf("rollback: %d %v", n, err)
	}
	got := f.task(t, "s", id)
	if got.DeliveredAt != 0 || got.DeliveryCount != 0 || got.ReservedBy != "" {
		t.Fatalf("after rollback: %+v", got)
	}
	if rs := f.reserve(t, "s", "r2"); len(rs) != 1 {
		t.Fatal("rolled back task not available to the next request")
	}
	if n, _ := f.e.Commit(context.Background(), "r1"); n != 0 {
		t.Fatal("commit after rollback delivered")
	}
}

// Reservation state is on disk: a commit after a host restart still works.
func TestReservationSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	st := openDisk(t, dir)
	clk := newFakeClock(t0)
	f := newFixtureOn(t, st, clk)
	id := f.schedule(t, "s", "r0", item(iso(t0.Add(time.Hour)), "x"))
	clk.Add(time.Hour)
	f.reserve(t, "s", "r1")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st2 := openDisk(t, dir)
	f2 := newFixtureOn(t, st2, clk)
	if n, err := f2.e.Commit(context.Background(), "r1"); n != 1 || err != nil {
		t.Fatalf("commit after restart: %d %v", n, err)
	}
	if f2.task(t, "s", id).DeliveryCount != 1 {
		t.Fatal("not delivered")
	}
}

func TestRepeatRearmsOnCommitAndRespectsMaxRuns(t *testing.T) {
	f := newFixture(t)
	due := t0.Add(time.Hour)
	it := item(iso(due), "standup")
	it["repeat"], it["maxRuns"] = "daily", 2
	id := f.schedule(t, "s", "r0", it)

	f.clock.Set(due)
	f.reserve(t, "s", "r1")
	if n, _ := f.e.Commit(context.Background(), "r1"); n != 1 {
		t.Fatal("commit 1")
	}
	got := f.task(t, "s", id)
	if got.DueAt != due.Add(24*time.Hour).UnixMilli() || got.DeliveredAt != 0 || got.LastDeliveredAt != due.UnixMilli() || got.Runs != 1 || got.DeliveryCount != 1 {
		t.Fatalf("after first run: %+v", got)
	}
	if rs := f.reserve(t, "s", "r2"); len(rs) != 0 {
		t.Fatal("re-armed task due at once")
	}

	f.clock.Set(due.Add(24 * time.Hour))
	f.reserve(t, "s", "r3")
	if n, _ := f.e.Commit(context.Background(), "r3"); n != 1 {
		t.Fatal("commit 2")
	}
	got = f.task(t, "s", id)
	if got.Runs != 2 || got.DeliveredAt == 0 || got.DueAt != due.Add(24*time.Hour).UnixMilli() {
		t.Fatalf("maxRuns reached but re-armed: %+v", got)
	}
	if rs := f.reserve(t, "s", "r4"); len(rs) != 0 {
		t.Fatal("exhausted task injected")
	}
	// It expires like a delivered one-shot task.
	f.clock.Set(due.Add(24*time.Hour + DefaultRetention + time.Second))
	if n, err := f.e.Sweep(context.Background(), f.clock.Now()); n != 1 || err != nil {
		t.Fatalf("sweep exhausted: %d %v", n, err)
	}
}

// A re-armed occurrence that is already inside the due window is kept away
// from the committing request's chain.
func TestRearmStampsCommittingChain(t *testing.T) {
	f := newFixture(t)
	it := item(iso(t0.Add(time.Minute)), "tick")
	it["repeat"] = "every 1m"
	id := f.schedule(t, "s", "r0", it)
	f.clock.Set(t0.Add(90 * time.Second))
	f.reserve(t, "s", "req")
	if n, _ := f.e.Commit(context.Background(), "req"); n != 1 {
		t.Fatal("commit")
	}
	got := f.task(t, "s", id)
	if got.DueAt != t0.Add(2*time.Minute).UnixMilli() || got.NotBeforeRequestID != "req" {
		t.Fatalf("re-armed: %+v", got)
	}
	if rs := f.reserve(t, "s", "req:followup"); len(rs) != 0 {
		t.Fatal("followup got the next occurrence")
	}
	if rs := f.reserve(t, "s", "next"); len(rs) != 1 {
		t.Fatal("next request did not get the next occurrence")
	}
}

func TestRenderReminders(t *testing.T) {
	if RenderReminders(nil) != "" {
		t.Fatal("empty reminders must render nothing")
	}
	got := RenderReminders([]Reminder{
		{Task: "run the tests", Tool: "bash", Arguments: `{"cmd":"make test"}`},
		{Task: "say \"hi\"\nthen stop", Tool: "", Arguments: ""},
		{Task: "look", Tool: "browser", Arguments: "{}"},
		{Task: "args only", Arguments: `{"x":1}`},
	})
	want := `[scheduled task:"run the tests"] suggested tool: bash arguments: {"cmd":"make test"}` + "\n" +
		`[scheduled task:"say \"hi\"\nthen stop"]` + "\n" +
		`[scheduled task:"look"] suggested tool: browser` + "\n" +
		`[scheduled task:"args only"] suggested arguments: {"x":1}` + "\n" +
		"You may call tools to do these tasks."
	if got != want {
		t.Fatalf("render:\n%s\nwant:\n%s", got, want)
	}
}

func TestReserveReturnsReminderFields(t *testing.T) {
	f := newFixture(t)
	it := item("2026-02-02T14:00:00-08:00", "check")
	it["tool"], it["arguments"] = "bash", `{"cmd":"ls"}`
	f.schedule(t, "s", "r0", it)
	f.clock.Set(t0.Add(time.Hour))
	rs := f.reserve(t, "s", "r1")
	if len(rs) != 1 {
		t.Fatal("not reserved")
	}
	r := rs[0]
	if r.Task != "check" || r.Tool != "bash" || r.Arguments != `{"cmd":"ls"}` || r.SessionID != "s" || r.DueAt.Format(time.RFC3339) != "2026-02-02T14:00:00-08:00" {
		t.Fatalf("reminder: %+v", r)
	}
}
