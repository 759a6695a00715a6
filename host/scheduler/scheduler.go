// Package scheduler is chime's one alarm clock (docs/scheduler.md): every
// reason a session should act without a client request — a heartbeat
// interval, a cron job, a clock task coming due, a background timer
// ending, a manual or hook wake — becomes RequestWake(session, reason).
// Wakes of one session within the coalescing window merge into one run
// with the highest reason; runs of one session never overlap; runs of
// different sessions go concurrently up to MaxConcurrentRuns; a failed run
// is retried after a second, then with the cron backoff.
//
// The scheduler only decides when; what a run does is the Runner's (the
// host's wake run). Heartbeat intervals live in the same timer structure:
// one heap for the whole host, re-armed at least every minute so that a
// long sleep does not drift.
package scheduler

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/chimehq/chime/host/cron"
	"github.com/chimehq/chime/internal/timesource"
)

// Reason says why a session is woken.
type Reason string

// The reasons of docs/scheduler.md, with their priorities.
const (
	ReasonRetry    Reason = "retry"    // a failed run again: priority 0
	ReasonInterval Reason = "interval" // the heartbeat: 1
	ReasonCron     Reason = "cron"     // a cron job (target main): 2
	ReasonTask     Reason = "task"     // a clock task came due: 2
	ReasonTimer    Reason = "timer"    // a background timer ended: 2
	ReasonMessage  Reason = "message"  // a system event was queued: 2
	ReasonManual   Reason = "manual"   // dashboard, CLI, API: 3
	ReasonHook     Reason = "hook"     // POST /api/sessions/{id}/wake: 3
)

// Priority orders reasons; a coalesced run keeps the highest.
func (r Reason) Priority() int {
	switch r {
	case ReasonRetry:
		return 0
	case ReasonInterval:
		return 1
	case ReasonManual, ReasonHook:
		return 3
	}
	return 2
}

// Valid reports whether r is one of the known reasons.
func (r Reason) Valid() bool {
	switch r {
	case ReasonRetry, ReasonInterval, ReasonCron, ReasonTask, ReasonTimer, ReasonMessage, ReasonManual, ReasonHook:
		return true
	}
	return false
}

// Defaults of docs/scheduler.md.
const (
	DefaultCoalesce      = 250 * time.Millisecond
	DefaultMaxConcurrent = 8
	FirstRetry           = time.Second
	RearmEvery           = 60 * time.Second
)

// RetryDelay is how long a session waits after its n-th consecutive
// failed run: a second after the first, then Backoff(n-1).
func RetryDelay(n int) time.Duration {
	if n <= 1 {
		return FirstRetry
	}
	return cron.Backoff(n - 1) // the cron failure backoff
}

// Outcome is what a run tells the scheduler.
type Outcome struct {
	// Failed runs are retried (RetryDelay); the reason is kept.
	Failed bool
	// Defer asks for the same wake again after this long, without counting
	// a failure (the session is busy with its client).
	Defer time.Duration
}

// Runner performs one wake run of a session. Runs of one session never
// overlap. attempt counts consecutive failures before this run.
type Runner interface {
	Run(ctx context.Context, sessionID string, reason Reason, attempt int) Outcome
}

// RunnerFunc adapts a function to Runner.
type RunnerFunc func(ctx context.Context, sessionID string, reason Reason, attempt int) Outcome

// Run calls f.
func (f RunnerFunc) Run(ctx context.Context, sid string, r Reason, attempt int) Outcome {
	return f(ctx, sid, r, attempt)
}

// Config wires a Scheduler. Runner is required.
type Config struct {
	Runner Runner
	// Clock is what the scheduler waits on; default the real clock.
	Clock         timesource.Clock
	Coalesce      time.Duration
	MaxConcurrent int
	// Observe, when set, is told each run's lateness against its due time
	// (the end of its coalescing window or its retry time).
	Observe func(reason Reason, late time.Duration)
	Logger  *slog.Logger
}

// Scheduler holds every session's pending wake and heartbeat. It is safe
// for concurrent use. Run drives it.
type Scheduler struct {
	cfg   Config
	clock timesource.Clock
	log   *slog.Logger

	mu       sync.Mutex
	sessions map[string]*session
	queue    alarms
	ready    []string // sessions due and waiting for a run slot, in priority order
	running  int
	kick     chan struct{}
	runCtx   context.Context
	wg       sync.WaitGroup
}

// session is one session's scheduling state.
type session struct {
	id string
	// The pending wake, if any.
	pending bool
	reason  Reason
	dueAt   time.Time
	wakeGen uint64
	queued  bool // in ready
	running bool
	// failures counts consecutive failed runs.
	failures int
	// Heartbeat: 0 = off.
	every  time.Duration
	hbNext time.Time
	hbGen  uint64
	// The one-shot alarm of WakeAt (the next clock task due).
	atReason Reason
	atTime   time.Time
	atGen    uint64
}

