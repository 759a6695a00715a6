package cron

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
)

// fires lists the runs of a schedule from `from` (exclusive) up to `to`,
// each as the next after the previous one, as the manager chains them.
func fires(t *testing.T, s Schedule, from, to time.Time) []time.Time {
	t.Helper()
	var out []time.Time
	now := from
	for range 20000 {
		n, ok := s.Next(now, from)
		if !ok || n.After(to) {
			return out
		}
		if !n.After(now) {
			t.Fatalf("next %s is not after %s", n, now)
		}
		out = append(out, n)
		now = n
	}
	t.Fatal("too many runs")
	return nil
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func wantFires(t *testing.T, got []time.Time, want ...string) {
	t.Helper()
	var g []string
	for _, x := range got {
		g = append(g, x.UTC().Format(time.RFC3339))
	}
	if strings.Join(g, " ") != strings.Join(want, " ") {
		t.Fatalf("runs\n got %v\nwant %v", g, want)
	}
}

func TestCronNextAcrossDST(t *testing.T) {
	cases := []struct {
		name, zone, expr string
		from, to         string
		want             []string
	}{
		{
			// 2026-03-29: Paris skips 02:00-03:00. The 02:30 run of that day
			// happens once, right after the gap (03:00 CEST = 01:00Z).
			name: "paris spring forward 02:30", zone: "Europe/Paris", expr: "30 2 * * *",
			from: "2026-03-27T12:00:00Z", to: "2026-03-31T12:00:00Z",
			want: []string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"},
		},
		{
			// 2026-10-25: Paris repeats 02:00-03:00; the 02:30 run happens once.
			name: "paris fall back 02:30", zone: "Europe/Paris", expr: "30 2 * * *",
			from: "2026-10-23T12:00:00Z", to: "2026-10-27T12:00:00Z",
			want: []string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z"},
		},
		{
			// 09:00 wall time stays 09:00 when the offset changes.
			name: "paris 09:00 across spring", zone: "Europe/Paris", expr: "0 9 * * *",
			from: "2026-03-28T00:00:00Z", to: "2026-03-30T23:00:00Z",
			want: []string{"2026-03-28T08:00:00Z", "2026-03-29T07:00:00Z", "2026-03-30T07:00:00Z"},
		},
		{
			// 2026-03-08: New York skips 02:00-03:00.
			name: "new york spring forward 02:30", zone: "America/New_York", expr: "30 2 * * *",
			from: "2026-03-06T20:00:00Z", to: "2026-03-10T12:00:00Z",
			want: []string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"},
		},
		{
			// 2026-11-01: New York repeats 01:00-02:00; 01:30 fires once
			// (01:30 EDT = 05:30Z), not again at 01:30 EST (06:30Z).
			name: "new york fall back 01:30", zone: "America/New_York", expr: "30 1 * * *",
			from: "2026-10-30T20:00:00Z", to: "2026-11-02T12:00:00Z",
			want: []string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"},
		},
		{
			// A job with a wildcard hour runs on elapsed hours (crontab's
			// rule): both 01:15s of the repeated hour.
			name: "new york hourly at :15 across fall back", zone: "America/New_York", expr: "15 * * * *",
			from: "2026-11-01T04:00:00Z", to: "2026-11-01T08:00:00Z",
			want: []string{"2026-11-01T04:15:00Z", "2026-11-01T05:15:00Z", "2026-11-01T06:15:00Z", "2026-11-01T07:15:00Z"},
		},
		{
			// ... and has no 02:30 on the skipped day, nor a doubled 03:30.
			name: "new york hourly at :30 across spring forward", zone: "America/New_York", expr: "30 * * * *",
			from: "2026-03-08T05:00:00Z", to: "2026-03-08T09:00:00Z",
			want: []string{"2026-03-08T05:30:00Z", "2026-03-08T06:30:00Z", "2026-03-08T07:30:00Z", "2026-03-08T08:30:00Z"},
		},
		{
			// A yearly job on a spring-forward day, computed from a date with
			// the same offset (the year's fall-back lies in between).
			name: "paris yearly on the skipped day", zone: "Europe/Paris", expr: "30 2 29 3 *",
			from: "2025-04-01T00:00:00Z", to: "2027-04-01T00:00:00Z",
			want: []string{"2026-03-29T01:00:00Z", "2027-03-29T00:30:00Z"},
		},
		{
			// A fixed-hour job every 20 minutes in the skipped hour runs once
			// after the gap, then its later times as usual.
			name: "paris every 20 minutes of 02h on the skipped day", zone: "Europe/Paris", expr: "*/20 2 * * *",
			from: "2026-03-28T23:00:00Z", to: "2026-03-29T23:00:00Z",
			want: []string{"2026-03-29T01:00:00Z"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := ParseSchedule(KindCron, c.expr, c.zone)
			if err != nil {
				t.Fatal(err)
			}
			wantFires(t, fires(t, s, utc(c.from), utc(c.to)), c.want...)
		})
	}
}

func TestEveryGridAndAt(t *testing.T) {
	s, err := ParseSchedule("", "90s", "")
	if err != nil || s.Kind != KindEvery {
		t.Fatalf("kind %q err %v", s.Kind, err)
	}
	anchor := utc("2026-11-23T10:00:00Z")
	// From the anchor: one interval later.
	if n, _ := s.Next(anchor, anchor); !n.Equal(anchor.Add(90 * time.Second)) {
		t.Fatalf("first run %s", n)
	}
	// Late by 10 minutes: the next grid point, not a replay of the missed ones.
	now := anchor.Add(10*time.Minute + 5*time.Second)
	if n, _ := s.Next(now, anchor); !n.Equal(anchor.Add(7 * 90 * time.Second)) {
		t.Fatalf("after a gap: %s", n)
	}
	at, err := ParseSchedule("", "2026-12-24T18:00:00+01:00", "")
	if err != nil || at.Kind != KindAt {
		t.Fatalf("kind %q err %v", at.Kind, err)
	}
	if n, ok := at.Next(anchor, anchor); !ok || !n.Equal(utc("2026-12-24T17:00:00Z")) {
		t.Fatalf("at: %s %v", n, ok)
	}
	if _, ok := at.Next(utc("2026-12-24T17:00:00Z"), anchor); ok {
		t.Fatal("an at time has no run at or after itself")
	}
}

func TestBackoffSequence(t *testing.T) {
	want := []time.Duration{0, 30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, time.Hour, time.Hour}
	for i, w := range want {
		if got := Backoff(i); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i, got, w)
		}
	}
	if Backoff(1<<30) != time.Hour {
		t.Error("a huge count stays at 60m")
	}
}

