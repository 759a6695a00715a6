// Package clock is the host's clock-task engine (docs/clock-tool.md; seeds 000, 001):
// the `clock` server tool, due-reminder reservation and commit, the
// clock directives, and the expiry sweep. It is pure logic over
// [storage.Store] with an injected clock, called by the host's HTTP API.
package clock

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/ntp"
	"github.com/chimehq/chime/storage"
)

// Defaults of docs/clock-tool.md.
const (
	DefaultDueWindow      = 60 * time.Second
	DefaultRetention      = 20 * time.Minute
	DefaultReservationTTL = 2 * time.Minute // the ceiling of the measured expiry (ttl.go)
	DefaultSweepEvery     = 60 * time.Second
	DefaultNearDuplicate  = 5 * time.Minute
	DefaultMaxTasks       = 200
	// DefaultNoticeRetention keeps an undelivered notice a week: it is news
	// the model asked for, and the user may come back late.
	DefaultNoticeRetention = 7 * 24 * time.Hour
)

// maxItemsPerCall and maxTaskLen bound one schedule call.
const (
	maxItemsPerCall = 20
	maxTaskLen      = 4000
)

// reservationGC drops reservation records whose request never committed or
// rolled back (a crashed filter, a lost callout).
const reservationGC = time.Hour

// Config wires an Engine. Only Store is required.
type Config struct {
	Store *storage.Store
	// Clock is host time including the NTP offset (ntp.Tracker.Clock) and
	// what the sweep tick waits on; default the real clock.
	Clock timesource.Clock
	// NTP reports the tracker state for `get`; nil reports "disabled".
	NTP func() ntp.State
	// Location is the default zone for `get` and for repeats; default UTC.
	Location  *time.Location
	DueWindow time.Duration
	Retention time.Duration
	// NoticeRetention is how long an undelivered notice waits for a request.
	NoticeRetention time.Duration
	// PendingHorizon limits ReserveAndPending's pending report to tasks
	// injectable within it (holds.max plus the response's own time); 0
	// counts every future task.
	PendingHorizon time.Duration
	ReservationTTL time.Duration // fixed expiry of a reservation; 0 = measured (ttl.go)
	// OwnedByProcess reports whether a reservation id is one only the
	// host process that made it settles (a hold's followup, a wake run):
	// such a reservation left by a process that has died is released at
	// once. nil: none is.
	OwnedByProcess func(requestID string) bool
	SweepEvery     time.Duration
	NearDuplicate  time.Duration
	MaxTasks       int // per session
	Logger         *slog.Logger
}

// Engine executes the clock tool and manages reminder delivery. It is safe
// for concurrent use; state changes are serialized.
type Engine struct {
	cfg   Config
	store *storage.Store
	clock timesource.Clock
	now   func() time.Time // clock.Now
	log   *slog.Logger

	mu sync.Mutex // serializes read-modify-write of tasks

	// afterSweep, when set, runs after each Run sweep (tests).
	afterSweep func()

	locMu sync.Mutex
	locs  map[string]*time.Location

	ttl       ttlMeter
	startedAt int64 // Unix ms; reservations older than it were made by a process that died
}

