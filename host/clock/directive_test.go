package clock

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

func TestDirectives(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	out, err := f.e.ScheduleFromDirective(ctx, "s", "r", `{"dueAt":"2026-02-02T22:00:00Z","task":"from user"}`)
	if err != nil || len(out) != 1 || out[0].Task != "from user" || out[0].DueAt != "2026-02-02T22:00:00Z" {
		t.Fatalf("directive: %v %v", out, err)
	}
	out, err = f.e.ScheduleFromDirective(ctx, "s", "r", `[{"dueAt":"2026-02-02T23:00:00Z","task":"a"},{"dueAt":"2026-02-03T00:00:00Z","task":"b","repeat":"daily"}]`)
	if err != nil || len(out) != 2 {
		t.Fatalf("array directive: %v %v", out, err)
	}
	for payload, want := range map[string]string{
		`{"dueAt":"2026-02-02T22:00:00","task":"x"}`: "no UTC offset",
		`{"dueAt":"2026-02-02T22:00:00Z"}`:           "task is empty",
		`not json`:                                   "not a JSON object",
		`[1]`:                                        "not a JSON array",
	} {
		_, err := f.e.ScheduleFromDirective(ctx, "s", "r", payload)
		if err == nil || !strings.Contains(err.Error(), want) || IsStorageFailure(err) {
			t.Fatalf("%s: %v", payload, err)
		}
	}
	if _, err := f.e.ScheduleFromDirective(ctx, "", "r", `{"dueAt":"2026-02-02T22:00:00Z","task":"x"}`); err == nil {
		t.Fatal("directive without session")
	}
	n, err := f.e.ApplyClear(ctx, "s")
	if err != nil || n != 3 {
		t.Fatalf("clear directive: %d %v", n, err)
	}
}

// clock:clear is written through: after close and reopen the tasks are gone.
func TestApplyClearIsDurable(t *testing.T) {
	dir := t.TempDir()
	clk := newFakeClock(t0)
	st := openDisk(t, dir)
	f := newFixtureOn(t, st, clk)
	f.schedule(t, "s", "r", item(iso(t0.Add(time.Hour)), "x"))
	if n, err := f.e.ApplyClear(context.Background(), "s"); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	st.Close()
	st2 := openDisk(t, dir)
	if ts, err := st2.ListTasks("s"); len(ts) != 0 || err != nil {
		t.Fatalf("after reopen: %v %v", ts, err)
	}
}

// ApplyDirective routes each clock directive kind and refuses the others.
func TestApplyDirective(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	d := hostapi.HostDirective{Kind: hostapi.DirectiveClock, Clock: &llm.ClockItem{DueAt: "2026-02-02T22:00:00Z", Task: "stand up", Arguments: `{"a": 1}`}}
	if err := f.e.ApplyDirective(ctx, "s", "r", d); err != nil {
		t.Fatal(err)
	}
	ts, err := f.store.ListTasks("s")
	if err != nil || len(ts) != 1 || ts[0].Task != "stand up" || ts[0].Arguments != `{"a":1}` {
		t.Fatalf("scheduled: %+v %v", ts, err)
	}
	for _, bad := range []hostapi.HostDirective{
		{Kind: hostapi.DirectiveClock},
		{Kind: hostapi.DirectiveClock, Clock: &llm.ClockItem{DueAt: "tomorrow-ish", Task: "x"}},
		{Kind: hostapi.DirectiveStopMessage, Text: "x"},
	} {
		if err := f.e.ApplyDirective(ctx, "s", "r", bad); err == nil {
			t.Errorf("%+v applied", bad)
		}
	}
	if err := f.e.ApplyDirective(ctx, "s", "r", hostapi.HostDirective{Kind: hostapi.DirectiveClockClear}); err != nil {
		t.Fatal(err)
	}
	if ts, _ = f.store.ListTasks("s"); len(ts) != 0 {
		t.Fatalf("clock:clear left %d tasks", len(ts))
	}
}
