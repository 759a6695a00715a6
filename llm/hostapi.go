package llm

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// The filter ↔ host API (SPEC §1). The filter calls these endpoints on the
// host cluster through proxy_http_call, each with
// `authorization: Bearer <token>` and a JSON body; a wrong or missing token
// gets 401 and touches no state (SPEC §14). docs/host-api.md describes it.
const (
	PathPrepare  = "/v1/filter/prepare"  // PrepareRequest → PrepareResponse
	PathCommit   = "/v1/filter/commit"   // OutcomeRequest → 204
	PathRollback = "/v1/filter/rollback" // OutcomeRequest → 204
	PathState    = "/v1/filter/state"    // GET → StateResponse (the filter's tick)
)

// HeaderFollowup marks a request the host sent back through the proxy
// listener. Its value is FollowupMarker(token, requestID); the filter lets
// such a request through untouched and removes the header before it leaves.
const HeaderFollowup = "x-chime-followup"

// HeaderTimezone selects the time tag's zone per request (SPEC §5).
const HeaderTimezone = "x-chime-timezone"

// HostDirective is a directive the host applies to session state. The
// filter parses and strips tags; the host, which owns state, acts on them.
type HostDirective struct {
	Kind       string     `json:"kind"` // DirectiveKind.String(): stopMessage, stopMessage:clear, clock, clock:clear, route, route:clear
	Text       string     `json:"text,omitempty"`
	MaxRepeats int        `json:"maxRepeats,omitempty"`
	Clock      *ClockItem `json:"clock,omitempty"`
	Route      string     `json:"route,omitempty"`
}

// PrepareRequest is what the filter knows once the request body is in.
type PrepareRequest struct {
	RequestID  string          `json:"requestId"`
	Protocol   string          `json:"protocol"`            // Protocol.String()
	SessionID  string          `json:"sessionId,omitempty"` // "" = no session (SPEC §3)
	Timezone   string          `json:"timezone,omitempty"`  // effective IANA zone of the time tag
	Directives []HostDirective `json:"directives,omitempty"`
}

// NTPInfo is the host's view of clock correction (SPEC §11).
type NTPInfo struct {
	Status    string `json:"status"` // ok | stale | error | disabled
	OffsetMs  int64  `json:"offsetMs"`
	Server    string `json:"server,omitempty"`
	UpdatedAt int64  `json:"updatedAt,omitempty"` // unix ms; 0 = never
}

// PrepareResponse tells the filter what to inject.
type PrepareResponse struct {
	NowMs int64   `json:"nowMs"` // host wall clock + NTP offset
	NTP   NTPInfo `json:"ntp"`
	// Tools are the server tools to inject, by name (the filter owns the
	// schemas, e.g. ClockToolSpec for "clock").
	Tools []string `json:"tools,omitempty"`
	// Reminders is the user text to append (SPEC §6), "" when none is due.
	Reminders string `json:"reminders,omitempty"`
	// Reserved is true when reminders were reserved for this request id and
	// the filter must report the outcome (commit or rollback).
	Reserved bool `json:"reserved,omitempty"`
}

// OutcomeRequest commits or rolls back a request's reservation.
type OutcomeRequest struct {
	RequestID string `json:"requestId"`
}

// StateResponse is what the filter refreshes on its tick.
type StateResponse struct {
	NowMs int64   `json:"nowMs"`
	NTP   NTPInfo `json:"ntp"`
}

// FollowupMarker is the HeaderFollowup value for a followup of requestID:
// the id and an HMAC-SHA256 over it keyed by the shared token, so the token
// itself never travels and a client cannot forge a followup.
func FollowupMarker(token, requestID string) string {
	return requestID + "." + followupMAC(token, requestID)
}

// VerifyFollowupMarker checks a HeaderFollowup value and returns the
// request id it carries.
func VerifyFollowupMarker(token, value string) (requestID string, ok bool) {
	i := strings.LastIndexByte(value, '.')
	if i <= 0 || token == "" {
		return "", false
	}
	id, mac := value[:i], value[i+1:]
	if !hmac.Equal([]byte(mac), []byte(followupMAC(token, id))) {
		return "", false
	}
	return id, true
}

func followupMAC(token, requestID string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(requestID))
	return hex.EncodeToString(m.Sum(nil))
}
