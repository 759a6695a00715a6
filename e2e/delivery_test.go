package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// TestBackgroundTimerReachesChimeWatch (docs/delivery.md): the model sends
// a timer to the background and answers; the user leaves the client and
// runs `chime watch`; the timer's completion reaches the watch.
func TestBackgroundTimerReachesChimeWatch(t *testing.T) {
	d := newDemo(t).withHostConfig(t, shortHolds)
	d.up(t)
	c := &conv{d: d, pc: protoCases[0], m: modes[0], session: "dlv-watch"}
	c.script(t,
		map[string]any{"toolCalls": []any{newTimer(4, 0.5, "deploy")}},
		map[string]any{"toolCalls": []any{onLastTimer(hostapi.CancelTimerToolName, nil)}},
		map[string]any{"text": "I will tell you when it is done"},
	)
	c.ask(t, "deploy and tell me")
	w := startChime(t, d.env(), nil, "watch", "--session", "dlv-watch", "--host", d.hostURL)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(w.logs.String(), `timer completed: "deploy"`) {
		if time.Now().After(deadline) {
			t.Fatalf("chime watch printed no completion:\n%s", w.logs.String())
		}
		time.Sleep(50 * time.Millisecond) // poll: chime watch is another process
	}
	if !strings.Contains(w.logs.String(), " timer timer:") {
		t.Fatalf("the delivery's reason and run id: %s", w.logs.String())
	}
}
