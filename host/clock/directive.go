package clock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/chimehq/chime/host/internal/directive"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
)

// ApplyDirective applies a clock or clock:clear directive (docs/directives.md) for the
// request requestID of the session: it schedules the directive's task like
// the tool's schedule, or deletes all of the session's tasks.
func (e *Engine) ApplyDirective(ctx context.Context, sessionID, requestID string, d hostapi.HostDirective) error {
	switch d.Kind {
	case hostapi.DirectiveClockClear:
		_, err := e.ApplyClear(ctx, sessionID)
		return err
	case hostapi.DirectiveClock:
		if d.Clock == nil {
			return errors.New("clock directive without a task")
		}
		payload, err := json.Marshal(d.Clock)
		if err != nil {
			return err
		}
		_, err = e.ScheduleFromDirective(ctx, sessionID, requestID, string(payload))
		return err
	}
	return fmt.Errorf("clock: %q is not a clock directive", d.Kind)
}

// ApplyClear deletes all of the session's tasks, synchronously on disk
// (docs/directives.md `<**clock:clear**>`), and returns how many it removed.
func (e *Engine) ApplyClear(ctx context.Context, sessionID string) (int, error) {
	if sessionID == "" {
		return 0, ErrNoSession
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	err := e.store.Update(func(tx *storage.Tx) error {
		var err error
		n, err = stageClear(tx, sessionID)
		return err
	})
	return n, err
}

// stageClear deletes the session's tasks within tx. Notices are not the
// model's tasks: clearing reminders keeps them.
func stageClear(tx *storage.Tx, sessionID string) (int, error) {
	ts, err := tx.Tasks(sessionID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range ts {
		if t.Notice != "" {
			continue
		}
		if _, err := tx.DeleteTask(sessionID, t.TaskID); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// ScheduleFromDirective schedules what the user wrote in
// `<**clock:{"dueAt":"…","task":"…"}**>` (docs/directives.md): one item object, or an
// array of them, with the fields of the tool's items[]. The error text is
// the reason, suitable for logs.
func (e *Engine) ScheduleFromDirective(ctx context.Context, sessionID, requestID, payload string) ([]Scheduled, error) {
	if sessionID == "" {
		return nil, ErrNoSession
	}
	items, err := directiveItems(payload)
	if err != nil {
		return nil, err
	}
	out, _, terr := e.schedule(ctx, sessionID, requestID, items)
	if terr != nil {
		return nil, fmt.Errorf("clock directive: %w", terr)
	}
	return out, nil
}

// directiveItems parses a clock directive's payload: one item or an array.
func directiveItems(payload string) ([]itemArg, error) {
	raw := bytes.TrimSpace([]byte(payload))
	var items []itemArg
	if len(raw) > 0 && raw[0] == '[' {
		if err := json.Unmarshal(raw, &items); err != nil {
			return nil, fmt.Errorf("clock directive: not a JSON array of tasks: %w", err)
		}
		return items, nil
	}
	var it itemArg
	if err := json.Unmarshal(raw, &it); err != nil {
		return nil, fmt.Errorf("clock directive: not a JSON object like {\"dueAt\":\"2026-01-21T20:30:00-08:00\",\"task\":\"…\"}: %w", err)
	}
	return []itemArg{it}, nil
}

// StageDirective writes a clock or clock:clear directive within the
// caller's transaction (the prepare call applies all directives of a
// request in one). A bad directive, or one the session has no room for,
// is refused (directive.IsRejected) before anything is written. The
// caller serializes it with the engine's other writes (Exclusive).
func (e *Engine) StageDirective(ctx context.Context, tx *storage.Tx, sessionID, requestID string, d hostapi.HostDirective) error {
	if sessionID == "" {
		return directive.Reject(ErrNoSession)
	}
	switch d.Kind {
	case hostapi.DirectiveClockClear:
		_, err := stageClear(tx, sessionID)
		return err
	case hostapi.DirectiveClock:
		if d.Clock == nil {
			return directive.Rejectf("clock directive without a task")
		}
		payload, err := json.Marshal(d.Clock)
		if err != nil {
			return directive.Reject(err)
		}
		items, err := directiveItems(string(payload))
		if err != nil {
			return directive.Reject(err)
		}
		now := e.now()
		valid, terr := e.validateItems(items, now)
		if terr != nil {
			return directive.Reject(fmt.Errorf("clock directive: %w", terr))
		}
		_, _, err = e.stageSchedule(ctx, tx, sessionID, requestID, valid, now)
		var te *toolError
		if errors.As(err, &te) {
			return directive.Reject(fmt.Errorf("clock directive: %w", te))
		}
		return err
	}
	return directive.Rejectf("clock: %q is not a clock directive", d.Kind)
}

// Exclusive runs fn, which stages clock directives, serialized with the
// engine's own read-modify-writes of tasks.
func (e *Engine) Exclusive(fn func() error) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return fn()
}

// IsStorageFailure reports whether err (from ScheduleFromDirective) came
// from storage rather than from the payload.
func IsStorageFailure(err error) bool {
	var te *toolError
	return errors.As(err, &te) && te.err != nil && !errors.Is(te.err, ErrNoSession)
}
