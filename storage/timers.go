package storage

import (
	"encoding/json"
	"fmt"
	"sort"
)

// --- timers (docs/timers.md) ---

// Timer returns one timer of a session. An id that cannot be a timer id
// is simply not found: ids come back from the model.
func (tx *Tx) Timer(sessionID, timerID string) (Timer, bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return Timer{}, false, err
	}
	if !ValidTaskID(timerID) {
		return Timer{}, false, nil
	}
	var t Timer
	ok, err := tx.getJSON(timerKey(sid, timerID), &t)
	return t, ok, err
}

// PutTimer writes t under t.SessionID / t.TimerID.
func (tx *Tx) PutTimer(t Timer) error {
	sid, err := sanitizeID(t.SessionID)
	if err != nil {
		return fmt.Errorf("%s: %w", errBadRecordID, err)
	}
	if !ValidTaskID(t.TimerID) {
		return fmt.Errorf("storage: invalid timer id %q", t.TimerID)
	}
	return tx.putJSON(timerKey(sid, t.TimerID), t)
}

// DeleteTimer removes a timer and reports whether it existed.
func (tx *Tx) DeleteTimer(sessionID, timerID string) (bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return false, err
	}
	if !ValidTaskID(timerID) {
		return false, nil
	}
	return tx.del(timerKey(sid, timerID))
}

// Timers lists a session's timers, oldest first.
func (tx *Tx) Timers(sessionID string) ([]Timer, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return nil, err
	}
	var out []Timer
	err = tx.scan(timerPrefix(sid), func(key, val []byte) error {
		var t Timer
		if err := json.Unmarshal(val, &t); err != nil {
			return fmt.Errorf("storage: decode %s: %w", key, err)
		}
		out = append(out, t)
		return nil
	})
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].CreatedAt != out[j].CreatedAt {
			return out[i].CreatedAt < out[j].CreatedAt
		}
		return out[i].TimerID < out[j].TimerID
	})
	return out, err
}

// PutTimer writes one timer in its own synchronous transaction.
func (s *Store) PutTimer(t Timer) error {
	return s.Update(func(tx *Tx) error { return tx.PutTimer(t) })
}

// GetTimer reads one timer.
func (s *Store) GetTimer(sessionID, timerID string) (t Timer, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		t, ok, err = tx.Timer(sessionID, timerID)
		return err
	})
	return t, ok, err
}

// ListTimers reads a session's timers, oldest first.
func (s *Store) ListTimers(sessionID string) (ts []Timer, err error) {
	err = s.View(func(tx *Tx) error {
		ts, err = tx.Timers(sessionID)
		return err
	})
	return ts, err
}

// DeleteTimer removes one timer.
func (s *Store) DeleteTimer(sessionID, timerID string) (ok bool, err error) {
	err = s.Update(func(tx *Tx) error {
		ok, err = tx.DeleteTimer(sessionID, timerID)
		return err
	})
	return ok, err
}

// ScanTimers calls fn for every timer of every session (restore at start,
// pruning). fn must not write to the store.
func (s *Store) ScanTimers(fn func(Timer) error) error {
	return s.View(func(tx *Tx) error {
		return tx.scan([]byte(sessionPrefix), func(key, val []byte) error {
			if !isTimerKey(key) {
				return nil
			}
			var t Timer
			if err := json.Unmarshal(val, &t); err != nil {
				return fmt.Errorf("storage: decode %s: %w", key, err)
			}
			return fn(t)
		})
	})
}
