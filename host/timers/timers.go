// Package timers is the host's timer tools (docs/timers.md; seed 004): a
// model creates a timer and waits on it inside a server-tool call, so a
// wait for a build or a deploy costs no API call. The host holds the call,
// answers when the wait ends, and keeps the timer running between waits.
//
// One Manager serves every session. It keeps the live timers (Running,
// Waiting, Paused, Background) in memory, writes every transition through
// to the store, and runs one scheduler — a heap and one timer re-armed at
// least every minute — for all of them: a timer nobody waits on costs no
// goroutine. Waits run on monotonic time (Config.Mono), so an NTP step
// neither stretches nor cuts them; host time (Config.Clock) stamps the
// records a restart reads.
package timers

import (
	"container/heap"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

// Statuses of docs/timers.md's state machine.
const (
	Running    = "Running"    // counting down, nobody waiting
	Waiting    = "Waiting"    // a timer call is held on it
	Paused     = "Paused"     // frozen until its pause ends or resume_timer
	Background = "Background" // cancel_timer or a dropped wait: notify on completion
	Completed  = "Completed"
	Stopped    = "Stopped"
)

// Defaults of docs/timers.md.
const (
	// DefaultMaxWait is timerMaxWait: the longest one timer call is held.
	// The client's response is silent for the wait plus the followup's
	// time to first byte, and the shortest common idle cutoff is 300 s
	// (Codex CLI, Claude Code through a gateway, Node fetch: measured
	// 302.5 s); 180 s leaves 120 s for the followup
	// (docs/timers.md#idle-timeouts).
	DefaultMaxWait = 180 * time.Second
	// DefaultMaxDuration bounds total_duration and pause_duration.
	DefaultMaxDuration = 7 * 24 * time.Hour
	// DefaultMaxPerSession bounds a session's live timers.
	DefaultMaxPerSession = 50
	// DefaultRetention keeps a finished timer (and its history) a day.
	DefaultRetention = 24 * time.Hour
	// rearmEvery re-arms the scheduler at least this often, so a stalled
	// or skewed timer source cannot strand a timer for long.
	rearmEvery = 60 * time.Second
)

// Notice is a background timer's completion, for the session's next
// request (docs/timers.md#notices) and, later, the delivery queue.
type Notice struct {
	SessionID string
	TimerID   string
	Reason    string
	// Text is the user text: [timer completed: "<reason>" id=<id> after <d>].
	Text string
	// After is the timer's total duration plus its pauses: creation to end.
	After time.Duration
	At    time.Time // host time of completion
}

// Config wires a Manager. Store is required.
type Config struct {
	Store *storage.Store
	// Clock is host time with the NTP offset: record times and restarts.
	Clock timesource.Clock
	// Mono is what waits run on: the clock without the NTP offset, whose
	// readings are monotonic. Default Clock.
	Mono          timesource.Clock
	MaxWait       time.Duration
	MaxDuration   time.Duration
	MaxPerSession int
	Retention     time.Duration
	// Notify receives each background completion before the timer is
	// written Completed, so a crash in between repeats it on restart
	// (Notify must be idempotent by TimerID). An error keeps the timer
	// live and retries on the next tick.
	Notify func(context.Context, Notice) error
	// Fired, if set, observes every completion: how late it fired against
	// its due time on the monotonic clock.
	Fired func(late time.Duration)
	// Changed, if set, is told the session of every transition written
	// (the dashboard's change stream). It must not block.
	Changed func(sessionID string)
	Logger  *slog.Logger
}

// Manager runs every session's timers. It is safe for concurrent use.
type Manager struct {
	cfg  Config
	log  *slog.Logger
	host timesource.Clock
	mono timesource.Clock

	mu     sync.Mutex // guards live, perSes and queue; taken after a timer's mu
	live   map[key]*timer
	perSes map[string]map[string]*timer // session → its live timers
	queue  timerHeap
	kick   chan struct{} // the scheduler's next event moved earlier
}

type key struct{ session, id string }

// timer is one live timer. Its mu guards everything but the heap fields.
type timer struct {
	mu  sync.Mutex
	rec storage.Timer
	// deadline (running) or pauseEnd (paused), on the Mono clock.
	deadline time.Time
	pauseEnd time.Time
	waiters  int
	// changed is closed and replaced on every transition: waiters watch it.
	changed chan struct{}
	done    bool // Completed or Stopped; no longer in Manager.live

	// heap fields, guarded by Manager.mu
	at    time.Time
	index int
}

// New checks cfg and fills its defaults. Call Restore, then Run.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("timers: Config.Store is required")
	}
	cfg.Clock = timesource.OrReal(cfg.Clock)
	if cfg.Mono == nil {
		cfg.Mono = cfg.Clock
	}
	setDefault(&cfg.MaxWait, DefaultMaxWait)
	setDefault(&cfg.MaxDuration, DefaultMaxDuration)
	setDefault(&cfg.Retention, DefaultRetention)
	if cfg.MaxPerSession <= 0 {
		cfg.MaxPerSession = DefaultMaxPerSession
	}
	if cfg.Notify == nil {
		cfg.Notify = func(context.Context, Notice) error { return nil }
	}
	if cfg.Fired == nil {
		cfg.Fired = func(time.Duration) {}
	}
	if cfg.Changed == nil {
		cfg.Changed = func(string) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Manager{
		cfg: cfg, log: cfg.Logger, host: cfg.Clock, mono: cfg.Mono,
		live: map[key]*timer{}, perSes: map[string]map[string]*timer{}, kick: make(chan struct{}, 1),
	}, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

// MaxWait is timerMaxWait.
func (m *Manager) MaxWait() time.Duration { return m.cfg.MaxWait }

// Live reports how many timers are live (tests, metrics).
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.live)
}

