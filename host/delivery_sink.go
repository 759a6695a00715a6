package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/chimehq/chime/host/clock"
)

// Delivery is one text for a session's user: a wake's reply, or what an
// acked wake carried (docs/scheduler.md#runs).
type Delivery struct {
	Session string
	RunID   string // unique per text; with the connector, its idempotency key
	Reason  string
	Text    string
	At      time.Time
}

// deliver hands d to the delivery queue. Without one it goes to the
// session connector: the session's next request gets it as
// "[while you were away: …]", reserved and committed like a reminder.
func (s *Service) deliver(ctx context.Context, d Delivery) error {
	if s.deliverFn != nil {
		return s.deliverFn(ctx, d)
	}
	return s.injectAway(ctx, d.Session, d.RunID, d.Text, d.At)
}

// injectAway is the session connector: a notice for the session's next
// client request, never taken by a wake (clock.AwayPrefix). Its id
// derives from key, so delivering the same text twice is one notice.
func (s *Service) injectAway(ctx context.Context, sid, key, text string, at time.Time) error {
	sum := sha256.Sum256([]byte(key))
	id := clock.AwayPrefix + hex.EncodeToString(sum[:16])
	err := s.engine.AddNotice(ctx, sid, id, "[while you were away: "+text+"]", at)
	s.changed(sid)
	return err
}
