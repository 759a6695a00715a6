// Package stopmessage is the host's stopMessage feature (docs/continuation.md): the
// `<**stopMessage:"text",N**>` and `<**stopMessage:clear**>` directives,
// the per-session state {text, maxRepeats, used, updatedAt, lastUsedAt}
// on disk, and the continuation step that answers a stopped turn with the
// text. All state goes through the storage package's StopMessage methods,
// written through (docs/clock-tool.md).
package stopmessage

import (
	"errors"
	"strings"
	"time"

	"github.com/chimehq/chime/host/internal/directive"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/storage"
)

// ErrNoSession is returned for a directive of a request without a session.
var ErrNoSession = errors.New("stopmessage: no session id")

// Messages is the stopMessage state of every session. It is safe for
// concurrent use: each call is one storage transaction.
type Messages struct{ store *storage.Store }

// New keeps the state in store.
func New(store *storage.Store) *Messages { return &Messages{store: store} }

// ApplyDirective applies a stopMessage or stopMessage:clear directive
// (docs/directives.md, docs/continuation.md) in its own transaction; see Stage.
func (m *Messages) ApplyDirective(sessionID string, d hostapi.HostDirective, now time.Time) error {
	if sessionID == "" {
		return ErrNoSession
	}
	if err := check(sessionID, d); err != nil {
		return err
	}
	return m.store.Update(func(tx *storage.Tx) error { return Stage(tx, sessionID, d, now) })
}

// Stage writes a stopMessage or stopMessage:clear directive within the
// caller's transaction (the prepare call applies all directives of a
// request in one). Setting replaces the state and resets used to 0; N = 0
// means the default (llm.DefaultStopMessageRepeats); clear deletes it. A
// bad directive is refused (directive.IsRejected) before anything is
// written.
func Stage(tx *storage.Tx, sessionID string, d hostapi.HostDirective, now time.Time) error {
	if err := check(sessionID, d); err != nil {
		return err
	}
	if d.Kind == hostapi.DirectiveStopMessageClear {
		_, err := tx.DeleteStopMessage(sessionID)
		return err
	}
	return tx.PutStopMessage(sessionID, storage.StopMessage{Text: d.Text, MaxRepeats: repeats(d), UpdatedAt: now.UnixMilli()})
}

func repeats(d hostapi.HostDirective) int {
	if d.MaxRepeats == 0 {
		return llm.DefaultStopMessageRepeats
	}
	return d.MaxRepeats
}

// check refuses a directive that cannot be applied, as a rejection.
func check(sessionID string, d hostapi.HostDirective) error {
	if sessionID == "" {
		return directive.Reject(ErrNoSession)
	}
	switch d.Kind {
	case hostapi.DirectiveStopMessage:
		if strings.TrimSpace(d.Text) == "" {
			return directive.Rejectf("stopMessage text is empty")
		}
		if n := repeats(d); n < 1 {
			return directive.Rejectf("stopMessage repeats %d: want N ≥ 1", n)
		}
		return nil
	case hostapi.DirectiveStopMessageClear:
		return nil
	}
	return directive.Rejectf("stopmessage: %q is not a stopMessage directive", d.Kind)
}

// Active reports whether the session has a state that can still trigger
// (used < maxRepeats). A storage error reads as inactive.
func (m *Messages) Active(sessionID string) bool {
	if sessionID == "" {
		return false
	}
	st, ok, err := m.store.GetStopMessage(sessionID)
	return err == nil && ok && IsActive(st)
}

// IsActive reports whether a session's stopMessage state can still
// trigger (used < maxRepeats).
func IsActive(st storage.StopMessage) bool { return st.Text != "" && st.Used < st.MaxRepeats }

// Consume takes one repeat: it persists used+1 and lastUsedAt in one
// transaction, so two chains of a session cannot both take the last one
// (docs/continuation.md), and returns the text. ok is false when the state is gone or
// used up.
func (m *Messages) Consume(sessionID string, now time.Time) (text string, ok bool, err error) {
	err = m.store.UpdateShared(func(tx *storage.Tx) error {
		text = ""
		st, found, err := tx.StopMessage(sessionID)
		if err != nil || !found || st.Text == "" || st.Used >= st.MaxRepeats {
			return err
		}
		st.Used++
		st.LastUsedAt = now.UnixMilli()
		if err := tx.PutStopMessage(sessionID, st); err != nil {
			return err
		}
		text = st.Text
		return nil
	})
	if err != nil {
		return "", false, err
	}
	return text, text != "", nil
}
