// Package route is the host's route pin (docs/directives.md `<**route:NAME**>`,
// `<**route:clear**>`): a session's chosen upstream route, kept on its
// session record and returned in every prepare answer so the filter can
// route the session's requests by it.
package route

import (
	"errors"
	"fmt"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
)

// MaxLen bounds a pinned route name; routes are header values.
const MaxLen = 128

// ErrNoSession is returned for a directive of a request without a session.
var ErrNoSession = errors.New("route: no session id")

// Check accepts a header-safe route name: 1..MaxLen bytes of printable
// ASCII without spaces.
func Check(r string) error {
	if r == "" || len(r) > MaxLen {
		return fmt.Errorf("route name must be 1..%d bytes", MaxLen)
	}
	for i := 0; i < len(r); i++ {
		if c := r[i]; c <= ' ' || c >= 0x7f {
			return errors.New("route name must be printable ASCII without spaces")
		}
	}
	return nil
}

// ApplyDirective pins (route) or unpins (route:clear) the session's route
// on its record, creating the record if needed; the write is synchronous.
func ApplyDirective(store *storage.Store, sessionID string, d hostapi.HostDirective, now time.Time) error {
	if sessionID == "" {
		return ErrNoSession
	}
	switch d.Kind {
	case hostapi.DirectiveRoute:
		if err := Check(d.Route); err != nil {
			return err
		}
		return pin(store, sessionID, d.Route, now)
	case hostapi.DirectiveRouteClear:
		return pin(store, sessionID, "", now)
	}
	return fmt.Errorf("route: %q is not a route directive", d.Kind)
}

// Pinned is the session's pinned route, "" when none.
func Pinned(store *storage.Store, sessionID string) (string, error) {
	sess, ok, err := store.GetSession(sessionID)
	if err != nil || !ok {
		return "", err
	}
	return sess.Route, nil
}

func pin(store *storage.Store, sid, route string, now time.Time) error {
	return store.Update(func(tx *storage.Tx) error {
		sess, ok, err := tx.Session(sid)
		if err != nil {
			return err
		}
		if !ok {
			sess = storage.Session{ID: sid, CreatedAt: now.UnixMilli()}
		}
		sess.LastSeenAt = max(sess.LastSeenAt, now.UnixMilli())
		sess.Route = route
		return tx.PutSession(sess)
	})
}