// LiveIn reports how many of a session's timers are live (the
// dashboard's session list).
func (m *Manager) LiveIn(sessionID string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.perSes[sessionID])
}

func newTimerID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "tmr_" + hex.EncodeToString(b[:])
}

// status derives a live timer's status from its state.
func (t *timer) status() string {
	switch {
	case t.done:
		return t.rec.Status
	case !t.pauseEnd.IsZero():
		return Paused
	case t.waiters > 0:
		return Waiting
	case t.rec.Background:
		return Background
	}
	return Running
}

// remaining is what is left to count, at mono time now.
func (t *timer) remaining(now time.Time) time.Duration {
	switch {
	case t.done:
		return time.Duration(t.rec.RemainingMs) * time.Millisecond
	case !t.pauseEnd.IsZero():
		return time.Duration(t.rec.RemainingMs) * time.Millisecond
	}
	return max(0, t.deadline.Sub(now))
}

// record appends a transition when the status changed (or always, when
// force: a create, a continue), wakes the waiters, and returns the record
// to persist with the host-time fields brought up to date.
func (m *Manager) record(t *timer, reason string, force bool) storage.Timer {
	hostNow, monoNow := m.host.Now(), m.mono.Now()
	st := t.status()
	if force || st != t.rec.Status {
		t.rec.History = append(t.rec.History, storage.TimerTransition{At: hostNow.UnixMilli(), Status: st, Reason: reason})
	}
	t.rec.Status = st
	switch {
	case t.done:
		t.rec.EndAt, t.rec.PauseUntil = 0, 0
	case !t.pauseEnd.IsZero():
		t.rec.EndAt = 0
		t.rec.PauseUntil = hostNow.Add(t.pauseEnd.Sub(monoNow)).UnixMilli()
	default:
		t.rec.RemainingMs, t.rec.PauseUntil = 0, 0
		t.rec.EndAt = hostNow.Add(t.deadline.Sub(monoNow)).UnixMilli()
	}
	close(t.changed)
	t.changed = make(chan struct{})
	return t.rec
}

// persist writes rec through (docs/timers.md: every transition).
func (m *Manager) persist(rec storage.Timer) error {
	if err := m.cfg.Store.PutTimer(rec); err != nil {
		return fmt.Errorf("timers: write %s: %w", rec.TimerID, err)
	}
	m.cfg.Changed(rec.SessionID)
	return nil
}

// reschedule puts t's next event (its end, or its pause's end) on the
// heap, or takes it off when it has none. Call with t.mu held.
func (m *Manager) reschedule(t *timer) {
	var at time.Time
	switch {
	case t.done:
	case !t.pauseEnd.IsZero():
		at = t.pauseEnd
	default:
		at = t.deadline
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if at.IsZero() {
		if t.index >= 0 {
			heap.Remove(&m.queue, t.index)
		}
		return
	}
	earliest := m.queue.Len() == 0 || at.Before(m.queue[0].at)
	t.at = at
	if t.index >= 0 {
		heap.Fix(&m.queue, t.index)
	} else {
		heap.Push(&m.queue, t)
	}
	if earliest {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

// forget drops a finished timer from the live set. Call with t.mu held.
func (m *Manager) forget(t *timer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := key{t.rec.SessionID, t.rec.TimerID}
	if m.live[k] == t {
		delete(m.live, k)
		delete(m.perSes[k.session], k.id)
		if len(m.perSes[k.session]) == 0 {
			delete(m.perSes, k.session)
		}
	}
	if t.index >= 0 {
		heap.Remove(&m.queue, t.index)
	}
}

// add makes t live. Call with m.mu held.
func (m *Manager) addLocked(t *timer) {
	k := key{t.rec.SessionID, t.rec.TimerID}
	m.live[k] = t
	ses := m.perSes[k.session]
	if ses == nil {
		ses = map[string]*timer{}
		m.perSes[k.session] = ses
	}
	ses[k.id] = t
}

// sessionTimers returns the session's live timers.
func (m *Manager) sessionTimers(sessionID string) []*timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]*timer, 0, len(m.perSes[sessionID]))
	for _, t := range m.perSes[sessionID] {
		out = append(out, t)
	}
	return out
}

// lookup returns a live timer of the session.
func (m *Manager) lookup(sessionID, id string) *timer {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.live[key{sessionID, id}]
}

// timerHeap orders live timers by their next event.
type timerHeap []*timer

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	t.index = -1
	*h = old[:len(old)-1]
	return t
}
