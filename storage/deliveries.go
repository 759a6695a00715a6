package storage

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// --- delivery queue and event log (docs/delivery.md) ---

// Delivery states.
const (
	DeliveryQueued    = "queued"
	DeliveryDelivered = "delivered"
	DeliveryFailed    = "failed"
	DeliveryUnknown   = "unknown"
)

// Delivery is one entry of the outbound delivery queue: a text for a
// session's user and the connector it goes to. Times are Unix ms of host
// time; 0 = unset.
type Delivery struct {
	ID        string `json:"id"`  // derived from SessionID and RunID: one entry per produced text
	Seq       uint64 `json:"seq"` // enqueue order, unique across sessions
	SessionID string `json:"sessionId"`
	RunID     string `json:"runId"`
	Reason    string `json:"reason,omitempty"`
	Text      string `json:"text"`
	At        int64  `json:"at"` // when the text was produced
	Connector string `json:"connector"`
	// Key is the idempotency key, "<run id>:<connector>"; every attempt of
	// the entry sends the same one.
	Key         string `json:"key"`
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	NextAt      int64  `json:"nextAt,omitempty"` // next attempt; queued and unknown only
	LastError   string `json:"lastError,omitempty"`
	EnqueuedAt  int64  `json:"enqueuedAt"`
	UpdatedAt   int64  `json:"updatedAt"`
	DeliveredAt int64  `json:"deliveredAt,omitempty"`
}

// Pending reports whether the queue still has to send d.
func (d Delivery) Pending() bool { return d.State == DeliveryQueued || d.State == DeliveryUnknown }

// SessionEvent is one entry of a session's event log: what the sse
// connector delivered, kept so that a subscriber resuming with
// Last-Event-ID gets what it missed. ID is the delivery's Seq.
type SessionEvent struct {
	ID        uint64 `json:"id"`
	SessionID string `json:"sessionId"`
	RunID     string `json:"runId"`
	Reason    string `json:"reason,omitempty"`
	Text      string `json:"text"`
	At        int64  `json:"at"`
	LoggedAt  int64  `json:"loggedAt"`
}

const (
	deliverySegment = "dlv/"
	eventSegment    = "evt/"
	pendingPrefix   = keyVersion + "dlvq/"
	deliverySeqKey  = keyVersion + "dlvseq"
)

func deliveryKey(sid, id string) []byte {
	return []byte(sessionRoot(sid) + deliverySegment + id)
}

func deliveryPrefix(sid string) []byte { return []byte(sessionRoot(sid) + deliverySegment) }

func eventPrefix(sid string) []byte { return []byte(sessionRoot(sid) + eventSegment) }

func eventKey(sid string, id uint64) []byte {
	return []byte(sessionRoot(sid) + eventSegment + fmt.Sprintf("%020d", id))
}

func pendingKey(seq uint64) []byte { return []byte(pendingPrefix + fmt.Sprintf("%020d", seq)) }

// pendingRef is the value of a pending-index key: where the entry lives.
type pendingRef struct {
	SessionID string `json:"sessionId"`
	ID        string `json:"id"`
}

func validDeliveryID(id string) bool { return ValidTaskID(id) }

// Delivery reads one entry of a session's queue. An id that cannot be a
// delivery id is simply not found.
func (tx *Tx) Delivery(sessionID, id string) (Delivery, bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return Delivery{}, false, err
	}
	if !validDeliveryID(id) {
		return Delivery{}, false, nil
	}
	var d Delivery
	ok, err := tx.getJSON(deliveryKey(sid, id), &d)
	return d, ok, err
}

// PutDelivery writes d and keeps the pending index (enqueue order of the
// entries still to send) in step with its state.
func (tx *Tx) PutDelivery(d Delivery) error {
	sid, err := sanitizeID(d.SessionID)
	if err != nil {
		return fmt.Errorf("%s: %w", errBadRecordID, err)
	}
	if !validDeliveryID(d.ID) {
		return fmt.Errorf("storage: invalid delivery id %q", d.ID)
	}
	if d.Seq == 0 {
		return fmt.Errorf("storage: delivery %s without a sequence number", d.ID)
	}
	if err := tx.putJSON(deliveryKey(sid, d.ID), d); err != nil {
		return err
	}
	if d.Pending() {
		return tx.putJSON(pendingKey(d.Seq), pendingRef{SessionID: d.SessionID, ID: d.ID})
	}
	_, err = tx.del(pendingKey(d.Seq))
	return err
}

// DeleteDelivery removes an entry (and its pending index key).
func (tx *Tx) DeleteDelivery(d Delivery) error {
	sid, err := sanitizeID(d.SessionID)
	if err != nil {
		return err
	}
	if _, err := tx.del(deliveryKey(sid, d.ID)); err != nil {
		return err
	}
	_, err = tx.del(pendingKey(d.Seq))
	return err
}

