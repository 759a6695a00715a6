package storage

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	badger "github.com/dgraph-io/badger/v4"
)

// --- the scheduler's per-session records (docs/scheduler.md) ---

// Heartbeat is a session's heartbeat setting, when the directive, the API
// or the dashboard set one; without a record the host config's default
// applies. Durations are ms; zero fields take the config's values.
type Heartbeat struct {
	SessionID       string       `json:"sessionId"`
	Enabled         bool         `json:"enabled"`
	EveryMs         int64        `json:"everyMs,omitempty"`
	Prompt          string       `json:"prompt,omitempty"`
	AckToken        string       `json:"ackToken,omitempty"`
	AckMaxChars     int          `json:"ackMaxChars,omitempty"`
	ActiveHours     *ActiveHours `json:"activeHours,omitempty"`
	OnlyWhenPending bool         `json:"onlyWhenPending,omitempty"`
	UpdatedAt       int64        `json:"updatedAt"`
}

// ActiveHours limits interval wakes to a daily window, overnight allowed.
type ActiveHours struct {
	Start    string `json:"start" yaml:"start"`       // "HH:MM"
	End      string `json:"end" yaml:"end"`           // "HH:MM", "24:00" allowed
	Timezone string `json:"timezone" yaml:"timezone"` // IANA name or "local"
}

// SystemEvent is one queued event for a session's next wake.
type SystemEvent struct {
	ContextKey string `json:"contextKey"` // the newer of two equal keys replaces the older
	Text       string `json:"text"`
	Source     string `json:"source,omitempty"` // cron, hook, api, ...
	At         int64  `json:"at"`               // Unix ms
}

// EventQueue is a session's system events, oldest first.
type EventQueue struct {
	SessionID string        `json:"sessionId"`
	Events    []SystemEvent `json:"events"`
}

// WakeRun is the record of one wake run.
type WakeRun struct {
	ID         string `json:"id"` // wake:<session>:<n>
	Reason     string `json:"reason"`
	Status     string `json:"status"` // sent, ok-ack, ok-empty, skipped, failed
	Why        string `json:"why,omitempty"`
	Error      string `json:"error,omitempty"`
	StartedAt  int64  `json:"startedAt"`
	DurationMs int64  `json:"durationMs"`
	// Usage of the run's provider calls.
	InputTokens  int    `json:"inputTokens,omitempty"`
	OutputTokens int    `json:"outputTokens,omitempty"`
	Reply        string `json:"reply,omitempty"` // bounded
	Events       int    `json:"events,omitempty"`
	Reminders    int    `json:"reminders,omitempty"`
	Isolated     string `json:"isolated,omitempty"` // the isolated session id of a cron run
}

// WakeRuns is a session's recent runs, newest last, and its run counter.
type WakeRuns struct {
	SessionID string    `json:"sessionId"`
	Seq       int64     `json:"seq"`
	Runs      []WakeRun `json:"runs"`
}

