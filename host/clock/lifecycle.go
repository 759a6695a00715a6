package clock

import (
	"context"
	"fmt"
	"time"

	"github.com/chimehq/chime/storage"
)

// Sweep deletes expired tasks across all sessions (docs/clock-tool.md: now > dueAt +
// retention). An expired repeating task that still has runs left re-arms to
// its next occurrence instead. A due but undelivered task is kept until it
// expires. Orphaned reservation records are dropped too. It returns the
// number of tasks deleted.
func (e *Engine) Sweep(ctx context.Context, now time.Time) (int, error) {
	type ref struct{ session, id string }
	var expired []ref
	err := e.store.ScanTasks(func(t storage.ClockTask) error {
		if e.isExpired(t, now) {
			expired = append(expired, ref{t.SessionID, t.TaskID})
		}
		return ctx.Err()
	})
	if err != nil {
		return 0, fmt.Errorf("clock: sweep scan: %w", err)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	deleted := 0
	for _, r := range expired {
		err := e.store.Update(func(tx *storage.Tx) error {
			t, ok, err := tx.Task(r.session, r.id)
			if err != nil || !ok || !e.isExpired(t, now) { // changed since the scan
				return err
			}
			if t.Repeat != "" && !exhausted(t) && e.rearm(&t, now) {
				t.NotBeforeRequestID = ""
				t.UpdatedAt = now.UnixMilli()
				return tx.PutTask(t)
			}
			if _, err := tx.DeleteTask(r.session, r.id); err != nil {
				return err
			}
			deleted++
			return nil
		})
		if err != nil {
			return deleted, fmt.Errorf("clock: sweep task %s: %w", r.id, err)
		}
	}
	err = e.store.Update(func(tx *storage.Tx) error {
		rs, err := tx.Reservations()
		if err != nil {
			return err
		}
		for _, r := range rs {
			if now.UnixMilli()-r.ReservedAt > reservationGC.Milliseconds() {
				if _, err := tx.DeleteReservation(r.RequestID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return deleted, fmt.Errorf("clock: sweep reservations: %w", err)
	}
	return deleted, nil
}

// Run sweeps once at start (the startup scan) and then every SweepEvery
// until ctx ends. Sweep failures are logged; the loop keeps going.
func (e *Engine) Run(ctx context.Context) error {
	sweep := func() {
		if n, err := e.Sweep(ctx, e.now()); err != nil {
			if ctx.Err() == nil {
				e.log.Warn("clock: sweep failed", "err", err)
			}
		} else if n > 0 {
			e.log.Debug("clock: expired tasks deleted", "count", n)
		}
		if e.afterSweep != nil {
			e.afterSweep()
		}
	}
	sweep()
	tick := e.clock.NewTicker(e.cfg.SweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.Chan():
			sweep()
		}
	}
}

// NextDue returns the earliest instant at which a pending task of the
// session becomes due (dueAt − dueWindow) and could be injected into
// requestID's chain, for holds (docs/continuation.md#holds). Delivered, expired, blocked and
// foreign-reserved tasks are skipped. ok is false when there is none or on
// a storage error.
func (e *Engine) NextDue(ctx context.Context, sessionID, requestID string) (time.Time, bool) {
	if sessionID == "" {
		return time.Time{}, false
	}
	tasks, err := e.store.ListTasks(sessionID)
	if err != nil {
		e.log.Warn("clock: next due", "err", err)
		return time.Time{}, false
	}
	now := e.now()
	var best int64
	found := false
	for _, t := range tasks {
		if t.DeliveredAt != 0 || e.isExpired(t, now) || blockedFor(t, requestID) || e.reservedByOther(t, requestID, now) || awayInWake(t, requestID) {
			continue
		}
		at := t.DueAt - e.cfg.DueWindow.Milliseconds()
		if !found || at < best {
			best, found = at, true
		}
	}
	if !found {
		return time.Time{}, false
	}
	return time.UnixMilli(best), true
}
