package clock

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/chimehq/chime/storage"
)

// Reminder is a due task reserved for injection into one request.
type Reminder struct {
	TaskID    string
	SessionID string
	Task      string
	Tool      string
	Arguments string // compact JSON text or ""
	Repeat    string
	DueAt     time.Time
	// Notice is a notice's text, injected verbatim (notice.go).
	Notice string
}

// ErrNoRequestID is returned by Reserve without a request id: a reservation
// must be committed or rolled back by id.
var ErrNoRequestID = errors.New("clock: request id required")

// Reserve marks the session's due tasks as reserved by requestID and returns
// them for injection (docs/clock-tool.md#reservation-commit-and-rollback). A task is due when now >= dueAt −
// dueWindow, not expired, not delivered, not blocked for this request by
// notBeforeRequestId, and not reserved by another request within
// ReservationTTL. Reserving again for the same request is idempotent. No
// session means nothing to inject.
func (e *Engine) Reserve(ctx context.Context, sessionID, requestID string, now time.Time) ([]Reminder, error) {
	out, _, err := e.ReserveAndPending(ctx, sessionID, requestID, now)
	return out, err
}

// ReserveAndPending is Reserve that also reports, from the same read,
// whether another task could still reach a followup of this request:
// undelivered, unexpired, not blocked for the chain, not reserved
// elsewhere and not just reserved by this request. Prepare answers it as
// PrepareResponse.MayContinue without listing the session's tasks twice.
func (e *Engine) ReserveAndPending(ctx context.Context, sessionID, requestID string, now time.Time) ([]Reminder, bool, error) {
	if sessionID == "" {
		return nil, false, nil
	}
	if requestID == "" {
		return nil, false, ErrNoRequestID
	}
	// Read first, outside the lock: most requests have nothing due and must
	// neither write nor wait behind another request's synchronous write.
	// The transaction below re-checks under the lock.
	tasks, err := e.store.ListTasks(sessionID)
	if err != nil {
		return nil, false, err
	}
	return e.ReserveAndPendingFrom(sessionID, requestID, now, tasks)
}

// ReserveAndPendingFrom is ReserveAndPending with the session's tasks
// already read (the prepare call reads the session in one snapshot); the
// reservation itself re-reads them under the lock.
func (e *Engine) ReserveAndPendingFrom(sessionID, requestID string, now time.Time, tasks []storage.ClockTask) ([]Reminder, bool, error) {
	if sessionID == "" {
		return nil, false, nil
	}
	if requestID == "" {
		return nil, false, ErrNoRequestID
	}
	pending := slices.ContainsFunc(tasks, func(t storage.ClockTask) bool { return e.pendingForChain(t, requestID, now) })
	if !slices.ContainsFunc(tasks, func(t storage.ClockTask) bool { return e.injectable(t, requestID, now) }) {
		return nil, pending, nil
	}
	out, err := e.reserve(sessionID, requestID, now)
	return out, pending, err
}

// pendingForChain: t may still be delivered to a followup of requestID.
func (e *Engine) pendingForChain(t storage.ClockTask, requestID string, now time.Time) bool {
	if h := e.cfg.PendingHorizon; h > 0 && t.DueAt-e.cfg.DueWindow.Milliseconds() > now.Add(h).UnixMilli() {
		return false // too far off for a hold of this chain
	}
	return t.DeliveredAt == 0 && !e.isExpired(t, now) && !blockedFor(t, requestID+":") &&
		!e.reservedByOther(t, requestID, now) && !e.injectable(t, requestID, now)
}

