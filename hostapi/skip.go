package hostapi

import "time"

// Skipping prepare (docs/architecture.md#skipping-prepare). Most requests
// of most sessions have nothing due, no directive and no stopMessage: their
// prepare answer would only name the tools. The host says in each prepare
// answer for how long the session stays like that (PrepareResponse.QuietMs)
// and under which generation (PrepareResponse.Generation): a host-wide
// counter that moves whenever anything a prepare answer depends on changes
// by another path (a tool, the API, the dashboard, MCP, a wake, cron, a
// delivery, a timer). The filter keeps {generation, quiet until} per
// session and forwards a request without a directive, of a session whose
// entry is still quiet under the generation it knows, without asking.
//
// The generation travels by long poll: the filter keeps one GET PathState
// with QueryGeneration (what it knows) and QueryInstance outstanding; the
// host answers it at once when its generation differs and holds it for up
// to GenerationHold otherwise. The filter trusts the generation it knows
// for GenerationTrust after sending the poll whose answer confirmed it
// (the send precedes the host's receipt, whatever the delays), and stops
// trusting it when a poll fails. A host API call that changes state
// answers only once every filter instance the host has heard from within
// GenerationTrust (plus GenerationSettleSlack) has reported the new
// generation in a poll: a request sent after the API call returned is
// prepared.
const (
	// QueryGeneration is the generation the filter knows (0 = none).
	QueryGeneration = "gen"
	// QueryInstance names the polling filter root context (random hex).
	QueryInstance = "instance"
	// GenerationHold is how long the host holds a poll whose generation
	// is current.
	GenerationHold = 5 * time.Second
	// GenerationPollTimeout is the poll's http_call timeout: the hold and
	// slack for the answer.
	GenerationPollTimeout = GenerationHold + 2*time.Second
	// GenerationTrust is how long after sending a poll the filter trusts
	// the generation its answer confirmed: long enough to span the next
	// poll's hold, so that a live poll chain trusts without a gap.
	GenerationTrust = GenerationHold + GenerationPollTimeout
	// GenerationSettleSlack is added to GenerationTrust by the host when
	// it waits for an instance that does not report (clock rates differ).
	GenerationSettleSlack = time.Second
	// MaxQuiet caps PrepareResponse.QuietMs: a session prepares at least
	// this often.
	MaxQuiet = 5 * time.Minute
)

// PathTouch tells the host about requests that skipped prepare:
// TouchRequest → 204. The host records them as a prepare would (the
// session's last activity and delivery channel); the filter sends them on
// its tick, at most one call per second per root context.
const PathTouch = "/v1/filter/touch"

// TouchRequest lists sessions seen without a prepare since the last one.
type TouchRequest struct {
	Sessions []SessionTouch `json:"sessions"`
}

// SessionTouch is one session's latest skipped request, in host time
// (the filter's clock plus the NTP offset it knows), Unix ms.
type SessionTouch struct {
	SessionID string `json:"sessionId"`
	AtMs      int64  `json:"atMs"`
}

// MaxTouchSessions bounds one TouchRequest; the filter sends the rest on
// a later tick.
const MaxTouchSessions = 1000
