package timers

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/chimehq/chime/storage"
)

// Errors of the timer operations; a tool call turns them into ok:false.
var (
	ErrNoSession = errors.New("no session: timers belong to a session, and this request has no session id")
	ErrUnknown   = errors.New("unknown timer")
	ErrTooMany   = errors.New("too many timers")
	ErrState     = errors.New("wrong state")
)

// stateError is ErrState with what the timer is.
func stateError(id, status, want string) error {
	return fmt.Errorf("%w: timer %s is %s; %s", ErrState, id, status, want)
}

func unknown(id string) error {
	return fmt.Errorf("%w %q in this session; call read_timer with timer_id \"\" to list them", ErrUnknown, id)
}

// Create starts a timer of total for the session.
func (m *Manager) Create(sessionID, reason string, total time.Duration) (storage.Timer, error) {
	if sessionID == "" {
		return storage.Timer{}, ErrNoSession
	}
	id := newTimerID()
	now := m.host.Now()
	t := &timer{index: -1, changed: make(chan struct{})}
	t.mu.Lock()
	defer t.mu.Unlock()
	m.mu.Lock()
	if len(m.perSes[sessionID]) >= m.cfg.MaxPerSession {
		m.mu.Unlock()
		return storage.Timer{}, fmt.Errorf("%w: this session has %d live timers, the most allowed; stop some first", ErrTooMany, m.cfg.MaxPerSession)
	}
	for m.live[key{sessionID, id}] != nil {
		id = newTimerID()
	}
	t.rec = storage.Timer{
		TimerID: id, SessionID: sessionID, Reason: reason,
		TotalMs: total.Milliseconds(), CreatedAt: now.UnixMilli(),
	}
	m.addLocked(t)
	m.mu.Unlock()

	t.deadline = m.mono.Now().Add(total)
	rec := m.record(t, "created", true)
	if err := m.persist(rec); err != nil {
		t.done = true
		m.forget(t)
		return storage.Timer{}, err
	}
	m.reschedule(t)
	return rec, nil
}

// Get returns a timer of the session, live or finished.
func (m *Manager) Get(sessionID, id string) (View, error) {
	if sessionID == "" {
		return View{}, ErrNoSession
	}
	if t := m.lookup(sessionID, id); t != nil {
		t.mu.Lock()
		defer t.mu.Unlock()
		return m.view(t), nil
	}
	rec, ok, err := m.cfg.Store.GetTimer(sessionID, id)
	if err != nil {
		return View{}, err
	}
	if !ok {
		return View{}, unknown(id)
	}
	return viewOf(rec), nil
}

// List returns the session's timers, live and finished, oldest first.
func (m *Manager) List(sessionID string) ([]View, error) {
	if sessionID == "" {
		return nil, ErrNoSession
	}
	recs, err := m.cfg.Store.ListTimers(sessionID)
	if err != nil {
		return nil, err
	}
	out := make([]View, 0, len(recs))
	for _, rec := range recs {
		if t := m.lookup(sessionID, rec.TimerID); t != nil {
			t.mu.Lock()
			out = append(out, m.view(t))
			t.mu.Unlock()
			continue
		}
		out = append(out, viewOf(rec))
	}
	return out, nil
}

// live returns the session's live timer id, or why it has none.
func (m *Manager) liveTimer(sessionID, id string) (*timer, error) {
	if sessionID == "" {
		return nil, ErrNoSession
	}
	if t := m.lookup(sessionID, id); t != nil {
		return t, nil
	}
	rec, ok, err := m.cfg.Store.GetTimer(sessionID, id)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return nil, unknown(id)
	}
	return nil, stateError(id, rec.Status, "it has finished")
}

// Stop kills a timer: Stopped, no notice. Waits on it end at once.
func (m *Manager) Stop(sessionID, id, reason string) (View, error) {
	return m.finishLive(sessionID, id, Stopped, orDefault(reason, "stop_timer"))
}

// Cancel stops waiting on a timer and keeps it running in the background:
// its completion becomes a notice. Waits on it end at once.
func (m *Manager) Cancel(sessionID, id, reason string) (View, error) {
	return m.change(sessionID, id, func(t *timer) (View, error) {
		t.rec.Background = true
		return m.commit(t, orDefault(reason, "cancel_timer"), true)
	})
}

// Pause freezes a timer's remaining time for d, after which it resumes by
// itself. Pausing a paused timer sets a new pause end.
func (m *Manager) Pause(sessionID, id string, d time.Duration, reason string) (View, error) {
	return m.change(sessionID, id, func(t *timer) (View, error) {
		now := m.mono.Now()
		if t.pauseEnd.IsZero() {
			t.rec.RemainingMs = t.remaining(now).Milliseconds()
		}
		t.pauseEnd = now.Add(d)
		return m.commit(t, orDefault(reason, "pause_timer"), true)
	})
}

