package resolve

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"sync"

	"github.com/chimehq/chime/llm"
)

// KindTool is the followup kind of server-tool results.
const KindTool = "tool"

// Tools runs one server-tool call for a session (host.ToolExecutor).
type Tools interface {
	Execute(ctx context.Context, sessionID, requestID, name string, args json.RawMessage) json.RawMessage
}

// BlockingTools is Tools that can say which tools hold their call (a timer
// wait, docs/timers.md): the blocking calls of one turn run in parallel,
// so the turn's results return when the longest wait ends.
type BlockingTools interface {
	Tools
	Blocking(name string) bool
}

// toolStep runs the turn's server-tool calls and follows up with their
// results (docs/architecture.md#response-path), first in docs/continuation.md's priority.
type toolStep struct {
	tools Tools
	log   *slog.Logger
}

// NewToolStep is the server-tool step over tools; logger nil means
// slog.Default().
func NewToolStep(tools Tools, logger *slog.Logger) (Step, error) {
	if tools == nil {
		return nil, errors.New("resolve: the tool step needs Tools")
	}
	if logger == nil {
		logger = slog.Default()
	}
	return &toolStep{tools: tools, log: logger}, nil
}

func (*toolStep) Kind() string { return KindTool }

// Next runs the server calls of a turn that has some. A turn that also
// calls client tools ends the chain once the server calls ran (docs/architecture.md
// mixed calls): the client answers its own calls, and nothing follows up.
func (s *toolStep) Next(ctx context.Context, c Chain) (Followup, bool, string) {
	turn, st := c.Turn(), c.ServerTools()
	server := turn.ServerCalls(st)
	if len(server) == 0 {
		return Followup{}, false, ""
	}
	if len(turn.ClientCalls(st)) > 0 {
		// Nothing follows up a mixed turn, so nobody would read what a
		// blocking call waited for: only the others run.
		s.execute(ctx, c, slices.DeleteFunc(slices.Clone(server), func(call llm.ToolCall) bool {
			return s.blocking(call.Name)
		}))
		return Followup{}, false, ReasonClientTools
	}
	if reason := c.Guard(); reason != "" {
		return Followup{}, false, reason // the calls are not executed
	}
	c.AssignCallIDs()
	results := s.execute(ctx, c, turn.ToolCalls)
	if reason := Stopped(ctx); reason != "" {
		return Followup{}, false, reason
	}
	return Followup{Results: results}, true, ""
}

func (s *toolStep) blocking(name string) bool {
	b, ok := s.tools.(BlockingTools)
	return ok && b.Blocking(name)
}

// execute runs calls for the request's session under the chain's root
// request id: the others in order, the blocking ones in parallel beside
// them. Results keep the order of the calls.
func (s *toolStep) execute(ctx context.Context, c Chain, calls []llm.ToolCall) []llm.ToolResult {
	out := make([]llm.ToolResult, len(calls))
	run := func(i int) {
		call := calls[i]
		s.log.Debug("executing server tool", "request", c.RequestID(), "tool", call.Name, "arguments", call.Arguments)
		res := s.tools.Execute(ctx, c.SessionID(), c.RequestID(), call.Name, []byte(call.Arguments))
		out[i] = llm.ToolResult{CallID: call.ID, Name: call.Name, Output: string(res)}
	}
	var wg sync.WaitGroup
	for i, call := range calls {
		if s.blocking(call.Name) {
			wg.Go(func() { run(i) })
		} else {
			run(i)
		}
	}
	wg.Wait()
	return out
}
