package llm

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// TimeTagPrefix starts every time tag (docs/time.md#time-tag).
const TimeTagPrefix = "[Time/Date]: "

// ErrTimezone reports a zone name that is not a loadable IANA zone.
var ErrTimezone = errors.New("llm: unknown timezone")

// FormatTimeTag renders the time tag of docs/time.md#time-tag, exactly:
//
//	[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 13:22:38.229 -08:00` tz=`America/Los_Angeles` nowMs=`1770038558229` ntpOffsetMs=`-12`
//
// nowMs is wall's Unix milliseconds plus ntpOffsetMs, and utc and local
// render that instant (always three fraction digits) in UTC and in loc. A
// nil loc means UTC. The tz field is loc's name, so loc should come from
// LoadTimezone (time.Local would print "Local").
func FormatTimeTag(wall time.Time, loc *time.Location, ntpOffsetMs int64) string {
	var t TimeTagger
	return string(t.Append(make([]byte, 0, 160), wall, loc, ntpOffsetMs))
}

// TimeTagger appends time tags (FormatTimeTag) and keeps the calendar
// part of the last second it wrote: the tags of requests arriving within
// the same second only get their milliseconds and numbers written. In
// the wasm filter the calendar arithmetic and zone lookups cost more than
// the rest of the tag. Zone changes fall on whole seconds, so the cache
// is exact. The zero value is ready; not safe for concurrent use.
type TimeTagger struct {
	valid bool
	sec   int64 // the cached second, Unix
	loc   *time.Location
	utc   [19]byte // "2006-01-02T15:04:05"
	local [19]byte // "2006-01-02 15:04:05"
	off   [7]byte  // " -07:00"
}

// Append appends FormatTimeTag(wall, loc, ntpOffsetMs) to b.
func (t *TimeTagger) Append(b []byte, wall time.Time, loc *time.Location, ntpOffsetMs int64) []byte {
	if loc == nil {
		loc = time.UTC
	}
	nowMs := wall.UnixMilli() + ntpOffsetMs
	sec, ms := nowMs/1000, nowMs%1000
	if ms < 0 {
		sec, ms = sec-1, ms+1000
	}
	if !t.valid || t.sec != sec || t.loc != loc {
		if !t.fill(sec, loc) {
			return appendTimeTag(b, time.UnixMilli(nowMs), loc, nowMs, ntpOffsetMs)
		}
	}
	frac := [4]byte{'.', byte('0' + ms/100), byte('0' + ms/10%10), byte('0' + ms%10)}
	b = append(b, TimeTagPrefix...)
	b = append(b, "utc=`"...)
	b = append(b, t.utc[:]...)
	b = append(b, frac[:]...)
	b = append(b, "Z` local=`"...)
	b = append(b, t.local[:]...)
	b = append(b, frac[:]...)
	b = append(b, t.off[:]...)
	return appendTagTail(b, loc, nowMs, ntpOffsetMs)
}

// fill caches the calendar parts of second sec in loc; false when a year
// falls outside 0-9999, whose stamps AppendFormat writes (not cached).
func (t *TimeTagger) fill(sec int64, loc *time.Location) bool {
	t.valid = false
	at := time.Unix(sec, 0)
	var buf [32]byte
	u := appendStamp(buf[:0], at.UTC(), 'T', false) // 2006-01-02T15:04:05.000Z
	if len(u) != 24 {
		return false
	}
	copy(t.utc[:], u)
	l := appendStamp(buf[:0], at.In(loc), ' ', true) // 2006-01-02 15:04:05.000 -07:00
	if len(l) != 30 {
		return false
	}
	copy(t.local[:], l)
	copy(t.off[:], l[23:])
	t.valid, t.sec, t.loc = true, sec, loc
	return true
}

// appendTimeTag writes the whole tag for now, uncached.
func appendTimeTag(b []byte, now time.Time, loc *time.Location, nowMs, ntpOffsetMs int64) []byte {
	b = append(b, TimeTagPrefix...)
	b = append(b, "utc=`"...)
	b = appendStamp(b, now.UTC(), 'T', false)
	b = append(b, "` local=`"...)
	b = appendStamp(b, now.In(loc), ' ', true)
	return appendTagTail(b, loc, nowMs, ntpOffsetMs)
}

// appendTagTail writes what follows the local stamp.
func appendTagTail(b []byte, loc *time.Location, nowMs, ntpOffsetMs int64) []byte {
	b = append(b, "` tz=`"...)
	b = append(b, loc.String()...)
	b = append(b, "` nowMs=`"...)
	b = strconv.AppendInt(b, nowMs, 10)
	b = append(b, "` ntpOffsetMs=`"...)
	b = strconv.AppendInt(b, ntpOffsetMs, 10)
	return append(b, '`')
}

// LoadTimezone loads an IANA zone by name for the time tag (docs/time.md#time-tag). It
// rejects "" and "Local", which time.LoadLocation accepts but which name
// no zone, and anything that is not in the zone database. Inside wasm the
// database must be embedded (import time/tzdata in the main package).
func LoadTimezone(name string) (*time.Location, error) {
	name = strings.TrimSpace(name)
	if name == "" || name == "Local" || len(name) > 64 {
		return nil, fmt.Errorf("%w %q", ErrTimezone, name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%w %q", ErrTimezone, name)
	}
	return loc, nil
}

// appendStamp appends t as "2006-01-02T15:04:05.000Z" (sep 'T', no
// offset) or "2006-01-02 15:04:05.000 -07:00" (sep ' ', offset): what
// AppendFormat writes for those layouts, without interpreting a layout,
// which in the wasm filter costs more than the rest of the tag. Years
// outside 0-9999 go through AppendFormat.
func appendStamp(b []byte, t time.Time, sep byte, offset bool) []byte {
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		if offset {
			return t.AppendFormat(b, "2006-01-02 15:04:05.000 -07:00")
		}
		return t.AppendFormat(b, "2006-01-02T15:04:05.000Z")
	}
	hour, minute, sec := t.Clock()
	b = append4(b, year)
	b = append(b, '-')
	b = append2(b, int(month))
	b = append(b, '-')
	b = append2(b, day)
	b = append(b, sep)
	b = append2(b, hour)
	b = append(b, ':')
	b = append2(b, minute)
	b = append(b, ':')
	b = append2(b, sec)
	ms := t.Nanosecond() / 1e6
	b = append(b, '.', byte('0'+ms/100), byte('0'+ms/10%10), byte('0'+ms%10))
	if !offset {
		return append(b, 'Z')
	}
	_, off := t.Zone()
	sign := byte('+')
	if off < 0 {
		sign, off = '-', -off
	}
	b = append(b, ' ', sign)
	b = append2(b, off/3600)
	b = append(b, ':')
	return append2(b, off/60%60)
}

func append2(b []byte, v int) []byte { return append(b, byte('0'+v/10%10), byte('0'+v%10)) }

func append4(b []byte, v int) []byte {
	return append(b, byte('0'+v/1000), byte('0'+v/100%10), byte('0'+v/10%10), byte('0'+v%10))
}
