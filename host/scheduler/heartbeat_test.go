package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/storage"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestActiveHoursWindows(t *testing.T) {
	paris := mustZone(t, "Europe/Paris")
	cases := []struct {
		name   string
		ah     storage.ActiveHours
		at     time.Time
		inside bool
	}{
		{"day inside", storage.ActiveHours{Start: "09:00", End: "17:00", Timezone: "Europe/Paris"}, time.Date(2026, 6, 1, 9, 0, 0, 0, paris), true},
		{"day end excluded", storage.ActiveHours{Start: "09:00", End: "17:00", Timezone: "Europe/Paris"}, time.Date(2026, 6, 1, 17, 0, 0, 0, paris), false},
		{"day zone matters", storage.ActiveHours{Start: "09:00", End: "17:00", Timezone: "Europe/Paris"}, time.Date(2026, 6, 1, 16, 30, 0, 0, time.UTC), false},
		{"overnight late", storage.ActiveHours{Start: "22:00", End: "06:00", Timezone: "Europe/Paris"}, time.Date(2026, 6, 1, 23, 59, 0, 0, paris), true},
		{"overnight early", storage.ActiveHours{Start: "22:00", End: "06:00", Timezone: "Europe/Paris"}, time.Date(2026, 6, 2, 5, 59, 0, 0, paris), true},
		{"overnight midday", storage.ActiveHours{Start: "22:00", End: "06:00", Timezone: "Europe/Paris"}, time.Date(2026, 6, 2, 12, 0, 0, 0, paris), false},
		{"to 24:00", storage.ActiveHours{Start: "20:00", End: "24:00"}, time.Date(2026, 6, 2, 23, 59, 0, 0, time.UTC), true},
		{"all day", storage.ActiveHours{Start: "08:00", End: "08:00"}, time.Date(2026, 6, 2, 3, 0, 0, 0, time.UTC), true},
		// 29 March 2026: Paris jumps from 02:00 to 03:00. 00:30 UTC is 01:30
		// CET (inside 01:00–02:30); 01:15 UTC is 03:15 CEST (outside).
		{"dst spring before", storage.ActiveHours{Start: "01:00", End: "02:30", Timezone: "Europe/Paris"}, time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC), true},
		{"dst spring after", storage.ActiveHours{Start: "01:00", End: "02:30", Timezone: "Europe/Paris"}, time.Date(2026, 3, 29, 1, 15, 0, 0, time.UTC), false},
		// 25 October 2026: 02:00–03:00 happens twice; both are inside 02:00–03:00.
		{"dst fall first", storage.ActiveHours{Start: "02:00", End: "03:00", Timezone: "Europe/Paris"}, time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), true},
		{"dst fall second", storage.ActiveHours{Start: "02:00", End: "03:00", Timezone: "Europe/Paris"}, time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), true},
		{"overnight across NY dst", storage.ActiveHours{Start: "23:00", End: "01:00", Timezone: "America/New_York"}, time.Date(2026, 3, 8, 5, 30, 0, 0, time.UTC), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, err := ParseActiveHours(tc.ah)
			if err != nil {
				t.Fatal(err)
			}
			if got := w.Contains(tc.at); got != tc.inside {
				t.Fatalf("Contains(%v) = %v", tc.at, got)
			}
		})
	}
}

func TestActiveHoursErrorsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		ah   storage.ActiveHours
		want string
	}{
		{storage.ActiveHours{Start: "9", End: "17:00"}, "start"},
		{storage.ActiveHours{Start: "09:00", End: "25:00"}, "end"},
		{storage.ActiveHours{Start: "24:00", End: "08:00"}, "start"},
		{storage.ActiveHours{Start: "09:00", End: "17:60"}, "end"},
		{storage.ActiveHours{Start: "09:00", End: "17:00", Timezone: "Mars/Olympus"}, "timezone"},
	} {
		if _, err := ParseActiveHours(tc.ah); err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Fatalf("%+v: %v, want an error about %s", tc.ah, err, tc.want)
		}
	}
	h := DefaultHeartbeat()
	h.Every = 500 * time.Millisecond
	if err := h.Check(); err == nil || !strings.HasPrefix(err.Error(), "every") {
		t.Fatalf("every: %v", err)
	}
	h = DefaultHeartbeat()
	h.ActiveHours = storage.ActiveHours{Start: "x", End: "08:00"}
	if err := h.Check(); err == nil || !strings.HasPrefix(err.Error(), "activeHours.start") {
		t.Fatalf("activeHours: %v", err)
	}
}

func TestMergeKeepsDefaults(t *testing.T) {
	h := Merge(DefaultHeartbeat(), storage.Heartbeat{Enabled: true, EveryMs: 2000})
	if !h.Enabled || h.Every != 2*time.Second || h.Prompt != DefaultPrompt || h.AckToken != DefaultAckToken || h.AckMaxChars != DefaultAckMaxChars {
		t.Fatalf("%+v", h)
	}
}

func FuzzParseActiveHours(f *testing.F) {
	f.Add("09:00", "17:00", "Europe/Paris")
	f.Add("22:00", "06:00", "local")
	f.Add("24:00", "", "")
	f.Fuzz(func(t *testing.T, start, end, tz string) {
		w, err := ParseActiveHours(storage.ActiveHours{Start: start, End: end, Timezone: tz})
		if err == nil {
			w.Contains(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
		}
	})
}