// Deliveries lists a session's queue entries in enqueue order.
func (tx *Tx) Deliveries(sessionID string) ([]Delivery, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return nil, err
	}
	var out []Delivery
	err = tx.scan(deliveryPrefix(sid), func(key, val []byte) error {
		var d Delivery
		if err := json.Unmarshal(val, &d); err != nil {
			return fmt.Errorf("storage: decode %s: %w", key, err)
		}
		out = append(out, d)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out, err
}

// NextDeliverySeq hands out the next enqueue sequence number (from 1),
// persisted in the same transaction as the entry that takes it.
func (tx *Tx) NextDeliverySeq() (uint64, error) {
	var cur uint64
	item, err := tx.txn.Get([]byte(deliverySeqKey))
	switch {
	case err == nil:
		if err := item.Value(func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("storage: %s holds %d bytes, want 8", deliverySeqKey, len(v))
			}
			cur = binary.BigEndian.Uint64(v)
			return nil
		}); err != nil {
			return 0, err
		}
	case !errors.Is(err, badger.ErrKeyNotFound):
		return 0, fmt.Errorf("storage: get %s: %w", deliverySeqKey, err)
	}
	next := cur + 1
	var buf [8]byte
	binary.BigEndian.PutUint64(buf[:], next)
	if err := tx.txn.Set([]byte(deliverySeqKey), buf[:]); err != nil {
		return 0, fmt.Errorf("storage: put %s: %w", deliverySeqKey, err)
	}
	return next, nil
}

// PendingDeliveries reads every entry still to send, in enqueue order
// (startup recovery).
func (s *Store) PendingDeliveries() ([]Delivery, error) {
	var out []Delivery
	err := s.View(func(tx *Tx) error {
		return tx.scan([]byte(pendingPrefix), func(key, val []byte) error {
			var ref pendingRef
			if err := json.Unmarshal(val, &ref); err != nil {
				return fmt.Errorf("storage: decode %s: %w", key, err)
			}
			d, ok, err := tx.Delivery(ref.SessionID, ref.ID)
			if err != nil || !ok {
				return err // a dangling index key is skipped
			}
			out = append(out, d)
			return nil
		})
	})
	return out, err
}

// ScanDeliveries calls fn for every entry of every session (pruning,
// gauges). fn must not write to the store.
func (s *Store) ScanDeliveries(fn func(Delivery) error) error {
	return s.View(func(tx *Tx) error {
		return tx.scan([]byte(sessionPrefix), func(key, val []byte) error {
			if !isSegmentKey(key, deliverySegment) {
				return nil
			}
			var d Delivery
			if err := json.Unmarshal(val, &d); err != nil {
				return fmt.Errorf("storage: decode %s: %w", key, err)
			}
			return fn(d)
		})
	})
}

// GetDelivery reads one entry.
func (s *Store) GetDelivery(sessionID, id string) (d Delivery, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		d, ok, err = tx.Delivery(sessionID, id)
		return err
	})
	return d, ok, err
}

// ListDeliveries reads a session's entries in enqueue order.
func (s *Store) ListDeliveries(sessionID string) (ds []Delivery, err error) {
	err = s.View(func(tx *Tx) error {
		ds, err = tx.Deliveries(sessionID)
		return err
	})
	return ds, err
}

// AppendEvent adds e to its session's event log and trims the log to its
// newest keep entries and to those logged at or after notBefore (Unix ms).
func (tx *Tx) AppendEvent(e SessionEvent, keep int, notBefore int64) error {
	sid, err := sanitizeID(e.SessionID)
	if err != nil {
		return fmt.Errorf("%s: %w", errBadRecordID, err)
	}
	if e.ID == 0 {
		return fmt.Errorf("storage: event without an id")
	}
	if err := tx.putJSON(eventKey(sid, e.ID), e); err != nil {
		return err
	}
	var keys [][]byte
	var times []int64
	if err := tx.scan(eventPrefix(sid), func(key, val []byte) error {
		var ev SessionEvent
		if err := json.Unmarshal(val, &ev); err != nil {
			return fmt.Errorf("storage: decode %s: %w", key, err)
		}
		keys = append(keys, append([]byte(nil), key...))
		times = append(times, ev.LoggedAt)
		return nil
	}); err != nil {
		return err
	}
	for i, k := range keys {
		if len(keys)-i <= keep && times[i] >= notBefore {
			break
		}
		if err := tx.txn.Delete(k); err != nil {
			return fmt.Errorf("storage: delete %s: %w", k, err)
		}
	}
	return nil
}

// EventsAfter reads up to limit events of a session with an id above
// after, oldest first.
func (s *Store) EventsAfter(sessionID string, after uint64, limit int) ([]SessionEvent, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return nil, err
	}
	var out []SessionEvent
	err = s.View(func(tx *Tx) error {
		return tx.scan(eventPrefix(sid), func(key, val []byte) error {
			if len(out) >= limit {
				return errStopScan
			}
			n, err := strconv.ParseUint(string(key[len(eventPrefix(sid)):]), 10, 64)
			if err != nil || n <= after {
				return nil
			}
			var ev SessionEvent
			if err := json.Unmarshal(val, &ev); err != nil {
				return fmt.Errorf("storage: decode %s: %w", key, err)
			}
			out = append(out, ev)
			return nil
		})
	})
	if errors.Is(err, errStopScan) {
		err = nil
	}
	return out, err
}

// errStopScan ends a scan early.
var errStopScan = errors.New("storage: stop scan")

// isSegmentKey reports whether k is v1/s/<sid>/<segment>….
func isSegmentKey(k []byte, segment string) bool {
	rest, ok := strings.CutPrefix(string(k), sessionPrefix)
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '/')
	return i > 0 && strings.HasPrefix(rest[i+1:], segment)
}