// reserve marks the tasks due for requestID as reserved by it, re-checking
// under the lock.
func (e *Engine) reserve(sessionID, requestID string, now time.Time) ([]Reminder, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Reminder
	err := e.store.Update(func(tx *storage.Tx) error {
		out = nil
		r, ok, err := tx.Reservation(requestID)
		if err != nil {
			return err
		}
		if ok && r.RolledBack {
			// The filter gave up on this request and rolled it back
			// before this (late) prepare got here: reserve nothing.
			e.log.Info("clock: prepare after its rollback; no reminders reserved", "request", requestID)
			return nil
		}
		tasks, err := tx.Tasks(sessionID)
		if err != nil {
			return err
		}
		var ids []string
		for _, t := range tasks {
			if !e.injectable(t, requestID, now) {
				continue
			}
			t.ReservedBy, t.ReservedAt = requestID, now.UnixMilli()
			if err := tx.PutTask(t); err != nil {
				return err
			}
			ids = append(ids, t.TaskID)
			out = append(out, Reminder{
				TaskID: t.TaskID, SessionID: t.SessionID, Task: t.Task, Tool: t.Tool,
				Arguments: t.Arguments, Repeat: t.Repeat, DueAt: e.dueTime(t), Notice: t.Notice,
			})
		}
		if !ok {
			r = storage.Reservation{RequestID: requestID, SessionID: sessionID}
		}
		for _, id := range ids {
			if !slices.Contains(r.TaskIDs, id) {
				r.TaskIDs = append(r.TaskIDs, id)
			}
		}
		r.ReservedAt = now.UnixMilli()
		return tx.PutReservation(r)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (e *Engine) injectable(t storage.ClockTask, requestID string, now time.Time) bool {
	return e.isDue(t, now) && !e.isExpired(t, now) && t.DeliveredAt == 0 &&
		!blockedFor(t, requestID) && !e.reservedByOther(t, requestID, now) && !awayInWake(t, requestID)
}

// Wake runs and what they deliver (docs/scheduler.md): a wake's request
// ids start with WakePrefix, and a reply delivered to the session
// connector is a notice whose id starts with AwayPrefix. Such a notice is
// for the client's next request; a wake never takes it, or the reply
// would go back to the model instead of the user.
const (
	WakePrefix = "wake:"
	AwayPrefix = "away_"
)

func awayInWake(t storage.ClockTask, requestID string) bool {
	return strings.HasPrefix(t.TaskID, AwayPrefix) && strings.HasPrefix(requestID, WakePrefix)
}

// Commit records delivery of everything requestID reserved (docs/clock-tool.md: when
// the response starts to reach the client): deliveredAt, deliveryCount+1,
// and repeating tasks re-arm to their next occurrence unless maxRuns is
// reached. It returns how many tasks it committed; an unknown request id
// commits nothing.
func (e *Engine) Commit(ctx context.Context, requestID string) (int, error) {
	now := e.now()
	return e.finish(requestID, func(t *storage.ClockTask) {
		t.DeliveredAt, t.LastDeliveredAt = now.UnixMilli(), now.UnixMilli()
		t.DeliveryCount++
		t.ReservedBy, t.ReservedAt = "", 0
		t.UpdatedAt = now.UnixMilli()
		if t.Repeat == "" {
			return
		}
		t.Runs++
		if exhausted(*t) {
			return // stays delivered until it expires
		}
		if e.rearm(t, now) {
			// The committing chain must not get the next occurrence at once.
			e.stampIfInWindow(t, requestID, now)
		}
	})
}

// Rollback releases everything requestID reserved, unchanged otherwise
// (upstream failure, client gone before the response started).
//
// A rollback for an id the host has not reserved for leaves a tombstone
// record, so that a prepare of that id arriving later (the host stalled
// past the filter's deadline) reserves nothing (issue 17; docs/failures.md).
func (e *Engine) Rollback(ctx context.Context, requestID string) (int, error) {
	return e.finish(requestID, nil)
}

// finish applies fn to every task still reserved by requestID and drops the
// reservation record, in one transaction; fn nil is a rollback, which
// leaves a tombstone for an unknown id. The reserve→outcome time feeds
// the measured reservation expiry.
func (e *Engine) finish(requestID string, fn func(*storage.ClockTask)) (int, error) {
	if requestID == "" {
		return 0, nil
	}
	rollback := fn == nil
	if rollback {
		fn = func(t *storage.ClockTask) { t.ReservedBy, t.ReservedAt = "", 0 }
	}
	now := e.now()
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	var held time.Duration
	err := e.store.Update(func(tx *storage.Tx) error {
		n, held = 0, -1
		r, ok, err := tx.Reservation(requestID)
		if err != nil {
			return err
		}
		if !ok {
			if !rollback {
				return nil
			}
			return tx.PutReservation(storage.Reservation{RequestID: requestID, RolledBack: true, ReservedAt: now.UnixMilli()})
		}
		if r.RolledBack {
			return nil // keep the tombstone until the sweep drops it
		}
		held = now.Sub(time.UnixMilli(r.ReservedAt))
		for _, id := range r.TaskIDs {
			t, ok, err := tx.Task(r.SessionID, id)
			if err != nil {
				return err
			}
			// A reservation that timed out may have passed to another request.
			if !ok || t.ReservedBy != requestID {
				continue
			}
			fn(&t)
			if err := tx.PutTask(t); err != nil {
				return err
			}
			n++
		}
		_, err = tx.DeleteReservation(requestID)
		return err
	})
	if err != nil {
		return 0, err
	}
	if held >= 0 {
		e.ttl.observe(held)
	}
	return n, nil
}

// ReminderFooter ends every injected reminder item (docs/clock-tool.md).
const ReminderFooter = "You may call tools to do these tasks."

// RenderReminders is the exact user text injected for due tasks (docs/clock-tool.md):
// one line per task, `[scheduled task:"<task>"]`, then the suggested tool
// and arguments when present, and a final line saying tools may be used.
// A notice is its own text on one line, and notices alone get no final
// line. It returns "" for no reminders.
func RenderReminders(rs []Reminder) string {
	if len(rs) == 0 {
		return ""
	}
	var b strings.Builder
	tasks := 0
	for _, r := range rs {
		if r.Notice != "" {
			b.WriteString(oneLine(r.Notice))
			b.WriteByte('\n')
			continue
		}
		tasks++
		b.WriteString(`[scheduled task:"`)
		b.WriteString(escapeLine(r.Task))
		b.WriteString(`"]`)
		if r.Tool != "" {
			b.WriteString(" suggested tool: ")
			b.WriteString(oneLine(r.Tool))
			if r.Arguments != "" && r.Arguments != "{}" {
				b.WriteString(" arguments: ")
				b.WriteString(oneLine(r.Arguments))
			}
		} else if r.Arguments != "" && r.Arguments != "{}" {
			b.WriteString(" suggested arguments: ")
			b.WriteString(oneLine(r.Arguments))
		}
		b.WriteByte('\n')
	}
	if tasks == 0 {
		return strings.TrimSuffix(b.String(), "\n")
	}
	b.WriteString(ReminderFooter)
	return b.String()
}

// escapeLine keeps a value on one line and inside its quotes.
var lineEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\r", `\r`)

func escapeLine(s string) string { return lineEscaper.Replace(s) }

// oneLine flattens a tool name or compact JSON that is shown unquoted.
var newlineFlattener = strings.NewReplacer("\n", " ", "\r", " ")

func oneLine(s string) string { return newlineFlattener.Replace(s) }