// New builds an Engine; zero durations take the docs/clock-tool.md#due-and-expiry.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil {
		return nil, errors.New("clock: Config.Store is required")
	}
	cfg.Clock = timesource.OrReal(cfg.Clock)
	if cfg.Location == nil {
		cfg.Location = time.UTC
	}
	setDefault(&cfg.DueWindow, DefaultDueWindow)
	setDefault(&cfg.Retention, DefaultRetention)
	setDefault(&cfg.NoticeRetention, DefaultNoticeRetention)
	setDefault(&cfg.SweepEvery, DefaultSweepEvery)
	setDefault(&cfg.NearDuplicate, DefaultNearDuplicate)
	if cfg.MaxTasks <= 0 {
		cfg.MaxTasks = DefaultMaxTasks
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Engine{
		cfg: cfg, store: cfg.Store, clock: cfg.Clock, now: cfg.Clock.Now, log: cfg.Logger,
		locs: map[string]*time.Location{}, startedAt: cfg.Clock.Now().UnixMilli(),
	}, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

type locKey struct{}

// WithLocation returns a context whose clock calls use loc (e.g. from the
// request's x-chime-timezone header) instead of Config.Location.
func WithLocation(ctx context.Context, loc *time.Location) context.Context {
	if loc == nil {
		return ctx
	}
	return context.WithValue(ctx, locKey{}, loc)
}

func (e *Engine) location(ctx context.Context) *time.Location {
	if loc, ok := ctx.Value(locKey{}).(*time.Location); ok {
		return loc
	}
	return e.cfg.Location
}

// --- task predicates (docs/clock-tool.md Semantics) ---

func (e *Engine) isDue(t storage.ClockTask, now time.Time) bool {
	return now.UnixMilli() >= t.DueAt-e.cfg.DueWindow.Milliseconds()
}

func (e *Engine) isExpired(t storage.ClockTask, now time.Time) bool {
	keep := e.cfg.Retention
	if t.Notice != "" {
		keep = e.cfg.NoticeRetention
	}
	return now.UnixMilli() > t.DueAt+keep.Milliseconds()
}

// blockedFor reports whether notBeforeRequestId keeps t out of requestID:
// the request itself and its followups "<id>:…".
func blockedFor(t storage.ClockTask, requestID string) bool {
	nb := t.NotBeforeRequestID
	return nb != "" && (requestID == nb || strings.HasPrefix(requestID, nb+":"))
}

func (e *Engine) reservedByOther(t storage.ClockTask, requestID string, now time.Time) bool {
	if t.ReservedBy == "" || t.ReservedBy == requestID {
		return false
	}
	ttl := e.ReservationTTL()
	if t.ReservedAt < e.startedAt {
		// Reserved before this process started.
		if e.cfg.OwnedByProcess != nil && e.cfg.OwnedByProcess(t.ReservedBy) {
			return false // its owner died with that process
		}
		if e.cfg.ReservationTTL <= 0 {
			// The filter resends an outcome the host missed once it is
			// back, so only a request still streaming across the
			// restart can finish it late.
			ttl = min(ttl, MinReservationTTL)
		}
	}
	return now.UnixMilli()-t.ReservedAt < ttl.Milliseconds()
}

func exhausted(t storage.ClockTask) bool {
	return t.Repeat != "" && t.MaxRuns > 0 && t.Runs >= t.MaxRuns
}

// taskLocation is the zone a task's dueAt was written in: the remembered
// IANA zone when it matched, else the fixed offset.
func (e *Engine) taskLocation(t storage.ClockTask) *time.Location {
	if t.TimeZone != "" {
		e.locMu.Lock()
		loc, ok := e.locs[t.TimeZone]
		if !ok {
			var err error
			if loc, err = llm.LoadTimezone(t.TimeZone); err != nil {
				loc = nil
			}
			e.locs[t.TimeZone] = loc
		}
		e.locMu.Unlock()
		if loc != nil {
			return loc
		}
	}
	if t.UTCOffsetSec == 0 {
		return time.UTC
	}
	return time.FixedZone("", t.UTCOffsetSec)
}

func (e *Engine) dueTime(t storage.ClockTask) time.Time {
	return time.UnixMilli(t.DueAt).In(e.taskLocation(t))
}

// rearm moves a repeating task to its next occurrence after now and clears
// its per-occurrence delivery state. It reports false when there is none.
func (e *Engine) rearm(t *storage.ClockTask, now time.Time) bool {
	_, rec, err := parseRepeat(t.Repeat, now)
	if err != nil || rec == nil {
		return false
	}
	next, ok := rec.nextAfter(e.dueTime(*t), now)
	if !ok {
		return false
	}
	t.DueAt = next.UnixMilli()
	t.DeliveredAt = 0
	t.ReservedBy, t.ReservedAt = "", 0
	return true
}

func newTaskID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "clk_" + hex.EncodeToString(b[:])
}

// Time renderings shared with the time tag (docs/time.md#time-tag).
const (
	utcLayout   = "2006-01-02T15:04:05.000Z"
	localLayout = "2006-01-02 15:04:05.000 -07:00"
)

// formatDue renders a task time as ISO8601 with offset, with milliseconds
// only when present.
func formatDue(t time.Time) string {
	if t.Nanosecond() == 0 {
		return t.Format(time.RFC3339)
	}
	return t.Format("2006-01-02T15:04:05.000Z07:00")
}