// Resume ends a pause early.
func (m *Manager) Resume(sessionID, id, reason string) (View, error) {
	return m.change(sessionID, id, func(t *timer) (View, error) {
		if t.pauseEnd.IsZero() {
			return View{}, stateError(id, t.status(), "only a paused timer can be resumed")
		}
		m.unpause(t, m.mono.Now())
		return m.commit(t, orDefault(reason, "resume_timer"), true)
	})
}

// change runs fn on a live timer of the session under its lock; a timer
// that finished meanwhile is a wrong state.
func (m *Manager) change(sessionID, id string, fn func(*timer) (View, error)) (View, error) {
	t, err := m.liveTimer(sessionID, id)
	if err != nil {
		return View{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return View{}, stateError(id, t.rec.Status, "it has finished")
	}
	return fn(t)
}

// unpause restarts the count of a paused timer at now. Call with t.mu held.
func (m *Manager) unpause(t *timer, now time.Time) {
	t.deadline = now.Add(time.Duration(t.rec.RemainingMs) * time.Millisecond)
	t.pauseEnd = time.Time{}
}

// commit records and persists a transition of a live timer and moves its
// next event. Call with t.mu held.
func (m *Manager) commit(t *timer, reason string, force bool) (View, error) {
	rec := m.record(t, reason, force)
	m.reschedule(t)
	if err := m.persist(rec); err != nil {
		return m.view(t), err
	}
	return m.view(t), nil
}

// finishLive ends a live timer as status (Stopped), for the tools and API.
func (m *Manager) finishLive(sessionID, id, status, reason string) (View, error) {
	return m.change(sessionID, id, func(t *timer) (View, error) {
		return m.finish(t, status, reason, m.mono.Now())
	})
}

// finish makes t Completed or Stopped at mono time now and drops it from
// the live set. Call with t.mu held.
func (m *Manager) finish(t *timer, status, reason string, now time.Time) (View, error) {
	t.rec.RemainingMs = 0
	if status == Stopped {
		t.rec.RemainingMs = t.remaining(now).Milliseconds()
	}
	t.done = true
	t.pauseEnd = time.Time{}
	t.rec.Status = status
	t.rec.FinishedAt = m.host.Now().UnixMilli()
	t.rec.History = append(t.rec.History, storage.TimerTransition{At: t.rec.FinishedAt, Status: status, Reason: reason})
	rec := t.rec
	close(t.changed)
	t.changed = make(chan struct{})
	m.forget(t)
	if err := m.persist(rec); err != nil {
		return m.view(t), err
	}
	return m.view(t), nil
}

// fire applies t's due event at mono time now: a pause ends, or the timer
// completes (with its notice first, when in the background).
func (m *Manager) fire(ctx context.Context, t *timer, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.done {
		return
	}
	if !t.pauseEnd.IsZero() {
		if now.Before(t.pauseEnd) {
			m.reschedule(t)
			return
		}
		// The count resumes when the pause was due to end, not when the
		// scheduler got to it.
		m.unpause(t, t.pauseEnd)
		if _, err := m.commit(t, "pause ended", true); err != nil {
			m.log.Warn("timers: writing a resume failed", "timer", t.rec.TimerID, "err", err)
		}
		if now.Before(t.deadline) {
			return
		}
	}
	if now.Before(t.deadline) {
		m.reschedule(t)
		return
	}
	if t.rec.Background && t.waiters == 0 {
		if err := m.cfg.Notify(ctx, m.notice(t, now)); err != nil {
			// Keep it live: the next scheduler pass (within a minute) retries.
			m.log.Warn("timers: queueing a completion notice failed; retrying", "timer", t.rec.TimerID, "err", err)
			m.retryLater(t, now)
			return
		}
	}
	m.cfg.Fired(now.Sub(t.deadline))
	if _, err := m.finish(t, Completed, "time is up", now); err != nil {
		m.log.Warn("timers: writing a completion failed", "timer", t.rec.TimerID, "err", err)
	}
}

// retryLater puts t back on the heap a second from now.
func (m *Manager) retryLater(t *timer, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t.at = now.Add(time.Second)
	if t.index >= 0 {
		return
	}
	if _, ok := m.live[key{t.rec.SessionID, t.rec.TimerID}]; ok {
		heap.Push(&m.queue, t)
	}
}

// notice renders a background timer's completion (docs/timers.md#notices).
func (m *Manager) notice(t *timer, now time.Time) Notice {
	after := time.Duration(m.host.Now().UnixMilli()-t.rec.CreatedAt) * time.Millisecond
	after = after.Round(time.Second)
	reason := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", " ", "\r", " ").Replace(t.rec.Reason)
	return Notice{
		SessionID: t.rec.SessionID, TimerID: t.rec.TimerID, Reason: t.rec.Reason,
		Text:  fmt.Sprintf(`[timer completed: "%s" id=%s after %s]`, reason, t.rec.TimerID, after),
		After: after, At: m.host.Now(),
	}
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}
