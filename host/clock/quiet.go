package clock

import (
	"time"

	"github.com/chimehq/chime/storage"
)

// QuietUntil is the earliest time at which one of a session's tasks may
// be reserved by a prepare, or make a stop finish worth a hold
// (ReserveAndPendingFrom's pending), if nothing writes them first; the
// zero time when none ever will. Before it, a prepare of the session
// reserves nothing and reports nothing pending (docs/architecture.md#skipping-prepare).
// Delivered and expired tasks come back only through a write (a commit
// re-arms, a rollback releases); a task reserved by a request may be
// released by time alone (the reservation expires), so it answers now.
func (e *Engine) QuietUntil(tasks []storage.ClockTask, now time.Time) time.Time {
	var until time.Time
	for _, t := range tasks {
		if t.DeliveredAt != 0 || e.isExpired(t, now) {
			continue
		}
		if t.ReservedBy != "" || e.cfg.PendingHorizon <= 0 {
			return now
		}
		at := time.UnixMilli(t.DueAt - e.cfg.DueWindow.Milliseconds()).Add(-e.cfg.PendingHorizon)
		if !at.After(now) {
			return now
		}
		if until.IsZero() || at.Before(until) {
			until = at
		}
	}
	return until
}
