package host

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/chimehq/chime/hostapi"
)

// A second tool family registers beside clock: prepare injects its tools,
// Execute hands it the call with its name, and a disabled family is
// neither injected nor run.
func TestServerToolFamilies(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var got []string
	echo := func(_ context.Context, sid, rid, name string, args json.RawMessage) json.RawMessage {
		got = append(got, fmt.Sprintf("%s %s %s %s", sid, rid, name, args))
		return json.RawMessage(`{"ok":true}`)
	}
	clockFamily := f.svc.tools.families[0]
	f.svc.tools = newToolSet(clockFamily,
		&toolFamily{names: []string{"timer", "read_timer"}, run: echo},
		&toolFamily{names: []string{"off"}, disabled: true, run: echo})

	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: "s"}); !slices.Equal(ans.Tools, []string{"clock", "timer", "read_timer"}) {
		t.Fatalf("injected tools %v", ans.Tools)
	}
	if r := f.tool(t, "s", "r2", "read_timer", `{"timer_id":""}`); !r.ok() {
		t.Fatalf("read_timer: %v", r)
	}
	if r := f.tool(t, "s", "r3", "clock", `{"action":"get","items":[],"taskId":""}`); !r.ok() || r["action"] != "get" {
		t.Fatalf("clock beside another family: %v", r)
	}
	if r := f.tool(t, "s", "r4", "off", `{}`); r.ok() || r.errText() != "the off tool is disabled on this host" {
		t.Fatalf("disabled tool: %v", r)
	}
	if r := f.tool(t, "s", "r5", "shell", `{}`); r.ok() || r.errText() != `unknown tool "shell"; this host serves: clock, timer, read_timer, off` {
		t.Fatalf("unknown tool: %v", r)
	}
	if want := []string{`s r2 read_timer {"timer_id":""}`}; !slices.Equal(got, want) {
		t.Fatalf("family calls %q, want %q", got, want)
	}
	m := scrape(t, f)
	for metric, want := range map[string]float64{
		`chime_tool_calls_total{ok="true",tool="read_timer"}`: 1,
		`chime_tool_calls_total{ok="true",tool="clock"}`:      1,
		`chime_tool_calls_total{ok="false",tool="off"}`:       1,
		`chime_tool_calls_total{ok="false",tool="unknown"}`:   1,
	} {
		if m[metric] != want {
			t.Errorf("%s = %v, want %v", metric, m[metric], want)
		}
	}
}

func TestServerToolRegisteredTwice(t *testing.T) {
	t.Parallel()
	defer func() {
		if recover() == nil {
			t.Fatal("a name served by two families was accepted")
		}
	}()
	newToolSet(&toolFamily{names: []string{"clock"}}, &toolFamily{names: []string{"x", "clock"}})
}
