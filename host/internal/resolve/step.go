package resolve

import (
	"context"
	"errors"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/llm"
)

// A Step is one way a finished turn can continue (docs/continuation.md#the-followup-chain).
// Config.Steps lists them in priority order: server tools, then
// stopMessage, then a hold. After each turn the chain asks them in that
// order; the first that continues the turn, or ends the chain, decides.
// The loop guards stay in the chain: a step calls Chain.Guard before any
// side effect, and the chain checks cancel and duration between steps.
type Step interface {
	// Kind is the followup kind ("tool", "stop", "hold"): the
	// chime_followups_total label and the request id suffix.
	Kind() string
	// Next decides whether the chain continues after c's turn. It returns
	// the followup to send (ok true), or ok false and reason "" to let the
	// next step decide, or an end reason (hostapi.Reason*). ctx is the
	// chain's: it ends on cancel and on the duration guard. With a reason,
	// f is ignored, and the step must have released what it reserved.
	Next(ctx context.Context, c Chain) (f Followup, ok bool, reason string)
}

// Chain is what a step sees of the chain it may continue.
type Chain interface {
	// Turn is the finished turn to continue. Steps only read it, except
	// through AssignCallIDs.
	Turn() *llm.Turn
	SessionID() string
	// RequestID is the chain's root request id; server tools run under it
	// so a task scheduled inside the due window is blocked for the whole
	// chain (docs/clock-tool.md#notbeforerequestid).
	RequestID() string
	// ServerTools names the tools the filter withheld from the client.
	ServerTools() []string
	// Streaming reports an SSE client (holdNonStreaming, docs/continuation.md#holds).
	Streaming() bool
	// Compaction reports a compaction request (docs/continuation.md): never continued.
	Compaction() bool
	// NextID is the next followup's request id, `<root>:<kind><hop>`.
	NextID(kind string) string
	// AssignCallIDs gives the turn's tool calls without an id a stable
	// one, so that tool results can name them.
	AssignCallIDs()
	// Guard is the hop guard (docs/continuation.md): ReasonMaxHops when the chain may
	// send no more followups, else "".
	Guard() string
	// Clock is host time with the NTP offset; waits use it.
	Clock() timesource.Clock
}

// A Followup is what a step sends: the conversation so far, plus the
// assistant turn, plus Results and then UserText (llm.BuildFollowup).
type Followup struct {
	// ID is the followup's request id; "" means Chain.NextID(Kind()).
	ID       string
	Results  []llm.ToolResult
	UserText string
	// Settle, if set, runs once with what became of the followup, whatever
	// the chain's context says: a hold commits or rolls back its
	// reservation here.
	Settle func(Outcome)
}

// Outcome is what became of a followup.
type Outcome int

const (
	// Unsent: the followup could not be built; nothing left.
	Unsent Outcome = iota
	// Delivered: it got a 2xx answer.
	Delivered
	// Failed: it left but got no 2xx answer (or none: a cancel aborts it).
	Failed
)

func (f Followup) settle(o Outcome) {
	if f.Settle != nil {
		f.Settle(o)
	}
}

// Continuable returns the finish of c's turn (none counts as stop) and
// whether a continuation without tool calls may follow it at all (docs/continuation.md,
// §8): the turn calls no tools, it ended with stop or length, the request
// has a session, and it is not a compaction request.
func Continuable(c Chain) (llm.FinishReason, bool) {
	t := c.Turn()
	fin := t.Finish.Reason
	if fin == llm.FinishNone {
		fin = llm.FinishStop
	}
	ok := len(t.ToolCalls) == 0 && (fin == llm.FinishStop || fin == llm.FinishLength) &&
		!c.Compaction() && c.SessionID() != ""
	return fin, ok
}

// Stopped returns the guard that ended a chain's context: ReasonMaxDuration
// or ReasonCancelled, or "" while it runs.
func Stopped(ctx context.Context) string {
	if ctx.Err() == nil {
		return ""
	}
	if errors.Is(context.Cause(ctx), errMaxDuration) {
		return ReasonMaxDuration
	}
	return ReasonCancelled
}