// WakeTemplate is the session's last request through chime, from which a
// wake is built. Credentials are never in it: the host keeps those in
// memory only.
type WakeTemplate struct {
	SessionID   string            `json:"sessionId"`
	Protocol    string            `json:"protocol"`
	Path        string            `json:"path"`
	Reentry     string            `json:"reentry,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	Request     json.RawMessage   `json:"request"`
	Turn        json.RawMessage   `json:"turn,omitempty"` // the answer it got, an llm.Turn; null when unknown
	ServerTools []string          `json:"serverTools,omitempty"`
	Timezone    string            `json:"timezone,omitempty"`
	UpdatedAt   int64             `json:"updatedAt"`
}

const (
	heartbeatSuffix = "heartbeat"
	eventsSuffix    = "events"
	runsSuffix      = "runs"
	templateSuffix  = "template"
)

func sessionRecordKey(sessionID, suffix string) ([]byte, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return nil, err
	}
	return []byte(sessionRoot(sid) + suffix), nil
}

func (tx *Tx) sessionRecord(sessionID, suffix string, v any) (bool, error) {
	k, err := sessionRecordKey(sessionID, suffix)
	if err != nil {
		return false, err
	}
	return tx.getJSON(k, v)
}

func (tx *Tx) putSessionRecord(sessionID, suffix string, v any) error {
	k, err := sessionRecordKey(sessionID, suffix)
	if err != nil {
		return fmt.Errorf("%s: %w", errBadRecordID, err)
	}
	return tx.putJSON(k, v)
}

func (tx *Tx) deleteSessionRecord(sessionID, suffix string) (bool, error) {
	k, err := sessionRecordKey(sessionID, suffix)
	if err != nil {
		return false, err
	}
	return tx.del(k)
}

// Heartbeat reads a session's heartbeat setting.
func (tx *Tx) Heartbeat(sessionID string) (h Heartbeat, ok bool, err error) {
	ok, err = tx.sessionRecord(sessionID, heartbeatSuffix, &h)
	return h, ok, err
}

// PutHeartbeat writes h under h.SessionID.
func (tx *Tx) PutHeartbeat(h Heartbeat) error {
	return tx.putSessionRecord(h.SessionID, heartbeatSuffix, h)
}

// DeleteHeartbeat removes a session's heartbeat setting.
func (tx *Tx) DeleteHeartbeat(sessionID string) (bool, error) {
	return tx.deleteSessionRecord(sessionID, heartbeatSuffix)
}

// Events reads a session's event queue.
func (tx *Tx) Events(sessionID string) (q EventQueue, err error) {
	_, err = tx.sessionRecord(sessionID, eventsSuffix, &q)
	q.SessionID = sessionID
	return q, err
}

// PutEvents writes a session's event queue; an empty one is deleted.
func (tx *Tx) PutEvents(q EventQueue) error {
	if len(q.Events) == 0 {
		_, err := tx.deleteSessionRecord(q.SessionID, eventsSuffix)
		return err
	}
	return tx.putSessionRecord(q.SessionID, eventsSuffix, q)
}

// WakeRuns reads a session's run history.
func (tx *Tx) WakeRuns(sessionID string) (r WakeRuns, err error) {
	_, err = tx.sessionRecord(sessionID, runsSuffix, &r)
	r.SessionID = sessionID
	return r, err
}

// PutWakeRuns writes a session's run history.
func (tx *Tx) PutWakeRuns(r WakeRuns) error {
	return tx.putSessionRecord(r.SessionID, runsSuffix, r)
}

// WakeTemplate reads a session's wake template.
func (tx *Tx) WakeTemplate(sessionID string) (t WakeTemplate, ok bool, err error) {
	ok, err = tx.sessionRecord(sessionID, templateSuffix, &t)
	return t, ok, err
}

// PutWakeTemplate writes t under t.SessionID.
func (tx *Tx) PutWakeTemplate(t WakeTemplate) error {
	return tx.putSessionRecord(t.SessionID, templateSuffix, t)
}

// ScanHeartbeats calls fn for every stored heartbeat setting (restore at
// start). fn must not write to the store.
func (s *Store) ScanHeartbeats(fn func(Heartbeat) error) error {
	return s.scanSessionRecords(heartbeatSuffix, func(val []byte) error {
		var h Heartbeat
		if err := json.Unmarshal(val, &h); err != nil {
			return err
		}
		return fn(h)
	})
}

// ScanEventQueues calls fn for every non-empty event queue.
func (s *Store) ScanEventQueues(fn func(EventQueue) error) error {
	return s.scanSessionRecords(eventsSuffix, func(val []byte) error {
		var q EventQueue
		if err := json.Unmarshal(val, &q); err != nil {
			return err
		}
		return fn(q)
	})
}

func (s *Store) scanSessionRecords(suffix string, fn func(val []byte) error) error {
	return s.View(func(tx *Tx) error {
		return tx.scan([]byte(sessionPrefix), func(key, val []byte) error {
			rest := strings.TrimPrefix(string(key), sessionPrefix)
			i := strings.IndexByte(rest, '/')
			if i <= 0 || rest[i+1:] != suffix {
				return nil
			}
			if err := fn(val); err != nil {
				return fmt.Errorf("storage: decode %s: %w", key, err)
			}
			return nil
		})
	})
}

// HasTasks reports whether the session has any clock task or notice.
func (s *Store) HasTasks(sessionID string) (bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return false, err
	}
	found := false
	err = s.View(func(tx *Tx) error {
		return tx.scanLimit(taskPrefix(sid), 1, func(_, _ []byte) error { found = true; return nil })
	})
	return found, err
}

// ScanTemplateSessions calls fn with the session id of every stored wake
// template (restore at start).
func (s *Store) ScanTemplateSessions(fn func(sessionID string) error) error {
	return s.scanSessionRecords(templateSuffix, func(val []byte) error {
		sid := decodeSessionID(val)
		if sid == "" {
			return nil
		}
		return fn(sid)
	})
}

// decodeSessionID reads a record's sessionId field.
func decodeSessionID(val []byte) string {
	var v struct {
		SessionID string `json:"sessionId"`
	}
	dec := json.NewDecoder(bytes.NewReader(val))
	if err := dec.Decode(&v); err != nil {
		return ""
	}
	return v.SessionID
}

// scanLimit calls fn for at most n keys with prefix, without their values.
func (tx *Tx) scanLimit(prefix []byte, n int, fn func(key, val []byte) error) error {
	it := tx.txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix) && n > 0; it.Next() {
		n--
		if err := fn(it.Item().Key(), nil); err != nil {
			return err
		}
	}
	return nil
}