func TestNormalizeNamesTheField(t *testing.T) {
	ok := Spec{Session: "s", Schedule: "5m", Text: "hi"}
	cases := []struct {
		mod   func(*Spec)
		field string
		frag  string
	}{
		{func(s *Spec) { s.Session = " " }, "session", "empty"},
		{func(s *Spec) { s.Text = "" }, "text", "empty"},
		{func(s *Spec) { s.Text = strings.Repeat("é", MaxTextChars+1) }, "text", "at most"},
		{func(s *Spec) { s.Name = strings.Repeat("n", MaxNameLen+1) }, "name", "at most"},
		{func(s *Spec) { s.Target = "side" }, "target", "main or isolated"},
		{func(s *Spec) { s.Kind = "weekly" }, "kind", "at, every or cron"},
		{func(s *Spec) { s.Schedule = "" }, "schedule", "empty"},
		{func(s *Spec) { s.Schedule = "soon" }, "schedule", "neither"},
		{func(s *Spec) { s.Kind, s.Schedule = KindEvery, "500ms" }, "schedule", "minimum"},
		{func(s *Spec) { s.Kind, s.Schedule = KindEvery, "ten" }, "schedule", "not a duration"},
		{func(s *Spec) { s.Kind, s.Schedule = KindAt, "2026-12-24T18:00:00" }, "schedule", "no UTC offset"},
		{func(s *Spec) { s.Kind, s.Schedule = KindAt, "tomorrow" }, "schedule", "ISO 8601"},
		{func(s *Spec) { s.Kind, s.Schedule = KindCron, "0 9 * *" }, "schedule", "4 fields"},
		{func(s *Spec) { s.Kind, s.Schedule = KindCron, "61 9 * * *" }, "schedule", "61"},
		{func(s *Spec) { s.Kind, s.Schedule = KindCron, "CRON_TZ=UTC 0 9 * * *" }, "schedule", "tz"},
		{func(s *Spec) { s.Kind, s.Schedule = KindCron, "@daily" }, "schedule", "descriptors"},
		{func(s *Spec) { s.Kind, s.Schedule, s.TZ = KindCron, "0 9 * * *", "Mars/Olympus" }, "tz", "IANA"},
		{func(s *Spec) { s.Kind, s.Schedule, s.TZ = KindCron, "0 9 * * *", "Local" }, "tz", "Local"},
		{func(s *Spec) { s.TZ = "Europe/Paris" }, "tz", "cron schedules only"},
	}
	for _, c := range cases {
		sp := ok
		c.mod(&sp)
		_, _, err := Normalize(sp)
		var fe *FieldError
		if !errors.As(err, &fe) {
			t.Errorf("%+v: want a FieldError, got %v", sp, err)
			continue
		}
		if fe.Field != c.field || !strings.Contains(err.Error(), c.frag) {
			t.Errorf("%+v: got %q (field %s), want field %s mentioning %q", sp.Schedule, err, fe.Field, c.field, c.frag)
		}
	}
	got, _, err := Normalize(Spec{Session: "s", Schedule: " 0  9 * * 1-5 ", TZ: "Europe/Paris", Text: "standup", Target: "ISOLATED"})
	if err != nil {
		t.Fatal(err)
	}
	if got.Kind != KindCron || got.Schedule != "0 9 * * 1-5" || got.Target != TargetIsolated || got.TZ != "Europe/Paris" {
		t.Fatalf("normalized %+v", got)
	}
	got, _, _ = Normalize(Spec{Session: "s", Kind: "cron", Schedule: "0 9 * * *", Text: "x"})
	if got.TZ != "UTC" || got.Target != TargetMain {
		t.Fatalf("defaults %+v", got)
	}
}

