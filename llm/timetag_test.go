package llm

import (
	"errors"
	"regexp"
	"strconv"
	"testing"
	"time"
	_ "time/tzdata" // the same zone data chime.wasm embeds, whatever the machine has
)

func mustZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := LoadTimezone(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func TestFormatTimeTagExactBytes(t *testing.T) {
	// The docs/time.md#time-tag instant: 21:22:38.229Z is 13:22:38.229 in Los
	// Angeles (PST). The wall clock is 12 ms ahead of NTP time.
	wall := time.Date(2026, 2, 2, 21, 22, 38, 241_000_000, time.UTC)
	got := FormatTimeTag(wall, mustZone(t, "America/Los_Angeles"), -12)
	want := "[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 13:22:38.229 -08:00` " +
		"tz=`America/Los_Angeles` nowMs=`1770067358229` ntpOffsetMs=`-12`"
	if got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

func TestFormatTimeTagZonesAndOffsets(t *testing.T) {
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		name   string
		wall   string
		zone   string
		offset int64
		want   string
	}{
		{"spring forward, last PST ms", "2026-03-08T09:59:59.999Z", "America/Los_Angeles", 0,
			"utc=`2026-03-08T09:59:59.999Z` local=`2026-03-08 01:59:59.999 -08:00` tz=`America/Los_Angeles` nowMs=`1772963999999` ntpOffsetMs=`0`"},
		{"spring forward, first PDT ms", "2026-03-08T10:00:00Z", "America/Los_Angeles", 0,
			"utc=`2026-03-08T10:00:00.000Z` local=`2026-03-08 03:00:00.000 -07:00` tz=`America/Los_Angeles` nowMs=`1772964000000` ntpOffsetMs=`0`"},
		// The offset, not the wall clock, decides which side of the change.
		{"NTP offset crosses into PDT", "2026-03-08T09:59:59.990Z", "America/Los_Angeles", 10,
			"utc=`2026-03-08T10:00:00.000Z` local=`2026-03-08 03:00:00.000 -07:00` tz=`America/Los_Angeles` nowMs=`1772964000000` ntpOffsetMs=`10`"},
		{"fall back, last PDT ms", "2026-11-01T08:59:59.999Z", "America/Los_Angeles", 0,
			"utc=`2026-11-01T08:59:59.999Z` local=`2026-11-01 01:59:59.999 -07:00` tz=`America/Los_Angeles` nowMs=`1793523599999` ntpOffsetMs=`0`"},
		{"fall back, repeated hour in PST", "2026-11-01T09:00:00.001Z", "America/Los_Angeles", 0,
			"utc=`2026-11-01T09:00:00.001Z` local=`2026-11-01 01:00:00.001 -08:00` tz=`America/Los_Angeles` nowMs=`1793523600001` ntpOffsetMs=`0`"},
		{"southern DST (Sydney summer)", "2026-01-15T00:00:00Z", "Australia/Sydney", 0,
			"utc=`2026-01-15T00:00:00.000Z` local=`2026-01-15 11:00:00.000 +11:00` tz=`Australia/Sydney` nowMs=`1768435200000` ntpOffsetMs=`0`"},
		{"Kathmandu +05:45 crosses the date", "2026-02-02T21:22:38.229Z", "Asia/Kathmandu", 0,
			"utc=`2026-02-02T21:22:38.229Z` local=`2026-02-03 03:07:38.229 +05:45` tz=`Asia/Kathmandu` nowMs=`1770067358229` ntpOffsetMs=`0`"},
		{"St John's -03:30", "2026-02-02T21:22:38.229Z", "America/St_Johns", 0,
			"utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 17:52:38.229 -03:30` tz=`America/St_Johns` nowMs=`1770067358229` ntpOffsetMs=`0`"},
		{"negative offset crosses the year", "2026-01-01T00:00:00.500Z", "UTC", -1500,
			"utc=`2025-12-31T23:59:59.000Z` local=`2025-12-31 23:59:59.000 +00:00` tz=`UTC` nowMs=`1767225599000` ntpOffsetMs=`-1500`"},
		{"large positive offset", "2026-06-30T23:59:59.999Z", "Europe/Berlin", 3_600_001,
			"utc=`2026-07-01T01:00:00.000Z` local=`2026-07-01 03:00:00.000 +02:00` tz=`Europe/Berlin` nowMs=`1782867600000` ntpOffsetMs=`3600001`"},
	}
	for _, tc := range cases {
		got := FormatTimeTag(utc(tc.wall), mustZone(t, tc.zone), tc.offset)
		if got != TimeTagPrefix+tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, TimeTagPrefix+tc.want)
		}
	}
}

func TestFormatTimeTagNilZoneIsUTCAndSubMillisecondsTruncate(t *testing.T) {
	wall := time.Date(2026, 2, 2, 21, 22, 38, 229_999_999, time.FixedZone("X", 3600))
	want := "[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 21:22:38.229 +00:00` tz=`UTC` nowMs=`1770067358229` ntpOffsetMs=`0`"
	if got := FormatTimeTag(wall.Add(time.Hour), nil, 0); got != want {
		t.Fatalf("\n got %s\nwant %s", got, want)
	}
}

