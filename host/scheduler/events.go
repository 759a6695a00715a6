package scheduler

import (
	"errors"
	"unicode/utf8"

	"github.com/chimehq/chime/storage"
)

// System event queue limits (docs/scheduler.md#system-events).
const (
	EventCapacity = 50
	MaxEventText  = 4000
	MaxContextKey = 200
)

// ErrEventText is an empty or oversized event.
var ErrEventText = errors.New("event text must be 1 to 4000 characters and contextKey at most 200")

// Enqueue adds ev to a session's persisted queue: an event with the same
// contextKey replaces the older one, and past EventCapacity the oldest is
// dropped. It reports how many were dropped.
func Enqueue(store *storage.Store, sid string, ev storage.SystemEvent) (dropped int, err error) {
	if ev.Text == "" || utf8.RuneCountInString(ev.Text) > MaxEventText || len(ev.ContextKey) > MaxContextKey {
		return 0, ErrEventText
	}
	err = store.Update(func(tx *storage.Tx) error {
		q, err := tx.Events(sid)
		if err != nil {
			return err
		}
		if ev.ContextKey != "" {
			kept := q.Events[:0]
			for _, e := range q.Events {
				if e.ContextKey != ev.ContextKey {
					kept = append(kept, e)
				}
			}
			q.Events = kept
		}
		q.Events = append(q.Events, ev)
		if n := len(q.Events) - EventCapacity; n > 0 {
			dropped = n
			q.Events = append([]storage.SystemEvent(nil), q.Events[n:]...)
		}
		return tx.PutEvents(q)
	})
	return dropped, err
}

// Peek returns a session's queued events without removing them: a run
// drains them only when it succeeds (Ack).
func Peek(store *storage.Store, sid string) ([]storage.SystemEvent, error) {
	var q storage.EventQueue
	err := store.View(func(tx *storage.Tx) error {
		var err error
		q, err = tx.Events(sid)
		return err
	})
	return q.Events, err
}

// Ack removes the events a successful run carried; events queued during
// the run (or replacing one it carried) stay.
func Ack(store *storage.Store, sid string, seen []storage.SystemEvent) error {
	if len(seen) == 0 {
		return nil
	}
	type key struct {
		ck, text string
		at       int64
	}
	done := map[key]bool{}
	for _, e := range seen {
		done[key{e.ContextKey, e.Text, e.At}] = true
	}
	return store.Update(func(tx *storage.Tx) error {
		q, err := tx.Events(sid)
		if err != nil {
			return err
		}
		kept := q.Events[:0]
		for _, e := range q.Events {
			if !done[key{e.ContextKey, e.Text, e.At}] {
				kept = append(kept, e)
			}
		}
		q.Events = kept
		return tx.PutEvents(q)
	})
}
