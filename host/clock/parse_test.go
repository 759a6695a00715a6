package clock

import (
	"context"
	"strings"
	"testing"
	"time"
)

func TestParseDueAt(t *testing.T) {
	good := map[string]string{ // input → instant in UTC
		"2026-01-21T20:30:00-08:00":     "2026-01-22T04:30:00Z",
		"2026-01-21T20:30:00.250+01:00": "2026-01-21T19:30:00.25Z",
		"2026-01-21T20:30Z":             "2026-01-21T20:30:00Z",
		" 2026-01-21 20:30:00+05:30 ":   "2026-01-21T15:00:00Z",
	}
	for in, want := range good {
		got, err := parseDueAt(in)
		if err != nil {
			t.Fatalf("%q: %v", in, err)
		}
		if got.UTC().Format(time.RFC3339Nano) != want {
			t.Fatalf("%q → %v, want %s", in, got.UTC(), want)
		}
	}
	if got, _ := parseDueAt("2026-01-21T20:30:00-08:00"); got.Format(time.RFC3339) != "2026-01-21T20:30:00-08:00" {
		t.Fatalf("offset not kept: %v", got)
	}
	bad := map[string]string{
		"":                    "empty",
		"2026-01-21T20:30:00": "no UTC offset",
		"2026-01-21":          "not an ISO8601",
		"1737520200":          "not an ISO8601",
		"next tuesday":        "not an ISO8601",
	}
	for in, want := range bad {
		if _, err := parseDueAt(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("%q: %v (want %q)", in, err, want)
		}
	}
}

func TestRecurrences(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	next := func(spec string, due, after time.Time) time.Time {
		t.Helper()
		_, rec, err := parseRepeat(spec, t0)
		if err != nil || rec == nil {
			t.Fatalf("%q: %v", spec, err)
		}
		n, ok := rec.nextAfter(due, after)
		if !ok {
			t.Fatalf("%q: no next", spec)
		}
		return n
	}
	// daily keeps 09:00 local across the 2026-03-08 DST change.
	due := time.Date(2026, 3, 7, 9, 0, 0, 0, la)
	if n := next("daily", due, due); n.Format(time.RFC3339) != "2026-03-08T09:00:00-07:00" {
		t.Fatalf("daily across DST: %v", n)
	}
	// With only a fixed offset it is exactly 24h.
	fixed := time.Date(2026, 3, 7, 9, 0, 0, 0, time.FixedZone("", -8*3600))
	if n := next("daily", fixed, fixed); n.Sub(fixed) != 24*time.Hour {
		t.Fatalf("fixed daily: %v", n)
	}
	// Missed occurrences are skipped, not replayed.
	if n := next("weekly", due, due.AddDate(0, 0, 20)); n.Format("2006-01-02T15:04") != "2026-03-28T09:00" {
		t.Fatalf("weekly skip: %v", n)
	}
	if n := next("every 1h", t0, t0.Add(5*time.Hour)); !n.Equal(t0.Add(6 * time.Hour)) {
		t.Fatalf("every skip: %v", n)
	}
	if n := next("every 90m", t0, t0); !n.Equal(t0.Add(90 * time.Minute)) {
		t.Fatalf("every: %v", n)
	}
	if n := next("every 2d", t0, t0); !n.Equal(t0.Add(48 * time.Hour)) {
		t.Fatalf("every days: %v", n)
	}
	// cron in the task's zone: weekdays 09:00 LA. 2026-03-06 is a Friday.
	fri := time.Date(2026, 3, 6, 9, 0, 0, 0, la)
	if n := next("0 9 * * 1-5", fri, fri); n.Format(time.RFC3339) != "2026-03-09T09:00:00-07:00" {
		t.Fatalf("cron: %v", n)
	}
	if n := next("CRON_TZ=UTC 30 14 * * *", t0, t0); n.UTC().Format(time.RFC3339) != "2026-02-03T14:30:00Z" {
		t.Fatalf("cron with CRON_TZ: %v", n)
	}

	for spec, norm := range map[string]string{"": "", "once": "", " Daily ": "daily", "every   30m": "every 30m", "0  9 * * *": "0 9 * * *"} {
		got, _, err := parseRepeat(spec, t0)
		if err != nil || got != norm {
			t.Fatalf("%q → %q %v, want %q", spec, got, err, norm)
		}
	}
	for _, bad := range []string{"hourly", "every", "every 0m", "every -5m", "every 1d2", "* * * *", "0 9 * * * *", "0 9 31 2 *", "0 25 * * *"} {
		if _, _, err := parseRepeat(bad, t0); err == nil {
			t.Fatalf("%q accepted", bad)
		}
	}
}

