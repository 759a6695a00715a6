package clock

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestNoticeIsReservedCommittedAndInjectedVerbatim(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	text := `[timer completed: "build" id=tmr_1 after 6s]`
	if err := f.e.AddNotice(ctx, "s1", "ntc_tmr_1", text, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	// Applied twice (a replayed completion): still one notice.
	if err := f.e.AddNotice(ctx, "s1", "ntc_tmr_1", "other text", f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	rs := f.reserve(t, "s1", "r1")
	if got := RenderReminders(rs); got != text {
		t.Fatalf("rendered %q, want the notice alone %q", got, text)
	}
	if _, err := f.e.Commit(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if rs := f.reserve(t, "s1", "r2"); len(rs) != 0 {
		t.Fatalf("a committed notice came again: %v", ids(rs))
	}
	// Another session never sees it.
	if rs := f.reserve(t, "s2", "r3"); len(rs) != 0 {
		t.Fatalf("notice leaked to another session: %v", ids(rs))
	}
}

func TestNoticeRolledBackComesAgain(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.e.AddNotice(ctx, "s1", "ntc_a", "[timer completed: a]", f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if len(f.reserve(t, "s1", "r1")) != 1 {
		t.Fatal("not reserved")
	}
	if _, err := f.e.Rollback(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if len(f.reserve(t, "s1", "r2")) != 1 {
		t.Fatal("a rolled-back notice was lost")
	}
}

func TestNoticeBesideTasksKeepsTheFooter(t *testing.T) {
	f := newFixture(t)
	f.schedule(t, "s1", "r0", item(iso(f.clock.Now().Add(30*time.Second)), "check the build"))
	if err := f.e.AddNotice(context.Background(), "s1", "ntc_a", "[timer completed: a]", f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	got := RenderReminders(f.reserve(t, "s1", "r1"))
	if !strings.Contains(got, "[timer completed: a]\n") || !strings.Contains(got, `[scheduled task:"check the build"]`) || !strings.HasSuffix(got, ReminderFooter) {
		t.Fatalf("rendered %q", got)
	}
}

func TestClockToolDoesNotSeeNotices(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxTasks = 1 })
	ctx := context.Background()
	if err := f.e.AddNotice(ctx, "s1", "ntc_a", "[timer completed: a]", f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if items := mustOK(t, f.call(t, "s1", "r1", args("list", "")))["items"].([]any); len(items) != 0 {
		t.Fatalf("list shows a notice: %v", items)
	}
	mustFail(t, f.call(t, "s1", "r1", args("cancel", "ntc_a")), "unknown taskId")
	mustFail(t, f.call(t, "s1", "r1", args("update", "ntc_a", item("", "x"))), "unknown taskId")
	// A notice does not count against the model's task cap.
	f.schedule(t, "s1", "r1", item(iso(f.clock.Now().Add(time.Hour)), "one task"))
	mustOK(t, f.call(t, "s1", "r1", args("clear", "")))
	if _, ok, _ := f.store.GetTask("s1", "ntc_a"); !ok {
		t.Fatal("clear removed a notice")
	}
}

func TestUndeliveredNoticeOutlivesTaskRetention(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if err := f.e.AddNotice(ctx, "s1", "ntc_a", "[timer completed: a]", f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(3 * time.Hour) // far past the 20-minute task retention
	if _, err := f.e.Sweep(ctx, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if len(f.reserve(t, "s1", "r1")) != 1 {
		t.Fatal("an undelivered notice expired with the task retention")
	}
	if _, err := f.e.Rollback(ctx, "r1"); err != nil {
		t.Fatal(err)
	}
	f.clock.Add(DefaultNoticeRetention)
	if _, err := f.e.Sweep(ctx, f.clock.Now()); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f.store.GetTask("s1", "ntc_a"); ok {
		t.Fatal("a notice older than NoticeRetention was kept")
	}
}

func TestAddNoticeRejectsBadInput(t *testing.T) {
	f := newFixture(t)
	if err := f.e.AddNotice(context.Background(), "", "ntc_a", "x", f.clock.Now()); err != ErrNoSession {
		t.Fatalf("no session: %v", err)
	}
	if err := f.e.AddNotice(context.Background(), "s1", "bad/id", "x", f.clock.Now()); err != ErrNoticeID {
		t.Fatalf("bad id: %v", err)
	}
}
