package ntp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	sntp "github.com/beevik/ntp"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

// Status is the tracker's verdict on its offset (docs/time.md#ntp).
type Status string

const (
	// StatusOK: the last attempt succeeded and its offset is fresh.
	StatusOK Status = "ok"
	// StatusStale: the last good offset is older than StaleAfter; it is still applied.
	StatusStale Status = "stale"
	// StatusError: the last attempt failed (or none succeeded yet) and the
	// last good offset, if any, is still fresh.
	StatusError Status = "error"
	// StatusDisabled: NTP is off; Now is the wall clock.
	StatusDisabled Status = "disabled"
)

// State is a point-in-time view of the tracker.
type State struct {
	Status    Status    `json:"status"`
	OffsetMs  int64     `json:"offsetMs"`
	Server    string    `json:"server,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"` // last good sync; zero if none
	Err       string    `json:"error,omitempty"`
}

// Persister stores the tracker state; *storage.Store satisfies it.
type Persister interface {
	LoadNTP() (storage.NTPState, bool, error)
	SaveNTP(storage.NTPState) error
}

// ErrDisabled is returned by SyncOnce on a disabled tracker.
var ErrDisabled = errors.New("ntp: disabled")

// errNotSynced explains an error status before any attempt finished.
const errNotSynced = "not synchronized yet"

// Tracker keeps the NTP offset. All methods are safe for concurrent use.
type Tracker struct {
	cfg   Config
	store Persister
	clock timesource.Clock // uncorrected wall clock; the sync loop waits on it
	query func(server string, timeout time.Duration) (*sntp.Response, error)
	log   *slog.Logger
	// onSync, when set, runs after every background sync (tests).
	onSync func()

	syncMu  sync.Mutex // one sync at a time
	failing bool       // the last sync failed (guarded by syncMu): repeats log at debug

	mu      sync.RWMutex
	offset  time.Duration
	server  string
	goodAt  time.Time
	lastErr string
	started bool
}

// Option customizes a Tracker.
type Option func(*Tracker)

// WithClock replaces the real clock as the tracker's uncorrected wall
// clock and the clock its sync loop waits on (tests pass a fake).
func WithClock(c timesource.Clock) Option { return func(t *Tracker) { t.clock = timesource.OrReal(c) } }

// WithLogger sets the logger (default slog.Default()).
func WithLogger(l *slog.Logger) Option { return func(t *Tracker) { t.log = l } }

// New builds a tracker. store may be nil (nothing persisted). Zero timings
// in cfg take the defaults.
func New(cfg Config, store Persister, opts ...Option) (*Tracker, error) {
	def := DefaultConfig()
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = def.StaleAfter
	}
	if cfg.Interval <= 0 {
		cfg.Interval = def.Interval
	}
	if cfg.Retry <= 0 {
		cfg.Retry = def.Retry
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = def.Timeout
	}
	if cfg.Enabled {
		if len(cfg.Servers) == 0 {
			return nil, errors.New("ntp: enabled without servers")
		}
		for _, s := range cfg.Servers {
			if err := checkServer(s); err != nil {
				return nil, fmt.Errorf("ntp: %w", err)
			}
		}
	}
	t := &Tracker{cfg: cfg, store: store, clock: timesource.Real(), log: slog.Default(), query: queryServer}
	for _, o := range opts {
		o(t)
	}
	return t, nil
}

func queryServer(server string, timeout time.Duration) (*sntp.Response, error) {
	return sntp.QueryWithOptions(server, sntp.QueryOptions{Timeout: timeout})
}

// Start restores the persisted state and, when enabled, starts the sync
// loop: the first sync runs in the background at once, then every Interval
// (Retry after a failure) until ctx ends. Start never blocks on the network
// and does nothing on a second call.
func (t *Tracker) Start(ctx context.Context) {
	t.mu.Lock()
	if t.started {
		t.mu.Unlock()
		return
	}
	t.started = true
	t.mu.Unlock()
	if !t.cfg.Enabled {
		return
	}
	t.restore()
	go t.loop(ctx)
}

