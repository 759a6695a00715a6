package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
)

// Single-record helpers, each one transaction.

// GetSession returns the session record of id.
func (s *Store) GetSession(id string) (sess Session, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		sess, ok, err = tx.Session(id)
		return err
	})
	return sess, ok, err
}

// TouchSession creates or refreshes a session record: lastSeenAt = nowMs,
// and lastChannel when channel is not empty.
func (s *Store) TouchSession(id, channel string, nowMs int64) error {
	return s.UpdateShared(func(tx *Tx) error {
		sess, ok, err := tx.Session(id)
		if err != nil {
			return err
		}
		if !ok {
			sess = Session{ID: id, CreatedAt: nowMs}
		}
		sess.LastSeenAt = nowMs
		if channel != "" {
			sess.LastChannel = channel
		}
		return tx.PutSession(sess)
	})
}

// ListSessions returns every session record, most recently seen first.
func (s *Store) ListSessions() ([]Session, error) {
	var out []Session
	err := s.View(func(tx *Tx) error {
		return tx.scan([]byte(sessionPrefix), func(key, val []byte) error {
			if !isMetaKey(key) {
				return nil
			}
			var sess Session
			if err := json.Unmarshal(val, &sess); err != nil {
				return fmt.Errorf("storage: decode %s: %w", key, err)
			}
			out = append(out, sess)
			return nil
		})
	})
	sort.SliceStable(out, func(i, j int) bool { return out[i].LastSeenAt > out[j].LastSeenAt })
	return out, err
}

// PutTask writes one task.
func (s *Store) PutTask(t ClockTask) error {
	return s.Update(func(tx *Tx) error { return tx.PutTask(t) })
}

// GetTask reads one task.
func (s *Store) GetTask(sessionID, taskID string) (t ClockTask, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		t, ok, err = tx.Task(sessionID, taskID)
		return err
	})
	return t, ok, err
}

// DeleteTask removes one task and reports whether it existed.
func (s *Store) DeleteTask(sessionID, taskID string) (ok bool, err error) {
	err = s.Update(func(tx *Tx) error {
		ok, err = tx.DeleteTask(sessionID, taskID)
		return err
	})
	return ok, err
}

// ListTasks returns a session's tasks ordered by dueAt.
func (s *Store) ListTasks(sessionID string) (ts []ClockTask, err error) {
	err = s.View(func(tx *Tx) error {
		ts, err = tx.Tasks(sessionID)
		return err
	})
	return ts, err
}

// clearChunk bounds one delete transaction below Badger's batch limit.
const clearChunk = 1000

// ClearTasks deletes every task of a session and returns how many it removed.
func (s *Store) ClearTasks(sessionID string) (int, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return 0, err
	}
	total := 0
	for {
		n := 0
		err := s.Update(func(tx *Tx) error {
			var keys [][]byte
			err := tx.scan(taskPrefix(sid), func(key, _ []byte) error {
				if len(keys) < clearChunk {
					keys = append(keys, append([]byte(nil), key...))
				}
				return nil
			})
			if err != nil {
				return err
			}
			for _, k := range keys {
				if err := tx.txn.Delete(k); err != nil {
					return fmt.Errorf("storage: delete %s: %w", k, err)
				}
				tx.noteWrite(k)
			}
			n = len(keys)
			return nil
		})
		if err != nil {
			return total, err
		}
		total += n
		if n < clearChunk {
			return total, nil
		}
	}
}

// ScanTasks calls fn for every task of every session (startup scan, sweep).
// fn must not write to the store.
func (s *Store) ScanTasks(fn func(ClockTask) error) error {
	return s.View(func(tx *Tx) error {
		return tx.scan([]byte(sessionPrefix), func(key, val []byte) error {
			if !isTaskKey(key) {
				return nil
			}
			var t ClockTask
			if err := json.Unmarshal(val, &t); err != nil {
				return fmt.Errorf("storage: decode %s: %w", key, err)
			}
			return fn(t)
		})
	})
}

// GetStopMessage reads the session's stopMessage state.
func (s *Store) GetStopMessage(sessionID string) (m StopMessage, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		m, ok, err = tx.StopMessage(sessionID)
		return err
	})
	return m, ok, err
}

// PutStopMessage writes the session's stopMessage state.
func (s *Store) PutStopMessage(sessionID string, m StopMessage) error {
	return s.Update(func(tx *Tx) error { return tx.PutStopMessage(sessionID, m) })
}

// DeleteStopMessage removes the session's stopMessage state.
func (s *Store) DeleteStopMessage(sessionID string) (ok bool, err error) {
	err = s.Update(func(tx *Tx) error {
		ok, err = tx.DeleteStopMessage(sessionID)
		return err
	})
	return ok, err
}

// LoadNTP reads the persisted NTP state (it satisfies ntp.Persister).
func (s *Store) LoadNTP() (st NTPState, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		st, ok, err = tx.NTP()
		return err
	})
	return st, ok, err
}

// SaveNTP writes the NTP state.
func (s *Store) SaveNTP(st NTPState) error {
	return s.Update(func(tx *Tx) error { return tx.PutNTP(st) })
}

// MaxDirectiveDigests bounds the digests kept per session; claiming one more
// forgets the oldest. A client resends the directives of its last few
// turns, so 256 remembered directives reach far past any resend.
const MaxDirectiveDigests = 256

// ClaimDirective records digest as applied for the session unless it is
// already recorded, in one synchronous transaction, and reports whether it
// was new (docs/directives.md). Concurrent claims of one digest: exactly one wins.
func (s *Store) ClaimDirective(sessionID, digest string) (claimed bool, err error) {
	if digest == "" {
		return false, errors.New("storage: empty directive digest")
	}
	err = s.Update(func(tx *Tx) error {
		claimed = false
		a, err := tx.AppliedDirectives(sessionID)
		if err != nil {
			return err
		}
		if slices.Contains(a.Digests, digest) {
			return nil
		}
		a.Digests = append(a.Digests, digest)
		if n := len(a.Digests) - MaxDirectiveDigests; n > 0 {
			a.Digests = slices.Delete(a.Digests, 0, n)
		}
		claimed = true
		return tx.PutAppliedDirectives(sessionID, a)
	})
	return claimed, err
}

// ReleaseDirective forgets a claimed digest, for a directive that failed to
// apply, so that a later request may apply it.
func (s *Store) ReleaseDirective(sessionID, digest string) error {
	return s.Update(func(tx *Tx) error {
		a, err := tx.AppliedDirectives(sessionID)
		if err != nil {
			return err
		}
		i := slices.Index(a.Digests, digest)
		if i < 0 {
			return nil
		}
		a.Digests = slices.Delete(a.Digests, i, i+1)
		return tx.PutAppliedDirectives(sessionID, a)
	})
}

// DirectiveDigests returns the session's remembered digests, oldest first.
func (s *Store) DirectiveDigests(sessionID string) (digests []string, err error) {
	err = s.View(func(tx *Tx) error {
		a, err := tx.AppliedDirectives(sessionID)
		digests = a.Digests
		return err
	})
	return digests, err
}
