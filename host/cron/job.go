// Package cron is the host's cron jobs (docs/cron.md): messages that a
// session gets on a schedule, whether or not its client is connected.
//
// A job belongs to one session and has a kind: `at` (one instant, then the
// job is disabled), `every` (a fixed interval of at least a second) or
// `cron` (five crontab fields read in an IANA time zone, DST-correct). When
// it fires, its target decides what happens: `main` queues the text as a
// system event of the session and wakes it; `isolated` runs the model in a
// session of its own. Both go through a [Sink], which the host wires to its
// scheduler; this package only decides when.
//
// One [Manager] holds every job of the host in one heap ordered by the next
// run, and one goroutine ([Manager.Run]) sleeps until the earliest (at most
// 60 s at a time, so a long sleep never drifts from host time). Every change
// is written through to the store. A failed run backs off ([Backoff]); a
// host that was down runs each overdue job once at startup and then follows
// the schedule again, without replaying what it missed.
package cron

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	gocron "github.com/netresearch/go-cron"
)

// Kinds of job.
const (
	KindAt    = "at"
	KindEvery = "every"
	KindCron  = "cron"
)

// Targets of a job.
const (
	TargetMain     = "main"
	TargetIsolated = "isolated"
)

// Statuses of a job's last run.
const (
	StatusOK     = "ok"
	StatusFailed = "failed"
)

// Limits of a job spec.
const (
	MinEvery = time.Second
	MaxEvery = 366 * 24 * time.Hour
	// MaxTextChars bounds a job's text in characters: what a system
	// event of the session may hold (docs/scheduler.md#system-events).
	MaxTextChars = 4000
	MaxNameLen   = 200 // bytes
	MaxSchedLen  = 200 // bytes
	// DefaultMaxPerSession bounds the jobs of one session (cron.maxPerSession).
	DefaultMaxPerSession = 50
)

// backoffSteps is the failure backoff: 30s, 1m, 5m, 15m, then 60m.
var backoffSteps = [...]time.Duration{30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, 60 * time.Minute}

// Backoff is how long to wait before retrying after the failures-th
// consecutive failure (1 = the first): 30s, 1m, 5m, 15m, 60m, and 60m from
// then on. failures < 1 is no wait. The scheduler uses the same sequence for
// its run retries.
func Backoff(failures int) time.Duration {
	if failures < 1 {
		return 0
	}
	return backoffSteps[min(failures, len(backoffSteps))-1]
}

// Spec is what a job is made of: what a user gives to create one.
type Spec struct {
	Session string `json:"session,omitempty"`
	Name    string `json:"name,omitempty"`
	// Kind is at, every or cron; empty means: tell from Schedule.
	Kind string `json:"kind,omitempty"`
	// Schedule is an ISO 8601 time with offset (at), a Go duration
	// (every) or five crontab fields (cron).
	Schedule string `json:"schedule"`
	// TZ is the IANA zone a cron schedule is read in (default UTC).
	TZ     string `json:"tz,omitempty"`
	Text   string `json:"text"`
	Target string `json:"target,omitempty"` // main (default) or isolated
}

// FieldError is a bad spec: which field, and what is wrong with it.
type FieldError struct {
	Field string
	Msg   string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Msg }

