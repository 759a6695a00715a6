package resolve_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/host/internal/resolve/resolvetest"
	"github.com/chimehq/chime/llm"
)

// recordingTools answers every call with its name and records the calls.
type recordingTools struct{ calls []string }

func (r *recordingTools) Execute(_ context.Context, sid, rid, name string, args json.RawMessage) json.RawMessage {
	r.calls = append(r.calls, fmt.Sprintf("%s %s %s %s", sid, rid, name, args))
	return json.RawMessage(fmt.Sprintf(`{"ok":true,"tool":%q}`, name))
}

func newToolStep(t *testing.T) (resolve.Step, *recordingTools) {
	t.Helper()
	tools := &recordingTools{}
	s, err := resolve.NewToolStep(tools, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s, tools
}

func TestToolStep(t *testing.T) {
	t.Parallel()
	call := func(id, name string) llm.ToolCall { return llm.ToolCall{ID: id, Name: name, Arguments: `{"a":1}`} }
	for _, c := range []struct {
		name       string
		calls      []llm.ToolCall
		atLimit    bool
		wantOK     bool
		wantReason string
		wantRun    []string
	}{
		{name: "no calls"},
		{name: "client calls only", calls: []llm.ToolCall{call("1", "exec")}},
		{name: "server calls", calls: []llm.ToolCall{call("1", "clock"), call("", "clock")}, wantOK: true,
			wantRun: []string{`s r clock {"a":1}`, `s r clock {"a":1}`}},
		// docs/architecture.md#mixed-calls: the server calls run, the client answers its own.
		{name: "mixed", calls: []llm.ToolCall{call("1", "exec"), call("2", "clock")}, wantReason: resolve.ReasonClientTools,
			wantRun: []string{`s r clock {"a":1}`}},
		// The hop guard ends the chain before anything runs.
		{name: "hop limit", calls: []llm.ToolCall{call("1", "clock")}, atLimit: true, wantReason: resolve.ReasonMaxHops},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s, tools := newToolStep(t)
			ch := &resolvetest.Chain{T: &llm.Turn{ToolCalls: c.calls}, Session: "s", Request: "r", Server: []string{"clock"},
				AtHopLimit: c.atLimit, Proto: llm.Chat, Body: []byte(`{}`)}
			f, ok, reason := s.Next(context.Background(), ch)
			if ok != c.wantOK || reason != c.wantReason {
				t.Fatalf("Next = ok %v reason %q, want %v %q", ok, reason, c.wantOK, c.wantReason)
			}
			if fmt.Sprint(tools.calls) != fmt.Sprint(c.wantRun) {
				t.Fatalf("ran %q, want %q", tools.calls, c.wantRun)
			}
			if !ok {
				return
			}
			if s.Kind() != "tool" || f.ID != "" || f.UserText != "" || f.Settle != nil || !ch.Assigned || ch.GuardCalls != 1 {
				t.Fatalf("followup %+v, chain %+v", f, ch)
			}
			// One result per call, named by the call's id (assigned when missing).
			if len(f.Results) != 2 || f.Results[0].CallID != "1" || f.Results[1].CallID == "" || f.Results[1].CallID != ch.T.ToolCalls[1].ID ||
				f.Results[1].Output != `{"ok":true,"tool":"clock"}` {
				t.Fatalf("results %+v", f.Results)
			}
		})
	}
}

// A chain cancelled while its tools run ends with the cancel, not a followup.
func TestToolStepStoppedWhileRunning(t *testing.T) {
	t.Parallel()
	s, _ := newToolStep(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ch := &resolvetest.Chain{T: &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "1", Name: "clock"}}}, Session: "s", Request: "r", Server: []string{"clock"}}
	if _, ok, reason := s.Next(ctx, ch); ok || reason != resolve.ReasonCancelled {
		t.Fatalf("Next = %v %q", ok, reason)
	}
}
