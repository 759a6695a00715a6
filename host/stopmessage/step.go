package stopmessage

import (
	"context"
	"log/slog"
	"time"

	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/llm"
)

// Kind is the stopMessage followup's kind: the chime_followups_total
// label and the request id suffix (`<id>:stop<n>`).
const Kind = "stop"

// state is what the step needs of Messages (tests fake a failing store).
type state interface {
	Active(sessionID string) bool
	Consume(sessionID string, now time.Time) (string, bool, error)
}

// step is the stopMessage continuation of the followup chain (docs/continuation.md).
type step struct {
	state state
	log   *slog.Logger
}

// Step is the chain step that answers a stopped turn with the session's
// stopMessage text. It goes after the server-tool step and before the
// hold (docs/continuation.md#priority). logger nil means slog.Default().
func (m *Messages) Step(logger *slog.Logger) resolve.Step {
	if logger == nil {
		logger = slog.Default()
	}
	return &step{state: m, log: logger}
}

func (*step) Kind() string { return Kind }

// Next triggers on a turn that finished with stop (not length, not tool
// calls) when the session's state is active. It persists used+1 and
// lastUsedAt before the followup leaves; a failed write ends the chain
// with ReasonError and sends nothing. A followup, a compaction request and
// a request without a session never trigger (the chain never resolves a
// followup on its own; resolve.Continuable rules out the others).
func (s *step) Next(_ context.Context, c resolve.Chain) (resolve.Followup, bool, string) {
	fin, ok := resolve.Continuable(c)
	if !ok || fin != llm.FinishStop || !s.state.Active(c.SessionID()) {
		return resolve.Followup{}, false, ""
	}
	if reason := c.Guard(); reason != "" {
		return resolve.Followup{}, false, reason
	}
	text, ok, err := s.state.Consume(c.SessionID(), c.Clock().Now())
	if err != nil {
		s.log.Warn("stopMessage: persisting use failed; no followup", "request", c.RequestID(), "err", err)
		return resolve.Followup{}, false, resolve.ReasonError
	}
	if !ok {
		// Used up by another chain meanwhile: a hold may still apply.
		return resolve.Followup{}, false, ""
	}
	return resolve.Followup{UserText: text}, true, ""
}