func bad(field, format string, args ...any) error {
	return &FieldError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// Schedule yields a job's run times.
type Schedule struct {
	Kind string
	// Norm is the schedule text as stored.
	Norm string
	at   time.Time
	// every is the interval of an every job; anchor fixes its grid.
	every time.Duration
	// naive is the five fields read in UTC: it matches wall-clock times,
	// which cronNext maps to instants of loc.
	naive gocron.Schedule
	loc   *time.Location
	// fixedHour: the hour field does not start with * (crontab's rule for
	// which jobs the DST corrections apply to).
	fixedHour bool
}

// cronParser reads exactly the five standard fields. DowOrDom keeps the
// crontab rule that a restricted day-of-month and day-of-week match when
// either does (0 9 1 * 1 = the 1st and every Monday).
var cronParser = gocron.MustNewParser(gocron.Minute | gocron.Hour | gocron.Dom | gocron.Month | gocron.Dow | gocron.DowOrDom)

// atLayouts are the ISO 8601 forms an at time may take; each has an offset.
var atLayouts = []string{time.RFC3339Nano, "2006-01-02T15:04Z07:00", "2006-01-02 15:04:05Z07:00", "2006-01-02 15:04Z07:00"}

// ParseAt reads an ISO 8601 time with its UTC offset.
func ParseAt(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	for _, l := range atLayouts {
		if t, err := time.Parse(l, s); err == nil {
			return t, nil
		}
	}
	for _, l := range []string{"2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02 15:04"} {
		if _, err := time.Parse(l, s); err == nil {
			return time.Time{}, fmt.Errorf("%q has no UTC offset; append Z or one such as +01:00 (e.g. 2026-12-24T18:00:00+01:00)", s)
		}
	}
	return time.Time{}, fmt.Errorf("%q is not an ISO 8601 time with offset; use e.g. 2026-12-24T18:00:00+01:00", s)
}

// ParseEvery reads a Go duration of at least MinEvery.
func ParseEvery(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration; want Go syntax such as 90s, 15m or 1h30m", s)
	}
	if d < MinEvery {
		return 0, fmt.Errorf("%s is shorter than the minimum %s", d, MinEvery)
	}
	if d > MaxEvery {
		return 0, fmt.Errorf("%s is longer than the maximum %s", d, MaxEvery)
	}
	return d, nil
}

// LoadZone resolves an IANA zone name; "" is UTC. Local is refused: the
// host's zone is not something a job should silently depend on.
func LoadZone(name string) (*time.Location, error) {
	name = strings.TrimSpace(name)
	if name == "" || name == "UTC" {
		return time.UTC, nil
	}
	if strings.EqualFold(name, "local") {
		return nil, errors.New(`"Local" is not accepted; name an IANA zone such as Europe/Paris`)
	}
	if len(name) > 64 || strings.ContainsAny(name, " \t\n\\") || strings.Contains(name, "..") || strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("%q is not an IANA time zone name such as Europe/Paris", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not a known IANA time zone (e.g. Europe/Paris, America/New_York)", name)
	}
	return loc, nil
}

// ParseCron reads five crontab fields (minute hour day-of-month month
// day-of-week), read in loc.
func ParseCron(expr string, loc *time.Location) (gocron.Schedule, error) {
	norm := strings.Join(strings.Fields(expr), " ")
	if strings.Contains(strings.ToUpper(norm), "TZ=") {
		return nil, errors.New("a time zone prefix is not accepted in the schedule; give the zone in tz")
	}
	if strings.HasPrefix(norm, "@") {
		return nil, fmt.Errorf("%q: descriptors are not accepted; write the five fields (e.g. 0 0 * * * for daily)", norm)
	}
	if n := len(strings.Fields(norm)); n != 5 {
		return nil, fmt.Errorf("%q has %d fields; want 5: minute hour day-of-month month day-of-week (e.g. 0 9 * * 1-5)", norm, n)
	}
	s, err := cronParser.Parse(norm)
	if err != nil {
		return nil, fmt.Errorf("%q: %v", norm, err)
	}
	spec, ok := s.(*gocron.SpecSchedule)
	if !ok {
		return nil, fmt.Errorf("%q: not a crontab schedule", norm)
	}
	spec.Location = loc
	return spec, nil
}

// inferKind tells a schedule's kind from its text when none is given.
func inferKind(s string) string {
	s = strings.TrimSpace(s)
	if _, err := ParseAt(s); err == nil {
		return KindAt
	}
	if _, err := time.ParseDuration(s); err == nil {
		return KindEvery
	}
	if len(strings.Fields(s)) == 5 {
		return KindCron
	}
	if len(s) >= 10 && s[4] == '-' && s[7] == '-' {
		return KindAt // a date: ParseAt says what is wrong with it
	}
	return ""
}

