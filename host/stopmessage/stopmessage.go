// Package stopmessage is the host's stopMessage feature (docs/continuation.md): the
// `<**stopMessage:"text",N**>` and `<**stopMessage:clear**>` directives,
// the per-session state {text, maxRepeats, used, updatedAt, lastUsedAt}
// on disk, and the continuation step that answers a stopped turn with the
// text. All state goes through the storage package's StopMessage methods,
// written through (docs/clock-tool.md).
package stopmessage

import (
	"errors"
	"fmt"
	"strings"
	"time"

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
// (docs/directives.md, docs/continuation.md). Setting replaces the state and resets used to 0; N = 0
// means the default (llm.DefaultStopMessageRepeats); clear deletes it.
func (m *Messages) ApplyDirective(sessionID string, d hostapi.HostDirective, now time.Time) error {
	if sessionID == "" {
		return ErrNoSession
	}
	switch d.Kind {
	case hostapi.DirectiveStopMessage:
		if strings.TrimSpace(d.Text) == "" {
			return errors.New("stopMessage text is empty")
		}
		n := d.MaxRepeats
		if n == 0 {
			n = llm.DefaultStopMessageRepeats
		}
		if n < 1 {
			return fmt.Errorf("stopMessage repeats %d: want N ≥ 1", n)
		}
		return m.store.PutStopMessage(sessionID, storage.StopMessage{Text: d.Text, MaxRepeats: n, UpdatedAt: now.UnixMilli()})
	case hostapi.DirectiveStopMessageClear:
		_, err := m.store.DeleteStopMessage(sessionID)
		return err
	}
	return fmt.Errorf("stopmessage: %q is not a stopMessage directive", d.Kind)
}

// Active reports whether the session has a state that can still trigger
// (used < maxRepeats). A storage error reads as inactive.
func (m *Messages) Active(sessionID string) bool {
	if sessionID == "" {
		return false
	}
	st, ok, err := m.store.GetStopMessage(sessionID)
	return err == nil && ok && st.Text != "" && st.Used < st.MaxRepeats
}

// Consume takes one repeat: it persists used+1 and lastUsedAt in one
// transaction, so two chains of a session cannot both take the last one
// (docs/continuation.md), and returns the text. ok is false when the state is gone or
// used up.
func (m *Messages) Consume(sessionID string, now time.Time) (text string, ok bool, err error) {
	err = m.store.Update(func(tx *storage.Tx) error {
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