// An IANA zone from the request context drives DST-correct repeats; a dueAt
// written with a different offset falls back to that fixed offset.
func TestTaskZoneFromContext(t *testing.T) {
	la, _ := time.LoadLocation("America/Los_Angeles")
	f := newFixture(t)
	ctx := WithLocation(context.Background(), la)
	it := item("2026-03-07T09:00:00-08:00", "standup")
	it["repeat"] = "daily"
	r := mustOK(t, f.callCtx(t, ctx, "s", "r", args("schedule", "", it)))
	id := r["scheduled"].([]any)[0].(map[string]any)["taskId"].(string)
	if got := f.task(t, "s", id); got.TimeZone != "America/Los_Angeles" {
		t.Fatalf("zone: %+v", got)
	}
	f.clock.Set(time.Date(2026, 3, 7, 9, 0, 0, 0, la))
	f.reserve(t, "s", "q")
	f.e.Commit(context.Background(), "q")
	if got := f.e.dueTime(f.task(t, "s", id)); got.Format(time.RFC3339) != "2026-03-08T09:00:00-07:00" {
		t.Fatalf("re-armed to %v", got)
	}

	other := item("2026-03-07T09:00:00+02:00", "elsewhere")
	other["repeat"] = "daily"
	r = mustOK(t, f.callCtx(t, ctx, "s", "r", args("schedule", "", other)))
	id = r["scheduled"].([]any)[0].(map[string]any)["taskId"].(string)
	if got := f.task(t, "s", id); got.TimeZone != "" || got.UTCOffsetSec != 7200 {
		t.Fatalf("mismatched offset should keep the fixed zone: %+v", got)
	}
}

func FuzzParseDueAt(f *testing.F) {
	for _, s := range []string{"2026-01-21T20:30:00-08:00", "2026-01-21T20:30Z", "2026-01-21 20:30:00.5+05:30", "2026-13-01T00:00:00Z", "", "x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseDueAt(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		// Whatever parses round-trips through RFC3339 to the same instant.
		back, err := time.Parse(time.RFC3339Nano, got.Format(time.RFC3339Nano))
		if err != nil || !back.Equal(got) {
			t.Fatalf("%q → %v does not round-trip (%v)", s, got, err)
		}
	})
}

func FuzzParseRepeat(f *testing.F) {
	for _, s := range []string{"", "daily", "weekly", "every 5m", "every 3d", "*/15 * * * *", "0 9 * * 1-5", "CRON_TZ=Asia/Tokyo 0 9 * * *", "@daily", "every 1e9h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		norm, rec, err := parseRepeat(s, t0)
		if err != nil {
			return
		}
		if (norm == "") != (rec == nil) {
			t.Fatalf("%q: norm %q with rec %v", s, norm, rec)
		}
		if rec == nil {
			return
		}
		// The normalized text parses to the same kind of schedule.
		if again, _, err := parseRepeat(norm, t0); err != nil || again != norm {
			t.Fatalf("%q: normalized %q does not re-parse (%q, %v)", s, norm, again, err)
		}
		if n, ok := rec.nextAfter(t0, t0); ok && !n.After(t0) {
			t.Fatalf("%q: next %v not after %v", s, n, t0)
		}
	})
}
