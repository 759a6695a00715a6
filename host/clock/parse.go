package clock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	cron "github.com/netresearch/go-cron"
)

// dueAtLayouts are the ISO8601 forms accepted; every one carries an offset.
var dueAtLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04Z07:00",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04Z07:00",
}

// offsetlessLayouts recognise a dueAt that lacks only its offset, so the
// error can say exactly that.
var offsetlessLayouts = []string{"2006-01-02T15:04:05.999999999", "2006-01-02T15:04", "2006-01-02 15:04:05.999999999", "2006-01-02 15:04"}

// parseDueAt parses an ISO8601 time with an explicit offset (docs/clock-tool.md). The
// result keeps the offset it was written with.
func parseDueAt(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return time.Time{}, errors.New("dueAt is empty; give an ISO8601 time with offset, e.g. 2026-01-21T20:30:00-08:00")
	}
	for _, layout := range dueAtLayouts {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	for _, layout := range offsetlessLayouts {
		if _, err := time.Parse(layout, s); err == nil {
			return time.Time{}, fmt.Errorf("dueAt %q has no UTC offset; append one such as Z or -08:00 (e.g. 2026-01-21T20:30:00-08:00)", s)
		}
	}
	return time.Time{}, fmt.Errorf("dueAt %q is not an ISO8601 time with offset; use e.g. 2026-01-21T20:30:00-08:00", s)
}

// minEvery keeps "every" repeats longer than the due window, so that a
// re-armed occurrence is not due the moment it is armed.
const minEvery = time.Minute

// cronParser accepts exactly the 5 standard fields (docs/clock-tool.md), plus an
// optional CRON_TZ= prefix.
var cronParser = cron.MustNewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow)

// recurrence yields the occurrences of a repeating task.
type recurrence interface {
	// nextAfter returns the first occurrence after both due and after, on
	// due's grid, in due's location; ok is false when none exists.
	nextAfter(due, after time.Time) (next time.Time, ok bool)
}

// parseRepeat validates a repeat spec and returns its normalized text ("" for
// a one-shot task) and its recurrence (nil for a one-shot task).
func parseRepeat(spec string, now time.Time) (string, recurrence, error) {
	norm := strings.Join(strings.Fields(spec), " ")
	lower := strings.ToLower(norm)
	switch lower {
	case "", "once":
		return "", nil, nil
	case "daily":
		return "daily", calendarRec{days: 1}, nil
	case "weekly":
		return "weekly", calendarRec{days: 7}, nil
	}
	if rest, ok := strings.CutPrefix(lower, "every "); ok {
		d, err := parseEvery(rest)
		if err != nil {
			return "", nil, fmt.Errorf("repeat %q: %w", spec, err)
		}
		return "every " + rest, everyRec{d: d}, nil
	}
	if len(strings.Fields(norm)) < 5 {
		return "", nil, fmt.Errorf("repeat %q: use \"\" (once), daily, weekly, every <duration> (e.g. every 30m) or a 5-field cron expression (e.g. 0 9 * * 1-5)", spec)
	}
	sched, err := cronParser.Parse(norm)
	if err != nil {
		return "", nil, fmt.Errorf("repeat %q is not a valid 5-field cron expression: %v", spec, err)
	}
	if sched.Next(now).IsZero() {
		return "", nil, fmt.Errorf("repeat %q never fires", spec)
	}
	return norm, cronRec{s: sched}, nil
}

// parseEvery accepts Go durations ("90m", "1h30m") and whole days ("2d").
func parseEvery(s string) (time.Duration, error) {
	var d time.Duration
	if days, ok := strings.CutSuffix(s, "d"); ok {
		n, err := strconv.Atoi(days)
		if err != nil || n <= 0 || n > 3660 {
			return 0, fmt.Errorf("bad duration %q; use e.g. 30m, 2h or 1d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, fmt.Errorf("bad duration %q; use e.g. 30m, 2h or 1d", s)
		}
	}
	if d < minEvery {
		return 0, fmt.Errorf("interval %s is shorter than the minimum %s", d, minEvery)
	}
	return d, nil
}

type everyRec struct{ d time.Duration }

func (r everyRec) nextAfter(due, after time.Time) (time.Time, bool) {
	k := int64(1)
	if !after.Before(due) {
		k = int64(after.Sub(due)/r.d) + 1
	}
	return due.Add(time.Duration(k) * r.d), true
}

// calendarRec steps whole days in due's location, so a daily 09:00 task
// stays at 09:00 local across DST changes.
type calendarRec struct{ days int }

func (r calendarRec) nextAfter(due, after time.Time) (time.Time, bool) {
	k := 1
	if gap := after.Sub(due); gap > 0 {
		// Jump close to the answer first; AddDate from due avoids drift.
		if approx := int(gap.Hours()/24)/r.days - 1; approx > k {
			k = approx
		}
	}
	for i := 0; i < 1000; i++ {
		n := due.AddDate(0, 0, k*r.days)
		if n.After(after) && n.After(due) {
			return n, true
		}
		k++
	}
	return time.Time{}, false
}

type cronRec struct{ s cron.Schedule }

func (r cronRec) nextAfter(due, after time.Time) (time.Time, bool) {
	from := due
	if after.After(due) {
		from = after.In(due.Location())
	}
	n := r.s.Next(from)
	return n, !n.IsZero()
}
