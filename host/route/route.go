// Package route is the host's route pin (docs/directives.md `<**route:NAME**>`,
// `<**route:clear**>`): a session's chosen upstream route, kept on its
// session record and returned in every prepare answer so the filter can
// route the session's requests by it.
package route

import (
	"errors"
	"fmt"
	"time"

	"github.com/chimehq/chime/host/internal/directive"
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
// on its record, creating the record if needed, in its own synchronous
// transaction; see Stage.
func ApplyDirective(store *storage.Store, sessionID string, d hostapi.HostDirective, now time.Time) error {
	if sessionID == "" {
		return ErrNoSession
	}
	if err := check(d); err != nil {
		return err
	}
	return store.Update(func(tx *storage.Tx) error { return Stage(tx, sessionID, d, now) })
}

// Stage writes a route or route:clear directive within the caller's
// transaction (the prepare call applies all directives of a request in
// one). A bad directive is refused (directive.IsRejected) before anything
// is written.
func Stage(tx *storage.Tx, sessionID string, d hostapi.HostDirective, now time.Time) error {
	if sessionID == "" {
		return directive.Reject(ErrNoSession)
	}
	if err := check(d); err != nil {
		return err
	}
	r := ""
	if d.Kind == hostapi.DirectiveRoute {
		r = d.Route
	}
	return pin(tx, sessionID, r, now)
}

func check(d hostapi.HostDirective) error {
	switch d.Kind {
	case hostapi.DirectiveRoute:
		return directive.Reject(Check(d.Route))
	case hostapi.DirectiveRouteClear:
		return nil
	}
	return directive.Rejectf("route: %q is not a route directive", d.Kind)
}

// Pinned is the session's pinned route, "" when none.
func Pinned(store *storage.Store, sessionID string) (string, error) {
	sess, ok, err := store.GetSession(sessionID)
	if err != nil || !ok {
		return "", err
	}
	return sess.Route, nil
}

func pin(tx *storage.Tx, sid, route string, now time.Time) error {
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
}
