// Package hostapi is the contract between the chime filter (chime.wasm)
// and the chime host: every type, constant and string that crosses
// between them (docs/host-api.md). plugin/ and host/ import it; it
// imports neither, only the wire-protocol package llm for the canonical
// turn and the parsed directive.
package hostapi

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/chimehq/chime/llm"
)

// The filter ↔ host API (docs/architecture.md). The filter calls these endpoints on the
// host cluster through proxy_http_call, each with
// `authorization: Bearer <token>` and a JSON body; a wrong or missing token
// gets 401 and touches no state (docs/failures.md). docs/host-api.md describes it.
const (
	PathPrepare  = "/v1/filter/prepare"  // PrepareRequest → PrepareResponse
	PathCommit   = "/v1/filter/commit"   // OutcomeRequest → 204
	PathRollback = "/v1/filter/rollback" // OutcomeRequest → 204
	PathState    = "/v1/filter/state"    // GET → StateResponse (the filter's tick)
	PathResolve  = "/v1/filter/resolve"  // ResolveRequest → ResolveResponse (response path, docs/architecture.md)
	PathCancel   = "/v1/filter/cancel"   // OutcomeRequest → 204: the client of that request went away
	// PathFollowup: FollowupRequest → 204 the first time a valid marker is
	// shown, 403 for an invalid, expired or already used one (docs/failures.md).
	PathFollowup = "/v1/filter/followup"
	// PathTemplate: a ResolveRequest of a finished turn the host did not
	// resolve → 204. The host keeps it as the session's wake template
	// (docs/scheduler.md#templates); the filter sends it only when a
	// prepare answer asked (PrepareResponse.Template) and does not wait.
	PathTemplate = "/v1/filter/template"
)

// HeaderFollowup marks a request the host sent back through the proxy
// listener. Its value is FollowupMarker(token, requestID, now); the filter lets
// such a request through untouched and removes the header before it leaves.
const HeaderFollowup = "x-chime-followup"

// HeaderTimezone selects the time tag's zone per request (docs/time.md#time-tag).
const HeaderTimezone = "x-chime-timezone"

// HeaderRoute carries the session's pinned route (`<**route:NAME**>`) on
// requests and followups; the envoy.yaml routes match on it (docs/directives.md#routing
// Routing).
const HeaderRoute = "x-chime-route"

// HostDirective is a directive the host applies to session state. The
// filter parses and strips tags; the host, which owns state, acts on them.
type HostDirective struct {
	Kind       string         `json:"kind"` // one of the Directive* kinds
	Text       string         `json:"text,omitempty"`
	MaxRepeats int            `json:"maxRepeats,omitempty"`
	Clock      *llm.ClockItem `json:"clock,omitempty"`
	Route      string         `json:"route,omitempty"`
	// EveryMs is the heartbeat interval of DirectiveHeartbeat.
	EveryMs int64 `json:"everyMs,omitempty"`
	// Position is Directive.Position: the user turns before the tag's
	// message. The host applies a directive once per session and position
	// (docs/directives.md).
	Position int `json:"position"`
}

// MaxDirectivesPerRequest bounds the work one prepare does: the filter
// sends at most this many directives of a request and the host applies at
// most this many; the rest are counted and ignored (docs/failures.md). A person
// types a handful; 1 000 are an attack on the host.
const MaxDirectivesPerRequest = 32

// PrepareRequest is what the filter knows once the request body is in.
type PrepareRequest struct {
	RequestID  string          `json:"requestId"`
	Protocol   string          `json:"protocol"`            // Protocol.String()
	SessionID  string          `json:"sessionId,omitempty"` // "" = no session (docs/protocols.md#session-identity)
	Timezone   string          `json:"timezone,omitempty"`  // effective IANA zone of the time tag
	Directives []HostDirective `json:"directives,omitempty"`
	// PreviousResponseID is the Responses previous_response_id, "" when
	// absent: the body then holds only new items, so directive positions
	// count from that response and the host keys them by it too (docs/directives.md).
	PreviousResponseID string `json:"previousResponseId,omitempty"`
	// DeadlineMs is when the filter stops waiting for the answer, in host
	// time (the filter's clock plus the host's NTP offset, Unix ms); 0 =
	// none. A prepare handled after it reserves nothing: the filter has
	// failed open and rolled the id back (docs/failures.md).
	DeadlineMs int64 `json:"deadlineMs,omitempty"`
	// Kept are directives of the session's earlier requests that the filter
	// accepted while the host was unreachable (docs/failures.md); the host applies
	// them, oldest first, before Directives.
	Kept []KeptDirectives `json:"kept,omitempty"`
}