// ParseSchedule checks kind, schedule and tz together and returns the
// schedule. Errors are FieldErrors naming kind, schedule or tz.
func ParseSchedule(kind, schedule, tz string) (Schedule, error) {
	kind = strings.ToLower(strings.TrimSpace(kind))
	schedule = strings.TrimSpace(schedule)
	if schedule == "" {
		return Schedule{}, bad("schedule", "is empty; give an ISO 8601 time (at), a duration (every) or five crontab fields (cron)")
	}
	if len(schedule) > MaxSchedLen {
		return Schedule{}, bad("schedule", "longer than %d bytes", MaxSchedLen)
	}
	if !utf8.ValidString(schedule) {
		return Schedule{}, bad("schedule", "is not valid UTF-8")
	}
	if kind == "" {
		if kind = inferKind(schedule); kind == "" {
			return Schedule{}, bad("schedule", "%q is neither an ISO 8601 time, a duration nor five crontab fields", schedule)
		}
	}
	if kind != KindCron && strings.TrimSpace(tz) != "" {
		return Schedule{}, bad("tz", "applies to cron schedules only (an at time carries its offset; every is an interval)")
	}
	switch kind {
	case KindAt:
		t, err := ParseAt(schedule)
		if err != nil {
			return Schedule{}, bad("schedule", "%v", err)
		}
		return Schedule{Kind: KindAt, Norm: t.Format(time.RFC3339Nano), at: t}, nil
	case KindEvery:
		d, err := ParseEvery(schedule)
		if err != nil {
			return Schedule{}, bad("schedule", "%v", err)
		}
		return Schedule{Kind: KindEvery, Norm: d.String(), every: d}, nil
	case KindCron:
		loc, err := LoadZone(tz)
		if err != nil {
			return Schedule{}, bad("tz", "%v", err)
		}
		naive, err := ParseCron(schedule, time.UTC)
		if err != nil {
			return Schedule{}, bad("schedule", "%v", err)
		}
		fields := strings.Fields(schedule)
		return Schedule{Kind: KindCron, Norm: strings.Join(fields, " "), naive: naive, loc: loc,
			fixedHour: !strings.HasPrefix(fields[1], "*")}, nil
	}
	return Schedule{}, bad("kind", "%q: want at, every or cron", kind)
}

// Next is the first run strictly after now; ok is false when there is none
// (an at time that has passed, a cron expression that never matches).
// anchor is the grid of an every schedule (its creation time): runs fall on
// anchor + k·every, so a late run does not shift the ones after it.
func (s Schedule) Next(now, anchor time.Time) (time.Time, bool) {
	switch s.Kind {
	case KindAt:
		return s.at, s.at.After(now)
	case KindEvery:
		if anchor.After(now) {
			return anchor, true
		}
		k := now.Sub(anchor)/s.every + 1
		return anchor.Add(k * s.every), true
	case KindCron:
		n := s.cronNext(now)
		return n, !n.IsZero()
	}
	return time.Time{}, false
}

// maxShift bounds how far a clock change moves the wall clock (2 h at
// most in use today); wall times that far behind now's can still lie ahead
// of it after a fall-back.
const maxShift = 3 * time.Hour

// cronNext is the first run strictly after now. The five fields are
// matched against the wall clock of the zone (the parser reads them in
// UTC, where nothing is skipped or repeated), and each matching wall time
// becomes the instants that show it, with crontab's rules where there is
// not exactly one: a job at a fixed hour whose wall time falls in a
// spring-forward gap runs once when the gap ends, and a wall time that a
// fall-back repeats runs on its first occurrence only. Jobs with a
// wildcard hour follow elapsed time: no run in a gap, both occurrences of
// a repeated time.
func (s Schedule) cronNext(now time.Time) time.Time {
	nowWall := wallOf(now.In(s.loc))
	// Fast path: no clock change from maxShift before now to maxShift
	// after the next matching wall time (within a day), so wall times map
	// one to one and in order.
	if c := s.naive.Next(nowWall); !c.IsZero() {
		_, off := now.In(s.loc).Zone()
		at := c.Add(-time.Duration(off) * time.Second)
		if at.Sub(now) <= 24*time.Hour && sameOffset(s.loc, off, now.Add(-maxShift), at, at.Add(maxShift)) {
			return at
		}
	}
	cursor := nowWall.Add(-maxShift - time.Second)
	var best, bestWall time.Time
	for range 100000 {
		c := s.naive.Next(cursor)
		if c.IsZero() || (!best.IsZero() && c.Sub(bestWall) > maxShift) {
			break
		}
		for _, at := range s.instantsOf(c) {
			if at.After(now) && (best.IsZero() || at.Before(best)) {
				best, bestWall = at, c
			}
		}
		cursor = c
	}
	return best
}

