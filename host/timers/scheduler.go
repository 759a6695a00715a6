package timers

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/chimehq/chime/storage"
)

// Run is the one scheduler of every timer: it sleeps until the earliest
// end or pause end (at most a minute, then looks again), applies what is
// due, and prunes finished timers past Retention once an hour. It returns
// when ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	nextPrune := m.mono.Now()
	for {
		select { // what a kick announced is computed below anyway
		case <-m.kick:
		default:
		}
		now := m.mono.Now()
		if !now.Before(nextPrune) {
			if n, err := m.Prune(ctx); err != nil {
				m.log.Warn("timers: pruning finished timers failed", "err", err)
			} else if n > 0 {
				m.log.Debug("timers: finished timers pruned", "count", n)
			}
			nextPrune = now.Add(time.Hour)
		}
		m.fireDue(ctx, now)
		wait := rearmEvery
		m.mu.Lock()
		if m.queue.Len() > 0 {
			wait = min(wait, m.queue[0].at.Sub(m.mono.Now()))
		}
		m.mu.Unlock()
		if wait > 0 {
			t := m.mono.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-m.kick:
				t.Stop()
			case <-t.Chan():
			}
		} else if ctx.Err() != nil {
			return nil
		}
	}
}

// fireDue applies every event due at now. Each firing writes through
// (its record, and a background timer's notice), and the store gives each
// write a disk sync of its own unless writes commit together: fired one
// after another, a burst of due timers queued behind one sync each
// (BenchmarkTimers10k's p99). So sessions fire together, at most
// fireTogether at once, and each session's timers one after another in
// the order they fell due, as their notices are queued.
func (m *Manager) fireDue(ctx context.Context, now time.Time) {
	var groups [][]*timer
	at := map[string]int{} // session → its index in groups
	m.mu.Lock()
	for m.queue.Len() > 0 && !m.queue[0].at.After(now) {
		t := heap.Pop(&m.queue).(*timer)
		i, ok := at[t.rec.SessionID] // set before the timer went live (addLocked)
		if !ok {
			i = len(groups)
			at[t.rec.SessionID] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], t)
	}
	m.mu.Unlock()
	fireAll := func(ts []*timer) {
		for _, t := range ts {
			m.fire(ctx, t, now)
		}
	}
	if len(groups) == 1 {
		fireAll(groups[0])
		return
	}
	slots := make(chan struct{}, fireTogether)
	var wg sync.WaitGroup
	for _, ts := range groups {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			fireAll(ts)
		})
	}
	wg.Wait()
}

// fireTogether bounds the sessions one scheduler pass fires at once.
const fireTogether = 16

// Restore loads the live timers of the store (docs/timers.md#restarts): a
// wait the restart cut goes to the background, a pause whose end passed has
// ended, and a timer whose end passed completes now (with its notice, if
// in the background). Call it once, before Run and before any tool call.
func (m *Manager) Restore(ctx context.Context) (restored, completed int, err error) {
	var recs []storage.Timer
	err = m.cfg.Store.ScanTimers(func(rec storage.Timer) error {
		if rec.Status != Completed && rec.Status != Stopped {
			recs = append(recs, rec)
		}
		return ctx.Err()
	})
	if err != nil {
		return 0, 0, err
	}
	hostNow, monoNow := m.host.Now(), m.mono.Now()
	for _, rec := range recs {
		t := &timer{rec: rec, index: -1, changed: make(chan struct{})}
		reason := "restored"
		if rec.Status == Waiting {
			// The held call died with the process; its client never got an
			// answer, so the completion must reach it as a notice.
			t.rec.Background = true
			reason = "restored; the wait was cut by a restart, notifying on completion"
		}
		if rec.Status == Paused {
			pauseUntil := time.UnixMilli(rec.PauseUntil)
			if pauseUntil.After(hostNow) {
				t.pauseEnd = monoNow.Add(pauseUntil.Sub(hostNow))
			} else {
				// The pause ended while the host was down: count from then.
				rest := time.Duration(rec.RemainingMs) * time.Millisecond
				t.deadline = monoNow.Add(pauseUntil.Add(rest).Sub(hostNow))
			}
		} else {
			t.deadline = monoNow.Add(time.UnixMilli(rec.EndAt).Sub(hostNow))
		}
		m.mu.Lock()
		m.addLocked(t)
		m.mu.Unlock()
		t.mu.Lock()
		_, cerr := m.commit(t, reason, rec.Status == Waiting)
		t.mu.Unlock()
		if cerr != nil {
			m.log.Warn("timers: writing a restored timer failed", "timer", rec.TimerID, "err", cerr)
		}
		restored++
		if t.pauseEnd.IsZero() && !monoNow.Before(t.deadline) {
			m.fire(ctx, t, monoNow)
			completed++
		}
	}
	return restored, completed, nil
}

// Prune deletes finished timers older than Retention.
func (m *Manager) Prune(ctx context.Context) (int, error) {
	cutoff := m.host.Now().Add(-m.cfg.Retention).UnixMilli()
	var old []storage.Timer
	err := m.cfg.Store.ScanTimers(func(rec storage.Timer) error {
		if (rec.Status == Completed || rec.Status == Stopped) && rec.FinishedAt < cutoff {
			old = append(old, rec)
		}
		return ctx.Err()
	})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, rec := range old {
		ok, err := m.cfg.Store.DeleteTimer(rec.SessionID, rec.TimerID)
		if err != nil {
			return n, err
		}
		if ok {
			n++
		}
	}
	return n, nil
}

// CompleteDue applies the session's due events now, without waiting for
// the scheduler: a request or a hold about to read the session's notices
// must not miss a completion that is a few milliseconds old.
func (m *Manager) CompleteDue(ctx context.Context, sessionID string) {
	now := m.mono.Now()
	for _, t := range m.sessionTimers(sessionID) {
		t.mu.Lock()
		due := !t.done && ((!t.pauseEnd.IsZero() && !now.Before(t.pauseEnd)) ||
			(t.pauseEnd.IsZero() && !now.Before(t.deadline)))
		t.mu.Unlock()
		if due {
			m.fire(ctx, t, now)
		}
	}
}

// NextNotice is when the session's earliest background timer ends, in
// host time: holds wait for it, and prepare's mayContinue counts it.
func (m *Manager) NextNotice(sessionID string) (time.Time, bool) {
	monoNow, hostNow := m.mono.Now(), m.host.Now()
	var best time.Time
	for _, t := range m.sessionTimers(sessionID) {
		t.mu.Lock()
		if !t.done && t.rec.Background && t.waiters == 0 && t.pauseEnd.IsZero() {
			at := hostNow.Add(t.deadline.Sub(monoNow))
			if best.IsZero() || at.Before(best) {
				best = at
			}
		}
		t.mu.Unlock()
	}
	return best, !best.IsZero()
}
