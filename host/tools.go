package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
)

// Server tools (docs/architecture.md, docs/clock-tool.md, docs/timers.md) are the tools chime injects and runs
// itself; the client never sees their calls. Each feature package serves
// a family of them, and newServerTools registers the families: prepare
// names the enabled ones for the filter to inject (their schemas are in
// hostapi), and Execute dispatches a call by its name.

// toolFamily is the server tools one feature package serves.
type toolFamily struct {
	names []string
	// disabled families are not injected, and their calls get ok:false.
	disabled bool
	// blocking tools hold their call (a timer wait): the calls of one turn
	// run in parallel rather than one after the other.
	blocking bool
	run      func(ctx context.Context, sessionID, requestID, name string, args json.RawMessage) json.RawMessage
}

// serverTools are the host's tool families, in injection order.
type serverTools struct {
	families []*toolFamily
	byName   map[string]*toolFamily
	on       []string // enabled(), built once: every prepare answer names them
}

// newServerTools registers the families of the host's features.
func (s *Service) newServerTools() *serverTools {
	return newToolSet(
		&toolFamily{
			names:    []string{hostapi.ClockToolName},
			disabled: s.cfg.DisableClock,
			run: func(ctx context.Context, sid, rid, _ string, args json.RawMessage) json.RawMessage {
				out := s.engine.Execute(ctx, sid, rid, args)
				s.noteTasksChanged(ctx, sid)
				return out
			},
		},
		&toolFamily{
			names:    hostapi.TimerToolNames(),
			disabled: s.cfg.DisableTimers,
			blocking: true,
			run: func(ctx context.Context, sid, _, name string, args json.RawMessage) json.RawMessage {
				return s.timers.Execute(ctx, sid, name, args)
			},
		},
	)
}

// Blocking reports whether a server tool holds its call (resolve.Tools):
// such calls of one turn run in parallel.
func (s *Service) Blocking(name string) bool {
	f := s.tools.byName[name]
	return f != nil && f.blocking && !f.disabled
}

func newToolSet(families ...*toolFamily) *serverTools {
	t := &serverTools{families: families, byName: map[string]*toolFamily{}}
	for _, f := range families {
		for _, n := range f.names {
			if t.byName[n] != nil {
				panic("host: server tool " + n + " registered twice")
			}
			t.byName[n] = f
		}
		if !f.disabled {
			t.on = append(t.on, f.names...)
		}
	}
	t.on = slices.Clip(t.on) // shared by every answer: an append copies
	return t
}

// enabled names the tools to inject, nil when none. Callers must not
// change the slice.
func (t *serverTools) enabled() []string { return t.on }

// all names every registered tool, for the unknown-tool result.
func (t *serverTools) all() []string {
	var out []string
	for _, f := range t.families {
		out = append(out, f.names...)
	}
	return out
}

// toolResult is the ok:false result of a call the host cannot route.
type toolResult struct {
	OK    bool   `json:"ok"`
	Error string `json:"error"`
}

// Execute runs one server-tool call (ToolExecutor) through the family that
// serves its name; a disabled or unknown tool is an ok:false result.
func (s *Service) Execute(ctx context.Context, sessionID, requestID, name string, args json.RawMessage) json.RawMessage {
	var res json.RawMessage
	label := name
	switch f := s.tools.byName[name]; {
	case f == nil:
		label = "unknown"
		res = mustJSON(toolResult{Error: fmt.Sprintf("unknown tool %q; this host serves: %s", name, strings.Join(s.tools.all(), ", "))})
	case f.disabled:
		res = mustJSON(toolResult{Error: fmt.Sprintf("the %s tool is disabled on this host", name)})
	default:
		res = f.run(ctx, sessionID, requestID, name, args)
		s.events.Publish(sessionID)
		s.gens.bump() // what a prepare answers may have changed (skip.go)
	}
	s.metrics.ToolCalls.WithLabelValues(label, okLabel(res)).Inc()
	return res
}

func okLabel(res json.RawMessage) string {
	if gjson.GetBytes(res, "ok").Bool() {
		return "true"
	}
	return "false"
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs of this package
	}
	return b
}