// KeptDirectives is one earlier request's directives, with what their
// applied-once digest depends on (docs/directives.md).
type KeptDirectives struct {
	RequestID          string          `json:"requestId"`
	PreviousResponseID string          `json:"previousResponseId,omitempty"`
	Directives         []HostDirective `json:"directives"`
	KeptAtMs           int64           `json:"keptAtMs"` // filter clock
}

// NTPInfo is the host's view of clock correction (docs/time.md#ntp).
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
	// Reminders is the user text to append (docs/clock-tool.md), "" when none is due.
	Reminders string `json:"reminders,omitempty"`
	// Reserved is true when reminders were reserved for this request id and
	// the filter must report the outcome (commit or rollback).
	Reserved bool `json:"reserved,omitempty"`
	// MayContinue tells the filter that a response finishing with stop or
	// length is worth a resolve call for this session: a stopMessage is
	// active or a task is pending. Server-tool calls are resolved anyway.
	MayContinue bool `json:"mayContinue,omitempty"`
	// Route is the session's pinned upstream route after this request's
	// directives, "" when none (docs/directives.md#routing).
	Route string `json:"route,omitempty"`
	// Template asks the filter to send this request and its answer to
	// PathTemplate once the answer is complete, unless it is resolved
	// (the host then keeps the chain's own): the session can be woken
	// (docs/scheduler.md#templates).
	Template bool `json:"template,omitempty"`
	// Generation is the host's prepare generation (skip.go), read before
	// the session state this answer reflects; 0 from a host without it.
	Generation int64 `json:"generation,omitempty"`
	// QuietMs is how long from now this session's requests need no
	// prepare while the generation stays Generation: nothing comes due,
	// nothing is pending, no stopMessage (skip.go). 0 = the next request
	// needs one.
	QuietMs int64 `json:"quietMs,omitempty"`
}

// ResolveRequest hands the host a finished upstream turn that needs work:
// server-tool calls to execute, or a stop/length finish the host may
// continue (stopMessage, hold). The host answers once the whole followup
// chain is done (docs/continuation.md#loop-guards), so the filter's http_call timeout
// must cover holds and followups.
type ResolveRequest struct {
	RequestID string `json:"requestId"`
	SessionID string `json:"sessionId,omitempty"`
	Protocol  string `json:"protocol"` // Protocol.String()
	Path      string `json:"path"`     // request path as the client sent it
	// Reentry is the proxy listener (host:port) followups are sent to, so
	// upstream auth, TLS and the route stay the proxy's (docs/architecture.md).
	Reentry string `json:"reentry"`
	// Headers are the client's request headers to repeat on followups
	// (provider credentials among them): never logged above debug.
	Headers map[string]string `json:"headers,omitempty"`
	// Request is the request body exactly as the provider received it
	// (directives already stripped, time tag and tools injected).
	Request json.RawMessage `json:"request"`
	// Turn is the provider's answer in canonical form, with its provider
	// items (thinking blocks, reasoning items) for the followups to replay
	// (docs/architecture.md).
	Turn *llm.Turn `json:"turn"`
	// ServerTools names the tools the filter withheld from the client.
	ServerTools []string `json:"serverTools"`
	// Streaming is true when the client asked for SSE.
	Streaming bool `json:"streaming,omitempty"`
	// Timezone is the effective zone of the request (for tool calls).
	Timezone string `json:"timezone,omitempty"`
}

// ResolveResponse is the host's verdict.
type ResolveResponse struct {
	// Continued is false when there is nothing to add: the filter then
	// shows the client the original turn (minus server-tool calls).
	Continued bool `json:"continued"`
	// Continuation folds every followup turn of the chain (their text in
	// order, the last turn's tool calls and finish, usage summed). The filter
	// merges it after the original turn (llm.Merge / Splicer.Continue).
	Continuation *llm.Turn `json:"continuation,omitempty"`
	// Reason says why the chain ended: one of the Reason* values. After a failed followup the
	// continuation is the last good turn with a note appended to its text
	// (docs/failures.md), so Continued is true even when no followup came back.
	Reason string `json:"reason,omitempty"`
	// Hops is the number of followups sent.
	Hops int `json:"hops"`
	// Generation is the host's prepare generation once the chain is done:
	// what its tools changed is reflected only by prepare answers of this
	// generation or later (skip.go).
	Generation int64 `json:"generation,omitempty"`
}

// OutcomeRequest commits or rolls back a request's reservation.
type OutcomeRequest struct {
	RequestID string `json:"requestId"`
}