func TestLoadTimezone(t *testing.T) {
	for _, name := range []string{"UTC", "Asia/Kathmandu", "America/Argentina/Buenos_Aires", "Etc/GMT+5", " Europe/Berlin "} {
		loc, err := LoadTimezone(name)
		if err != nil {
			t.Errorf("LoadTimezone(%q): %v", name, err)
			continue
		}
		if want := regexp.MustCompile(`^\s+|\s+$`).ReplaceAllString(name, ""); loc.String() != want {
			t.Errorf("LoadTimezone(%q).String() = %q", name, loc.String())
		}
	}
	for _, name := range []string{"", "Local", "Mars/Olympus_Mons", "../etc/passwd", "/etc/localtime", "America/", "utc\x00"} {
		if _, err := LoadTimezone(name); !errors.Is(err, ErrTimezone) {
			t.Errorf("LoadTimezone(%q) err = %v, want ErrTimezone", name, err)
		}
	}
}

var timeTagRE = regexp.MustCompile("^\\[Time/Date\\]: utc=`(\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z)` " +
	"local=`\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\.\\d{3} [+-]\\d\\d:\\d\\d` tz=`([^`]+)` nowMs=`(-?\\d+)` ntpOffsetMs=`(-?\\d+)`$")

// FuzzFormatTimeTag: for any instant and offset in a sane range the tag has
// the exact shape, and its utc field and nowMs are the same instant.
func FuzzFormatTimeTag(f *testing.F) {
	f.Add(int64(1770067358241), int64(-12), "America/Los_Angeles")
	f.Add(int64(0), int64(0), "UTC")
	f.Add(int64(1772963999999), int64(1), "Asia/Kathmandu")
	f.Add(int64(-1), int64(-86_400_000), "Pacific/Chatham")
	f.Fuzz(func(t *testing.T, wallMs, offset int64, zone string) {
		const year3000 = 32_503_680_000_000
		if wallMs < 0 || wallMs > year3000 || offset < -year3000/2 || offset > year3000/2 || wallMs+offset < 0 {
			return
		}
		loc, err := LoadTimezone(zone)
		if err != nil {
			loc = nil
		}
		tag := FormatTimeTag(time.UnixMilli(wallMs), loc, offset)
		m := timeTagRE.FindStringSubmatch(tag)
		if m == nil {
			t.Fatalf("malformed tag %q", tag)
		}
		at, err := time.Parse("2006-01-02T15:04:05.000Z", m[1])
		if err != nil {
			t.Fatal(err)
		}
		nowMs, _ := strconv.ParseInt(m[3], 10, 64)
		if nowMs != wallMs+offset || at.UnixMilli() != nowMs || m[4] != strconv.FormatInt(offset, 10) {
			t.Fatalf("tag %q disagrees with wall %d offset %d", tag, wallMs, offset)
		}
	})
}

// FuzzAppendStamp: the hand-written stamps are exactly what AppendFormat
// writes for their layouts, for any instant and zone.
func FuzzAppendStamp(f *testing.F) {
	f.Add(int64(1770067358241), "America/Los_Angeles")
	f.Add(int64(0), "UTC")
	f.Add(int64(-62135596800001), "Asia/Kathmandu")  // a year before 1
	f.Add(int64(253402300800000), "Pacific/Chatham") // year 10000
	f.Add(int64(-2208988800000), "Europe/Amsterdam") // 1900: odd historic offsets
	f.Fuzz(func(t *testing.T, ms int64, zone string) {
		loc, err := LoadTimezone(zone)
		if err != nil {
			loc = time.UTC
		}
		at := time.UnixMilli(ms)
		if got, want := string(appendStamp(nil, at.UTC(), 'T', false)), at.UTC().Format("2006-01-02T15:04:05.000Z"); got != want {
			t.Fatalf("utc %d: %q, want %q", ms, got, want)
		}
		if got, want := string(appendStamp(nil, at.In(loc), ' ', true)), at.In(loc).Format("2006-01-02 15:04:05.000 -07:00"); got != want {
			t.Fatalf("%s %d: %q, want %q", loc, ms, got, want)
		}
	})
}

// FuzzTimeTagger: one TimeTagger asked for a run of instants and zones
// (the same second again, the next, another zone, back) writes exactly
// the uncached tag each time.
func FuzzTimeTagger(f *testing.F) {
	f.Add(int64(1770067358241), int64(5), int64(900), "America/Los_Angeles", "UTC")
	f.Add(int64(1772963999999), int64(1), int64(-1), "America/Los_Angeles", "America/Los_Angeles") // into PDT and back
	f.Add(int64(-1), int64(1), int64(-1000), "Pacific/Chatham", "Asia/Kathmandu")
	f.Add(int64(253402300799999), int64(1), int64(0), "UTC", "Pacific/Kiritimati") // into year 10000
	f.Fuzz(func(t *testing.T, ms, d1, d2 int64, zone1, zone2 string) {
		const limit = 1 << 50
		if ms < -limit || ms > limit || d1 < -limit || d1 > limit || d2 < -limit || d2 > limit {
			return
		}
		zone := func(name string) *time.Location {
			if loc, err := LoadTimezone(name); err == nil {
				return loc
			}
			return nil
		}
		var tagger TimeTagger
		for i, step := range []struct {
			ms  int64
			loc *time.Location
		}{{ms, zone(zone1)}, {ms + d1, zone(zone1)}, {ms + d1, zone(zone2)}, {ms + d1 + d2, zone(zone2)}, {ms, zone(zone1)}} {
			loc := step.loc
			if loc == nil {
				loc = time.UTC
			}
			want := string(appendTimeTag(nil, time.UnixMilli(step.ms-3), loc, step.ms-3, -3))
			if got := string(tagger.Append(nil, time.UnixMilli(step.ms), step.loc, -3)); got != want {
				t.Fatalf("step %d: %q, want %q", i, got, want)
			}
		}
	})
}
