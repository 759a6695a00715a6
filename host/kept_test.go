package host

import (
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// Directives the filter kept while the host was unreachable are applied
// as their own request, before the current one's, and once: a copy that
// did reach the (slow) host then is a duplicate.
func TestKeptDirectivesAppliedOnceAsTheirRequest(t *testing.T) {
	f := newFixture(t)
	due := t0.Add(3 * time.Hour).Format(time.RFC3339)
	kept := hostapi.KeptDirectives{RequestID: "r-down", Directives: []hostapi.HostDirective{
		{Kind: hostapi.DirectiveClock, Clock: &llm.ClockItem{DueAt: due, Task: "written while down"}, Position: 0},
	}}
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r-up", SessionID: "s", Kept: []hostapi.KeptDirectives{kept}})
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r-up2", SessionID: "s", Kept: []hostapi.KeptDirectives{kept}})
	// The original request reaching the host late is a duplicate too.
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r-down", SessionID: "s", Directives: kept.Directives})
	items := f.tool(t, "s", "list", "clock", `{"action":"list"}`)["items"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["task"] != "written while down" {
		t.Fatalf("want the kept task once, got %v", items)
	}
}
