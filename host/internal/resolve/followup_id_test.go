package resolve

import (
	"testing"

	"github.com/chimehq/chime/hostapi"
)

func TestIsFollowupID(t *testing.T) {
	c := &chain{req: &hostapi.ResolveRequest{RequestID: "9fe1"}}
	for kind, want := range map[string]bool{KindHold: true, KindTool: true, "stop": true} {
		if got := IsFollowupID(c.NextID(kind)); got != want {
			t.Errorf("%s: %v", c.NextID(kind), got)
		}
	}
	for _, id := range []string{"", "9fe1", ":hold1", "9fe1:", "9fe1:hold", "9fe1:1", "9fe1:Hold1", "9fe1:hold1x", "req-42", "a:b"} {
		if IsFollowupID(id) {
			t.Errorf("%q taken for a followup id", id)
		}
	}
	if !IsFollowupID("9fe1:stop2:hold3") {
		t.Error("a followup of a followup")
	}
}
