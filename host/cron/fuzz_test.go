package cron

import (
	"errors"
	"testing"
	"time"
)

// FuzzNormalize feeds job specs from users (API bodies, CLI flags, the
// config file) to the parser: it must never panic, every refusal names a
// field, an accepted spec is stable when normalized again, and its next run
// is after now.
func FuzzNormalize(f *testing.F) {
	seeds := []struct{ kind, schedule, tz, target string }{
		{"", "5m", "", ""},
		{"every", "1s", "", "isolated"},
		{"every", "999ms", "", ""},
		{"every", "-5m", "", ""},
		{"every", "8784h1s", "", ""},
		{"at", "2026-12-24T18:00:00+01:00", "", ""},
		{"at", "2026-12-24 18:00Z", "", ""},
		{"at", "2026-12-24T18:00:00", "", ""},
		{"at", "2026-02-30T18:00:00Z", "", ""},
		{"", "2026-13-01", "", ""},
		{"cron", "0 9 * * 1-5", "Europe/Paris", ""},
		{"cron", "30 2 * * *", "America/New_York", "main"},
		{"cron", "*/15 * * * *", "", ""},
		{"cron", "0 0 31 2 *", "UTC", ""},
		{"cron", "0 9 L * *", "", ""},
		{"cron", "0 9 * * MON#2", "Asia/Tokyo", ""},
		{"cron", "H H * * *", "", ""},
		{"cron", "61 25 32 13 8", "", ""},
		{"cron", "CRON_TZ=Europe/Paris 0 9 * * *", "", ""},
		{"cron", "@hourly", "", ""},
		{"cron", "0 9 * * *", "../../etc/passwd", ""},
		{"cron", "0 9 * * *", "Local", ""},
		{"", "0 9 * *", "", ""},
		{"weekly", "0 9 * * *", "", ""},
		{"", "", "", ""},
		{"", "\xff\xfe", "", ""},
	}
	for _, s := range seeds {
		f.Add(s.kind, s.schedule, s.tz, s.target)
	}
	now := time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, kind, schedule, tz, target string) {
		sp, sched, err := Normalize(Spec{Session: "s", Kind: kind, Schedule: schedule, TZ: tz, Target: target, Text: "x"})
		if err != nil {
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Field == "" || fe.Msg == "" {
				t.Fatalf("refusal without a field: %v", err)
			}
			return
		}
		again, sched2, err := Normalize(sp)
		if err != nil || again != sp || sched2.Norm != sched.Norm {
			t.Fatalf("not stable: %+v → %+v (%v)", sp, again, err)
		}
		if n, ok := sched.Next(now, now); ok && !n.After(now) {
			t.Fatalf("%+v: next %s is not after %s", sp, n, now)
		}
	})
}