// StateResponse is what the filter refreshes on its tick.
type StateResponse struct {
	NowMs int64   `json:"nowMs"`
	NTP   NTPInfo `json:"ntp"`
	// Generation is the host's prepare generation (skip.go).
	Generation int64 `json:"generation,omitempty"`
}

// FollowupMarkerTTL is how long a followup marker is valid: it is checked
// as the followup reaches the proxy, moments after the host signed it.
// Expiry is counted in whole minutes, so a marker lives 2 to 3 minutes.
const FollowupMarkerTTL = 2 * time.Minute

// FollowupMarker is the HeaderFollowup value for a followup of requestID:
// `<id>.<expiry>.<mac>`, the expiry in Unix minutes and the MAC an
// HMAC-SHA256 over id and expiry keyed by the shared token, so the token
// itself never travels, a client cannot forge a followup, and a captured
// marker dies within minutes. The host accepts each marker once
// (PathFollowup), so it cannot be replayed either (docs/failures.md).
func FollowupMarker(token, requestID string, now time.Time) string {
	exp := strconv.FormatInt(now.Add(FollowupMarkerTTL).Unix()/60+1, 10)
	return requestID + "." + exp + "." + followupMAC(token, requestID+"."+exp)
}

// VerifyFollowupMarker checks a HeaderFollowup value's MAC and expiry at
// now and returns the request id it carries.
func VerifyFollowupMarker(token, value string, now time.Time) (requestID string, ok bool) {
	if token == "" {
		return "", false
	}
	i := strings.LastIndexByte(value, '.')
	if i <= 0 {
		return "", false
	}
	signed, mac := value[:i], value[i+1:]
	j := strings.LastIndexByte(signed, '.')
	if j <= 0 {
		return "", false
	}
	exp, err := strconv.ParseInt(signed[j+1:], 10, 64)
	if err != nil || !hmac.Equal([]byte(mac), []byte(followupMAC(token, signed))) {
		return "", false
	}
	if now.Unix() >= exp*60 {
		return "", false
	}
	return signed[:j], true
}

// FollowupRequest is the body of PathFollowup: the filter asks the host
// to accept a followup marker, which it does once.
type FollowupRequest struct {
	Marker string `json:"marker"`
}

func followupMAC(token, signed string) string {
	m := hmac.New(sha256.New, []byte(token))
	m.Write([]byte(signed))
	return hex.EncodeToString(m.Sum(nil))
}

// Directive kinds of HostDirective.Kind (docs/directives.md).
const (
	DirectiveStopMessage      = "stopMessage"
	DirectiveStopMessageClear = "stopMessage:clear"
	DirectiveClock            = "clock"
	DirectiveClockClear       = "clock:clear"
	DirectiveRoute            = "route"
	DirectiveRouteClear       = "route:clear"
	DirectiveHeartbeat        = "heartbeat"
	DirectiveHeartbeatOff     = "heartbeat:off"
)

// DirectiveKind returns the HostDirective kind of a parsed directive, ""
// for one the host does not act on (unknown tags are only stripped).
func DirectiveKind(k llm.DirectiveKind) string {
	switch k {
	case llm.DirectiveStopMessage:
		return DirectiveStopMessage
	case llm.DirectiveStopMessageClear:
		return DirectiveStopMessageClear
	case llm.DirectiveClock:
		return DirectiveClock
	case llm.DirectiveClockClear:
		return DirectiveClockClear
	case llm.DirectiveRoute:
		return DirectiveRoute
	case llm.DirectiveRouteClear:
		return DirectiveRouteClear
	case llm.DirectiveHeartbeat:
		return DirectiveHeartbeat
	case llm.DirectiveHeartbeatOff:
		return DirectiveHeartbeatOff
	}
	return ""
}

// Reasons a followup chain ends (ResolveResponse.Reason; docs/continuation.md, docs/failures.md).
const (
	ReasonDone          = "done"           // nothing (more) to do
	ReasonClientTools   = "client_tools"   // the turn has client tool calls: the client answers them
	ReasonMaxHops       = "max_hops"       // at most 8 followups per chain
	ReasonMaxDuration   = "max_duration"   // at most 15 min of wall time per chain
	ReasonRepeated      = "repeated"       // 3 identical request/response pairs
	ReasonCancelled     = "cancelled"      // the client went away (PathCancel or the callout dropped)
	ReasonRejected      = "rejected"       // the provider answered a followup with 4xx
	ReasonUpstreamError = "upstream_error" // a followup got 5xx, no answer, or a body that is not a turn
	ReasonError         = "error"          // a followup could not be built
)
