package clock

import (
	"context"
	"errors"
	"time"

	"github.com/chimehq/chime/storage"
)

// Notices are news another feature leaves for a session, such as a
// background timer's completion (docs/timers.md). They travel exactly like
// due reminders (docs/clock-tool.md#reservation-commit-and-rollback):
// reserved into the session's next request or a hold's followup, committed
// when the response starts, rolled back otherwise. The clock tool does not
// list, count, cancel or clear them.

// ErrNoticeID is returned for a notice id that cannot be a task id.
var ErrNoticeID = errors.New("clock: invalid notice id")

// AddNotice queues text for the session's next request, due at at. id
// makes it idempotent: a notice that exists already is left alone, so a
// completion applied twice (a restart between write and ack) is one notice.
func (e *Engine) AddNotice(ctx context.Context, sessionID, id, text string, at time.Time) error {
	if sessionID == "" {
		return ErrNoSession
	}
	if !storage.ValidTaskID(id) {
		return ErrNoticeID
	}
	// Without e.mu: a notice only creates its own key, so the read of that
	// key is all the transaction depends on, and Badger's conflict check
	// (retried by the store) covers two adds of one id. Taking the engine
	// lock would queue every session's notices behind one fsync each.
	return e.store.Update(func(tx *storage.Tx) error {
		if _, ok, err := tx.Task(sessionID, id); err != nil || ok {
			return err
		}
		now := e.now().UnixMilli()
		return tx.PutTask(storage.ClockTask{
			TaskID: id, SessionID: sessionID, DueAt: at.UnixMilli(),
			Notice: text, Task: text, CreatedAt: now, UpdatedAt: now,
		})
	})
}
