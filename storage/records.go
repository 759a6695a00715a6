package storage

// Session is one client session seen by the host (docs/protocols.md#session-identity). ID is the
// original, unsanitized id; times are Unix ms.
type Session struct {
	ID          string `json:"id"`
	CreatedAt   int64  `json:"createdAt"`
	LastSeenAt  int64  `json:"lastSeenAt"`
	LastChannel string `json:"lastChannel,omitempty"` // docs/delivery.md#routing: channel of the last interaction
	Route       string `json:"route,omitempty"`       // docs/directives.md: pinned upstream route, "" = none
}

// ClockTask is one scheduled reminder (docs/clock-tool.md; seed 000 §3.1). Times are
// Unix ms; zero means unset.
type ClockTask struct {
	TaskID    string `json:"taskId"`
	SessionID string `json:"sessionId"` // original id; the key uses the sanitized form
	DueAt     int64  `json:"dueAt"`
	// UTCOffsetSec and TimeZone remember the zone the dueAt was written in,
	// so daily/weekly/cron repeats keep local wall-clock time.
	UTCOffsetSec int    `json:"utcOffsetSec"`
	TimeZone     string `json:"timeZone,omitempty"` // IANA name, when it matched the offset
	Task         string `json:"task"`
	Tool         string `json:"tool,omitempty"`
	Arguments    string `json:"arguments,omitempty"` // JSON text, a hint only
	Repeat       string `json:"repeat,omitempty"`    // "", daily, weekly, every <d>, cron
	MaxRuns      int    `json:"maxRuns,omitempty"`   // 0 = unlimited for repeating tasks
	Runs         int    `json:"runs,omitempty"`      // committed deliveries of a repeating task
	CreatedAt    int64  `json:"createdAt"`
	UpdatedAt    int64  `json:"updatedAt"`
	// NotBeforeRequestID blocks injection into this request and its
	// followups ("<id>:…") (docs/clock-tool.md#notbeforerequestid).
	NotBeforeRequestID string `json:"notBeforeRequestId,omitempty"`
	// DeliveredAt marks the current occurrence delivered; a re-armed
	// repeating task clears it and keeps LastDeliveredAt.
	DeliveredAt     int64  `json:"deliveredAt,omitempty"`
	LastDeliveredAt int64  `json:"lastDeliveredAt,omitempty"`
	DeliveryCount   int    `json:"deliveryCount"`
	ReservedBy      string `json:"reservedBy,omitempty"` // request id holding the reservation
	ReservedAt      int64  `json:"reservedAt,omitempty"`
	// Notice, when set, makes this a notice another feature left for the
	// session (a background timer's completion, docs/timers.md): its text is
	// injected verbatim, and the clock tool neither lists nor counts it.
	Notice string `json:"notice,omitempty"`
}

// Timer is one timer of the timer tools (docs/timers.md; seed 004). Times
// are Unix ms of host time; durations are ms.
type Timer struct {
	TimerID   string `json:"timerId"`
	SessionID string `json:"sessionId"`
	Reason    string `json:"reason,omitempty"`
	TotalMs   int64  `json:"totalMs"`
	CreatedAt int64  `json:"createdAt"`
	Status    string `json:"status"`
	// EndAt is when a running timer completes (host time; the in-memory
	// wait uses monotonic time and only restarts read this).
	EndAt int64 `json:"endAt,omitempty"`
	// RemainingMs is what a paused timer has left; PauseUntil is when the
	// pause ends by itself.
	RemainingMs int64 `json:"remainingMs,omitempty"`
	PauseUntil  int64 `json:"pauseUntil,omitempty"`
	// Background: notify when it completes (cancel_timer, a dropped wait).
	Background bool              `json:"background,omitempty"`
	FinishedAt int64             `json:"finishedAt,omitempty"` // Completed or Stopped
	History    []TimerTransition `json:"history"`
}

// TimerTransition is one recorded change of a timer's state.
type TimerTransition struct {
	At     int64  `json:"at"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// StopMessage is the per-session auto-continue state (docs/continuation.md).
type StopMessage struct {
	Text       string `json:"text"`
	MaxRepeats int    `json:"maxRepeats"`
	Used       int    `json:"used"`
	UpdatedAt  int64  `json:"updatedAt"`
	LastUsedAt int64  `json:"lastUsedAt,omitempty"`
}

// AppliedDirectives remembers the digests of the directives applied to a
// session, oldest first, at most MaxDirectiveDigests of them (docs/directives.md: the
// same directive at the same position is applied once). A digest is opaque
// to the store; the host derives it from the directive and its position.
type AppliedDirectives struct {
	Digests []string `json:"digests"`
}

// NTPState is the persisted NTP tracker state (docs/time.md#ntp). UpdatedAt is the
// time of the last good sync; Error is the last attempt's error, if it failed.
type NTPState struct {
	Status    string `json:"status"`
	OffsetMs  int64  `json:"offsetMs"`
	Server    string `json:"server,omitempty"`
	UpdatedAt int64  `json:"updatedAt,omitempty"`
	Error     string `json:"error,omitempty"`
}

// Reservation records which tasks a request reserved (docs/clock-tool.md
// reservation/commit), so that commit and rollback need only the request id.
type Reservation struct {
	RequestID  string   `json:"requestId"`
	SessionID  string   `json:"sessionId"`
	TaskIDs    []string `json:"taskIds"`
	ReservedAt int64    `json:"reservedAt"`
	// RolledBack marks a tombstone: the filter rolled back an id before
	// its prepare reserved anything, so a late prepare reserves nothing.
	RolledBack bool `json:"rolledBack,omitempty"`
}