func TestCronDayOfMonthOrDayOfWeek(t *testing.T) {
	// Crontab rule: with both restricted, either matches.
	s, err := ParseSchedule(KindCron, "0 9 1 * 1", "UTC")
	if err != nil {
		t.Fatal(err)
	}
	// 2026-06-01 is a Monday; 2026-06-08 a Monday; 2026-07-01 a Wednesday.
	wantFires(t, fires(t, s, utc("2026-06-01T10:00:00Z"), utc("2026-07-01T12:00:00Z")),
		"2026-06-08T09:00:00Z", "2026-06-15T09:00:00Z", "2026-06-22T09:00:00Z", "2026-06-29T09:00:00Z", "2026-07-01T09:00:00Z")
}

// TestDailyJobsRunOnceEveryDay: over two years in zones with DST of one
// hour, half an hour (Lord Howe) and midnight transitions (Santiago,
// Havana), a daily fixed-time job runs exactly once on every calendar day
// of its zone, at its wall time or right after a gap that swallowed it.
func TestDailyJobsRunOnceEveryDay(t *testing.T) {
	zones := []string{"Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago", "America/Havana", "Asia/Tehran", "Pacific/Auckland"}
	times := []struct{ h, m int }{{0, 0}, {0, 30}, {1, 30}, {2, 0}, {2, 30}, {3, 0}, {23, 59}}
	from := utc("2025-01-01T00:00:00Z")
	to := utc("2027-01-01T00:00:00Z")
	for _, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		for _, hm := range times {
			expr := strconv.Itoa(hm.m) + " " + strconv.Itoa(hm.h) + " * * *"
			s, err := ParseSchedule(KindCron, expr, z)
			if err != nil {
				t.Fatal(err)
			}
			perDay := map[string]int{}
			for _, f := range fires(t, s, from, to) {
				w := f.In(loc)
				day := w.Format("2006-01-02")
				perDay[day]++
				if w.Hour() != hm.h || w.Minute() != hm.m {
					// Only a gap may move a run, and only to the gap's end.
					_, off := w.Zone()
					_, before := f.Add(-time.Second).In(loc).Zone()
					if before >= off {
						t.Errorf("%s %q: run at %s is neither its wall time nor the end of a gap", z, expr, w)
					}
				}
			}
			for d := from.In(loc).AddDate(0, 0, 1); d.Before(to.In(loc).AddDate(0, 0, -1)); d = d.AddDate(0, 0, 1) {
				if n := perDay[d.Format("2006-01-02")]; n != 1 {
					t.Errorf("%s %q: %d runs on %s", z, expr, n, d.Format("2006-01-02"))
				}
			}
		}
	}
}

// TestHourlyJobsFollowElapsedTime: a job with a wildcard hour runs at its
// minute of every hour that exists, so consecutive runs are an hour apart,
// or the length of a clock change more or less.
func TestHourlyJobsFollowElapsedTime(t *testing.T) {
	for _, z := range []string{"Europe/Paris", "America/New_York", "Australia/Lord_Howe", "America/Santiago"} {
		loc, _ := time.LoadLocation(z)
		s, err := ParseSchedule(KindCron, "15 * * * *", z)
		if err != nil {
			t.Fatal(err)
		}
		runs := fires(t, s, utc("2026-01-01T00:00:00Z"), utc("2026-12-31T00:00:00Z"))
		if len(runs) < 364*24-2 { // a skipped hour without a repeated one (Lord Howe repeats only 30 min)
			t.Fatalf("%s: %d runs", z, len(runs))
		}
		for i, r := range runs {
			if r.In(loc).Minute() != 15 {
				t.Fatalf("%s: run at %s", z, r.In(loc))
			}
			if i > 0 {
				if d := r.Sub(runs[i-1]); d != time.Hour && (d < 30*time.Minute || d > 2*time.Hour) {
					t.Fatalf("%s: %s between %s and %s", z, d, runs[i-1].In(loc), r.In(loc))
				}
			}
		}
	}
}