func (t *Tracker) restore() {
	if t.store == nil {
		return
	}
	st, ok, err := t.store.LoadNTP()
	if err != nil {
		t.log.Warn("ntp: cannot load persisted state", "err", err)
		return
	}
	if !ok {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.offset = time.Duration(st.OffsetMs) * time.Millisecond
	t.server = st.Server
	if st.UpdatedAt > 0 {
		t.goodAt = time.UnixMilli(st.UpdatedAt)
	}
	t.lastErr = st.Error
}

func (t *Tracker) loop(ctx context.Context) {
	for {
		wait := t.cfg.Interval
		if err := t.SyncOnce(ctx); err != nil {
			wait = t.cfg.Retry
			if ctx.Err() != nil {
				return
			}
		}
		if t.onSync != nil {
			t.onSync()
		}
		if timesource.Wait(ctx, t.clock, wait) != nil {
			return
		}
	}
}

// SyncOnce queries the servers in order and keeps the first valid answer.
// A failure leaves the last good offset in place and records the error.
func (t *Tracker) SyncOnce(ctx context.Context) error {
	if !t.cfg.Enabled {
		return ErrDisabled
	}
	if err := ctx.Err(); err != nil {
		return err // shutting down: not a sync failure worth recording
	}
	t.syncMu.Lock()
	defer t.syncMu.Unlock()

	var errs []string
	for _, server := range t.cfg.Servers {
		if err := ctx.Err(); err != nil {
			errs = append(errs, err.Error())
			break
		}
		resp, err := t.query(server, t.cfg.Timeout)
		if err == nil {
			// Kiss-of-death, unsynchronized or implausible answers fail here.
			err = resp.Validate()
		}
		if err != nil {
			errs = append(errs, server+": "+err.Error())
			continue
		}
		t.mu.Lock()
		t.offset = resp.ClockOffset
		t.server = server
		t.goodAt = t.clock.Now()
		t.lastErr = ""
		t.mu.Unlock()
		t.persist()
		if t.failing {
			t.failing = false
			t.log.Info("ntp: synced again", "server", server)
		}
		return nil
	}
	msg := strings.Join(errs, "; ")
	t.mu.Lock()
	t.lastErr = msg
	t.mu.Unlock()
	t.persist()
	// One info line when syncing starts failing (no network is normal on a
	// laptop or in a sandbox); the per-server reasons and repeats are debug.
	if !t.failing {
		t.failing = true
		t.log.Info("ntp: no server answered; keeping the last good offset", "servers", len(t.cfg.Servers))
	}
	t.log.Debug("ntp: sync failed", "err", msg)
	return fmt.Errorf("ntp: sync failed: %s", msg)
}

func (t *Tracker) persist() {
	if t.store == nil {
		return
	}
	s := t.Snapshot()
	st := storage.NTPState{Status: string(s.Status), OffsetMs: s.OffsetMs, Server: s.Server, Error: s.Err}
	if !s.UpdatedAt.IsZero() {
		st.UpdatedAt = s.UpdatedAt.UnixMilli()
	}
	if err := t.store.SaveNTP(st); err != nil {
		t.log.Warn("ntp: cannot persist state", "err", err)
	}
}

// Snapshot returns the current state, with staleness computed now.
func (t *Tracker) Snapshot() State {
	if !t.cfg.Enabled {
		return State{Status: StatusDisabled}
	}
	now := t.clock.Now()
	t.mu.RLock()
	defer t.mu.RUnlock()
	s := State{OffsetMs: t.offset.Round(time.Millisecond).Milliseconds(), Server: t.server, UpdatedAt: t.goodAt, Err: t.lastErr}
	hasGood := !t.goodAt.IsZero()
	switch {
	case hasGood && now.Sub(t.goodAt) > t.cfg.StaleAfter:
		s.Status = StatusStale
	case t.lastErr != "":
		s.Status = StatusError
	case hasGood:
		s.Status = StatusOK
	default:
		s.Status = StatusError
		s.Err = errNotSynced
	}
	return s
}

// Offset is the offset applied by Now (zero when disabled).
func (t *Tracker) Offset() time.Duration {
	if !t.cfg.Enabled {
		return 0
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.offset
}

// Now is the wall clock plus the last good offset (docs/time.md#time-tag).
func (t *Tracker) Now() time.Time { return t.clock.Now().Add(t.Offset()) }

// Clock is host time: Now is the tracker's Now (wall clock plus the
// offset), and its waits are the tracker clock's, on monotonic time
// (docs/timers.md, docs/time.md#ntp). Hand it to everything that reads or waits for time.
func (t *Tracker) Clock() timesource.Clock { return timesource.WithOffset(t.clock, t.Offset) }
