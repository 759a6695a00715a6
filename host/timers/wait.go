package timers

import (
	"context"
	"time"

	"github.com/chimehq/chime/storage"
)

// View is a timer as the tools, the API and the dashboard show it.
type View struct {
	TimerID    string
	SessionID  string
	Status     string
	Reason     string
	Background bool
	Total      time.Duration
	Remaining  time.Duration
	// Elapsed is the time counted so far: Total − Remaining.
	Elapsed time.Duration
	// Host times; zero when not applicable.
	CreatedAt, EndAt, PauseUntil, FinishedAt time.Time
	History                                  []storage.TimerTransition
}

// Waited is how a wait ended.
type Waited struct {
	// TimedOut: the wait's timeout passed with the timer still counting.
	TimedOut bool
	// Left: the caller went away (a client disconnect, the chain guard).
	Left bool
	// For is how long the call was held; Limit is what it was allowed.
	For, Limit time.Duration
	// Clamped: the asked timeout was above timerMaxWait.
	Clamped bool
}

// view is a live timer's View now. Call with t.mu held.
func (m *Manager) view(t *timer) View {
	v := viewOf(t.rec)
	if t.done {
		return v
	}
	v.Status = t.status()
	v.Remaining = t.remaining(m.mono.Now())
	v.Elapsed = max(0, v.Total-v.Remaining)
	return v
}

// viewOf is a stored timer's View (a finished one, or a record read back).
func viewOf(rec storage.Timer) View {
	v := View{
		TimerID: rec.TimerID, SessionID: rec.SessionID, Status: rec.Status, Reason: rec.Reason,
		Background: rec.Background, Total: time.Duration(rec.TotalMs) * time.Millisecond,
		Remaining: time.Duration(rec.RemainingMs) * time.Millisecond,
		CreatedAt: msTime(rec.CreatedAt), EndAt: msTime(rec.EndAt),
		PauseUntil: msTime(rec.PauseUntil), FinishedAt: msTime(rec.FinishedAt),
		History: append([]storage.TimerTransition(nil), rec.History...),
	}
	v.Elapsed = max(0, v.Total-v.Remaining)
	return v
}

func msTime(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// Wait holds the caller on a timer of the session (docs/timers.md): for
// timeout, clamped to timerMaxWait and to what the timer has left
// (timeout 0 means as long as allowed). It returns when the timer
// completes or is stopped, when cancel_timer sends it to the background,
// when the time runs out, or when ctx ends — then the caller is gone, and
// the timer goes to the background to notify on completion. Waiting on a
// completed timer answers at once.
func (m *Manager) Wait(ctx context.Context, sessionID, id string, timeout time.Duration) (View, Waited, error) {
	limit := m.cfg.MaxWait
	w := Waited{Clamped: timeout > limit}
	if timeout > 0 && timeout < limit {
		limit = timeout
	}
	t, err := m.liveTimer(sessionID, id)
	if err != nil {
		if v, gerr := m.Get(sessionID, id); gerr == nil && v.Status == Completed {
			return v, w, nil
		}
		return View{}, w, err
	}
	t.mu.Lock()
	if t.done {
		defer t.mu.Unlock()
		if t.rec.Status == Completed {
			return m.view(t), w, nil
		}
		return View{}, w, stateError(id, t.rec.Status, "it has finished")
	}
	start := m.mono.Now()
	if t.pauseEnd.IsZero() {
		limit = min(limit, t.remaining(start))
	}
	w.Limit = limit
	t.waiters++
	t.rec.Background = false
	if _, err := m.commit(t, "timer call waiting", false); err != nil {
		m.log.Warn("timers: writing a wait failed", "timer", id, "err", err)
	}
	changed := t.changed
	t.mu.Unlock()

	clock := m.mono.NewTimer(limit)
	defer clock.Stop()
	for {
		select {
		case <-changed:
			t.mu.Lock()
			if t.done || t.rec.Background { // finished, or cancel_timer
				return m.endWait(t, w, start)
			}
			changed = t.changed
			t.mu.Unlock()
			continue
		case <-clock.Chan():
			w.TimedOut = true
		case <-ctx.Done():
			w.Left = true
		}
		t.mu.Lock()
		return m.endWait(t, w, start)
	}
}

// endWait releases one waiter of t and records what the timer is now.
// Call with t.mu held; it unlocks.
func (m *Manager) endWait(t *timer, w Waited, start time.Time) (View, Waited, error) {
	defer t.mu.Unlock()
	now := m.mono.Now()
	w.For = now.Sub(start)
	t.waiters--
	if t.done {
		w.TimedOut = false
		return m.view(t), w, nil
	}
	if t.pauseEnd.IsZero() && !now.Before(t.deadline) {
		// The timeout and the end coincide: the timer is done, say so
		// rather than "timed out with 0 s left".
		w.TimedOut = false
		v, err := m.finish(t, Completed, "time is up", now)
		m.cfg.Fired(now.Sub(t.deadline))
		return v, w, err
	}
	reason := "wait timed out"
	switch {
	case w.Left:
		t.rec.Background = true
		reason = "the caller left; notifying on completion"
	case t.rec.Background:
		reason = "waiting cancelled"
		w.TimedOut = false
	}
	v, err := m.commit(t, reason, false)
	return v, w, err
}