// sameOffset reports whether loc has offset off at every one of ts.
func sameOffset(loc *time.Location, off int, ts ...time.Time) bool {
	for _, t := range ts {
		if _, o := t.In(loc).Zone(); o != off {
			return false
		}
	}
	return true
}

// wallOf is t's wall clock as a UTC time (date and time of day kept).
func wallOf(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instantsOf are the instants whose wall clock in the schedule's zone is
// wall (given as UTC), under the rules of cronNext.
func (s Schedule) instantsOf(wall time.Time) []time.Time {
	_, offBefore := wall.Add(-26 * time.Hour).In(s.loc).Zone()
	_, offAfter := wall.Add(26 * time.Hour).In(s.loc).Zone()
	var valid []time.Time
	for _, off := range []int{offBefore, offAfter} {
		at := wall.Add(-time.Duration(off) * time.Second)
		if wallOf(at.In(s.loc)).Equal(wall) && !slices.ContainsFunc(valid, at.Equal) {
			valid = append(valid, at)
		}
	}
	switch {
	case len(valid) == 0 && s.fixedHour && offAfter > offBefore:
		// A gap: the run happens when it ends, the first instant of the
		// new offset after the last one of the old.
		lo := wall.Add(-time.Duration(offAfter) * time.Second)  // before the change
		hi := wall.Add(-time.Duration(offBefore) * time.Second) // after it
		for hi.Sub(lo) > time.Second {
			mid := lo.Add(hi.Sub(lo) / 2)
			if _, off := mid.In(s.loc).Zone(); off == offAfter {
				hi = mid
			} else {
				lo = mid
			}
		}
		return []time.Time{hi.Truncate(time.Second)}
	case len(valid) == 2 && s.fixedHour:
		slices.SortFunc(valid, time.Time.Compare)
		return valid[:1]
	}
	return valid
}

// At is the instant of an at schedule.
func (s Schedule) At() time.Time { return s.at }

// Normalize checks a spec and returns it cleaned up (kind filled in,
// schedule normalized, target defaulted) with its schedule. Every error is
// a *FieldError naming the field.
func Normalize(sp Spec) (Spec, Schedule, error) {
	sp.Session = strings.TrimSpace(sp.Session)
	if sp.Session == "" {
		return sp, Schedule{}, bad("session", "is empty")
	}
	if len(sp.Session) > 512 {
		return sp, Schedule{}, bad("session", "longer than 512 bytes")
	}
	sp.Name = strings.TrimSpace(sp.Name)
	if len(sp.Name) > MaxNameLen || !utf8.ValidString(sp.Name) {
		return sp, Schedule{}, bad("name", "must be valid UTF-8 of at most %d bytes", MaxNameLen)
	}
	if strings.TrimSpace(sp.Text) == "" {
		return sp, Schedule{}, bad("text", "is empty; it is the message the job delivers")
	}
	if !utf8.ValidString(sp.Text) || utf8.RuneCountInString(sp.Text) > MaxTextChars {
		return sp, Schedule{}, bad("text", "must be valid UTF-8 of at most %d characters", MaxTextChars)
	}
	switch t := strings.ToLower(strings.TrimSpace(sp.Target)); t {
	case "":
		sp.Target = TargetMain
	case TargetMain, TargetIsolated:
		sp.Target = t
	default:
		return sp, Schedule{}, bad("target", "%q: want main or isolated", sp.Target)
	}
	sched, err := ParseSchedule(sp.Kind, sp.Schedule, sp.TZ)
	if err != nil {
		return sp, Schedule{}, err
	}
	sp.Kind, sp.Schedule, sp.TZ = sched.Kind, sched.Norm, strings.TrimSpace(sp.TZ)
	if sched.Kind == KindCron && sp.TZ == "" {
		sp.TZ = "UTC"
	}
	return sp, sched, nil
}