const (
	kindWake uint8 = iota
	kindHeartbeat
	kindAt
)

type alarm struct {
	at   time.Time
	sid  string
	kind uint8
	gen  uint64
}

type alarms []alarm

func (a alarms) Len() int           { return len(a) }
func (a alarms) Less(i, j int) bool { return a[i].at.Before(a[j].at) }
func (a alarms) Swap(i, j int)      { a[i], a[j] = a[j], a[i] }
func (a *alarms) Push(x any)        { *a = append(*a, x.(alarm)) }
func (a *alarms) Pop() any {
	old := *a
	x := old[len(old)-1]
	*a = old[:len(old)-1]
	return x
}

// New checks cfg and fills its defaults.
func New(cfg Config) *Scheduler {
	if cfg.Runner == nil {
		panic("scheduler: Config.Runner is required")
	}
	cfg.Clock = timesource.OrReal(cfg.Clock)
	if cfg.Coalesce <= 0 {
		cfg.Coalesce = DefaultCoalesce
	}
	if cfg.MaxConcurrent <= 0 {
		cfg.MaxConcurrent = DefaultMaxConcurrent
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Scheduler{
		cfg: cfg, clock: cfg.Clock, log: cfg.Logger,
		sessions: map[string]*session{}, kick: make(chan struct{}, 1),
		runCtx: context.Background(),
	}
}

func (s *Scheduler) get(sid string) *session {
	st := s.sessions[sid]
	if st == nil {
		st = &session{id: sid}
		s.sessions[sid] = st
	}
	return st
}

// forget drops a session's state when nothing refers to it any more.
func (s *Scheduler) forget(st *session) {
	if !st.pending && !st.running && !st.queued && st.every == 0 && st.failures == 0 && st.atTime.IsZero() {
		delete(s.sessions, st.id)
	}
}

func (s *Scheduler) wakeUp() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// RequestWake asks for a run of the session. Within the coalescing window
// it merges with a pending wake, which keeps the higher reason; a pending
// retry is brought forward to the window's end.
func (s *Scheduler) RequestWake(sid string, reason Reason) {
	if sid == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requestLocked(s.get(sid), reason, s.clock.Now().Add(s.cfg.Coalesce))
}

func (s *Scheduler) requestLocked(st *session, reason Reason, at time.Time) {
	if st.pending {
		if reason.Priority() > st.reason.Priority() {
			st.reason = reason
		}
		if st.queued || !at.Before(st.dueAt) {
			return
		}
	} else {
		st.pending, st.reason = true, reason
	}
	st.dueAt = at
	st.wakeGen++
	heap.Push(&s.queue, alarm{at: at, sid: st.id, kind: kindWake, gen: st.wakeGen})
	s.wakeUp()
}

// SetHeartbeat turns the session's interval wakes on (every > 0, first at
// first) or off (every = 0).
func (s *Scheduler) SetHeartbeat(sid string, every time.Duration, first time.Time) {
	if sid == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(sid)
	st.hbGen++
	st.every = every
	if every <= 0 {
		st.every, st.hbNext = 0, time.Time{}
		s.forget(st)
		return
	}
	st.hbNext = first
	heap.Push(&s.queue, alarm{at: first, sid: sid, kind: kindHeartbeat, gen: st.hbGen})
	s.wakeUp()
}

// WakeAt sets the session's one-shot alarm: a wake with reason at at (a
// zero at clears it). A later call replaces the earlier alarm; the host
// sets it to the session's next clock task due.
func (s *Scheduler) WakeAt(sid string, at time.Time, reason Reason) {
	if sid == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.get(sid)
	st.atGen++
	st.atTime, st.atReason = at, reason
	if at.IsZero() {
		s.forget(st)
		return
	}
	heap.Push(&s.queue, alarm{at: at, sid: sid, kind: kindAt, gen: st.atGen})
	s.wakeUp()
}

// NextHeartbeat reports when the session's next interval wake is due.
func (s *Scheduler) NextHeartbeat(sid string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sessions[sid]
	if st == nil || st.every == 0 {
		return time.Time{}, false
	}
	return st.hbNext, true
}

// Pending reports the session's pending wake, if any.
func (s *Scheduler) Pending(sid string) (Reason, time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.sessions[sid]
	if st == nil || !st.pending {
		return "", time.Time{}, false
	}
	return st.reason, st.dueAt, true
}

// Run drives the scheduler until ctx ends, then waits for the runs in
// flight (their ctx is cancelled).
func (s *Scheduler) Run(ctx context.Context) error {
	s.mu.Lock()
	s.runCtx = ctx
	s.mu.Unlock()
	defer s.wg.Wait()
	for {
		s.fire(s.clock.Now())
		wait := RearmEvery
		if at, ok := s.firstAlarm(); ok {
			wait = min(wait, at.Sub(s.clock.Now()))
		}
		if wait <= 0 {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		t := s.clock.NewTimer(wait)
		// The wait was measured before the timer started: a clock that
		// moved meanwhile (a paused machine, a fake clock in tests) may
		// be past the first alarm already, and the timer later than it.
		if at, ok := s.firstAlarm(); ok && !at.After(s.clock.Now()) {
			t.Stop()
			continue
		}
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-s.kick:
			t.Stop()
		case <-t.Chan():
		}
	}
}

// firstAlarm is the time of the earliest alarm; false when none is set.
func (s *Scheduler) firstAlarm() (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.queue.Len() == 0 {
		return time.Time{}, false
	}
	return s.queue[0].at, true
}

// fire handles every alarm due at now.
func (s *Scheduler) fire(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.queue.Len() > 0 && !s.queue[0].at.After(now) {
		a := heap.Pop(&s.queue).(alarm)
		st := s.sessions[a.sid]
		if st == nil {
			continue
		}
		switch a.kind {
		case kindHeartbeat:
			if a.gen != st.hbGen || st.every == 0 {
				continue
			}
			// The next beat counts from this one; a host that slept past
			// several is not owed a backlog.
			next := a.at.Add(st.every)
			if !next.After(now) {
				next = now.Add(st.every)
			}
			st.hbNext = next
			heap.Push(&s.queue, alarm{at: next, sid: st.id, kind: kindHeartbeat, gen: st.hbGen})
			s.requestLocked(st, ReasonInterval, now.Add(s.cfg.Coalesce))
		case kindAt:
			if a.gen != st.atGen || st.atTime.IsZero() {
				continue
			}
			reason := st.atReason
			st.atTime = time.Time{}
			s.requestLocked(st, reason, now.Add(s.cfg.Coalesce))
		case kindWake:
			if a.gen != st.wakeGen || !st.pending || st.queued {
				continue
			}
			if st.running {
				continue // started again when the run ends
			}
			s.enqueueLocked(st)
		}
	}
	s.startLocked()
}

// enqueueLocked puts a due session in the ready list, after those of equal
// or higher priority.
func (s *Scheduler) enqueueLocked(st *session) {
	st.queued = true
	p := st.reason.Priority()
	i := len(s.ready)
	for i > 0 && s.sessions[s.ready[i-1]].reason.Priority() < p {
		i--
	}
	s.ready = append(s.ready, "")
	copy(s.ready[i+1:], s.ready[i:])
	s.ready[i] = st.id
}

// startLocked starts runs while slots are free.
func (s *Scheduler) startLocked() {
	for s.running < s.cfg.MaxConcurrent && len(s.ready) > 0 {
		st := s.sessions[s.ready[0]]
		s.ready = s.ready[1:]
		st.queued = false
		reason, due, attempt := st.reason, st.dueAt, st.failures
		st.pending, st.running = false, true
		s.running++
		if s.cfg.Observe != nil {
			s.cfg.Observe(reason, max(s.clock.Now().Sub(due), 0))
		}
		s.wg.Add(1)
		go s.run(s.runCtx, st, reason, attempt)
	}
}

func (s *Scheduler) run(ctx context.Context, st *session, reason Reason, attempt int) {
	defer s.wg.Done()
	out := s.cfg.Runner.Run(ctx, st.id, reason, attempt)
	s.mu.Lock()
	defer s.mu.Unlock()
	st.running = false
	s.running--
	now := s.clock.Now()
	switch {
	case ctx.Err() != nil:
		// Shutting down: the wake is not owed again in this process.
	case out.Failed:
		st.failures++
		d := RetryDelay(st.failures)
		s.log.Debug("wake run failed; retrying", "session", st.id, "reason", reason, "failures", st.failures, "in", d)
		s.requestLocked(st, ReasonRetry, now.Add(d))
	case out.Defer > 0:
		s.requestLocked(st, reason, now.Add(out.Defer))
	default:
		st.failures = 0
	}
	if st.pending && !st.queued && !st.dueAt.After(now) {
		s.enqueueLocked(st) // requested while running and already due
	}
	s.forget(st)
	s.startLocked()
}

// Len reports how many sessions the scheduler holds state for.
func (s *Scheduler) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sessions)
}
