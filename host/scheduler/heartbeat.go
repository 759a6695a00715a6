package scheduler

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chimehq/chime/storage"
)

// Heartbeat defaults of docs/scheduler.md#heartbeat.
const (
	DefaultEvery       = 30 * time.Minute
	DefaultAckToken    = "HEARTBEAT_OK"
	DefaultAckMaxChars = 300
	MinEvery           = time.Second
	MaxEvery           = 7 * 24 * time.Hour
	MaxPromptLen       = 4000
)

// DefaultPrompt is the heartbeat prompt unless the config or the session
// sets one. It names the ack token, so a model with nothing to say costs
// a few output tokens and nothing reaches the user.
const DefaultPrompt = "This is a scheduled check-in from chime, not a message from the user. " +
	"If something needs the user's attention now (a reminder or event below, work you said you would do), " +
	"do it or say it briefly. If nothing needs attention, reply exactly HEARTBEAT_OK."

// Heartbeat is a session's effective heartbeat setting.
type Heartbeat struct {
	Enabled     bool
	Every       time.Duration
	Prompt      string
	AckToken    string
	AckMaxChars int
	// ActiveHours bound interval wakes; start = end, or 00:00–24:00, is
	// all day.
	ActiveHours     storage.ActiveHours
	OnlyWhenPending bool
}

// AllDay is the default window.
var AllDay = storage.ActiveHours{Start: "00:00", End: "24:00", Timezone: "UTC"}

// DefaultHeartbeat is the setting of a session nobody configured: off,
// with the documented values ready for when it is turned on.
func DefaultHeartbeat() Heartbeat {
	return Heartbeat{Every: DefaultEvery, Prompt: DefaultPrompt, AckToken: DefaultAckToken, AckMaxChars: DefaultAckMaxChars, ActiveHours: AllDay}
}

// Merge lays a stored per-session setting over base (the config's
// default); zero fields of the record keep base's.
func Merge(base Heartbeat, rec storage.Heartbeat) Heartbeat {
	h := base
	h.Enabled = rec.Enabled
	if rec.EveryMs > 0 {
		h.Every = time.Duration(rec.EveryMs) * time.Millisecond
	}
	if rec.Prompt != "" {
		h.Prompt = rec.Prompt
	}
	if rec.AckToken != "" {
		h.AckToken = rec.AckToken
	}
	if rec.AckMaxChars > 0 {
		h.AckMaxChars = rec.AckMaxChars
	}
	if rec.ActiveHours != nil {
		h.ActiveHours = *rec.ActiveHours
	}
	h.OnlyWhenPending = rec.OnlyWhenPending
	return h
}

// Check reports the first bad field of h by its name.
func (h Heartbeat) Check() error {
	if h.Every < MinEvery || h.Every > MaxEvery {
		return fmt.Errorf("every: %s: must be from %s to %s", h.Every, MinEvery, MaxEvery)
	}
	if utf8.RuneCountInString(h.Prompt) > MaxPromptLen {
		return fmt.Errorf("prompt: longer than %d characters", MaxPromptLen)
	}
	if strings.TrimSpace(h.AckToken) == "" {
		return errors.New("ackToken: must not be empty")
	}
	if h.AckMaxChars < 0 || h.AckMaxChars > 10000 {
		return fmt.Errorf("ackMaxChars: %d: must be from 0 to 10000", h.AckMaxChars)
	}
	if _, err := ParseActiveHours(h.ActiveHours); err != nil {
		return fmt.Errorf("activeHours.%w", err)
	}
	return nil
}

// Window is a parsed daily window of active hours.
type Window struct {
	start, end int // minutes of the day; end may be 1440
	loc        *time.Location
	local      bool
}

// ParseActiveHours checks a window: "HH:MM" bounds (end may be "24:00")
// and an IANA zone, or "local" (the host's zone), or "" (UTC). Errors
// start with the field name.
func ParseActiveHours(a storage.ActiveHours) (Window, error) {
	var w Window
	var err error
	if w.start, err = parseHM(a.Start, false); err != nil {
		return w, fmt.Errorf("start: %w", err)
	}
	if w.end, err = parseHM(a.End, true); err != nil {
		return w, fmt.Errorf("end: %w", err)
	}
	switch tz := strings.TrimSpace(a.Timezone); tz {
	case "", "UTC":
		w.loc = time.UTC
	case "local":
		w.local = true
	default:
		if w.loc, err = time.LoadLocation(tz); err != nil {
			return w, fmt.Errorf("timezone: %q is not an IANA zone", tz)
		}
	}
	return w, nil
}

func parseHM(s string, allow24 bool) (int, error) {
	h, m, ok := strings.Cut(strings.TrimSpace(s), ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || len(m) != 2 || hh < 0 || mm < 0 || mm > 59 {
		return 0, fmt.Errorf("%q: want HH:MM", s)
	}
	v := hh*60 + mm
	if v > 24*60 || (v == 24*60 && !allow24) || (hh == 24 && mm != 0) {
		return 0, fmt.Errorf("%q: want HH:MM from 00:00 to %s", s, map[bool]string{true: "24:00", false: "23:59"}[allow24])
	}
	return v, nil
}

// Contains reports whether t falls in the window, on the wall clock of its
// zone (so DST shifts move the window with the clock on the wall). A
// start after the end spans midnight; equal bounds mean all day.
func (w Window) Contains(t time.Time) bool {
	loc := w.loc
	if w.local {
		loc = time.Local
	}
	lt := t.In(loc)
	m := lt.Hour()*60 + lt.Minute()
	switch {
	case w.start == w.end || (w.start == 0 && w.end == 24*60):
		return true
	case w.start < w.end:
		return m >= w.start && m < w.end
	default: // overnight
		return m >= w.start || m < w.end
	}
}
