package hostapi

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestClockToolSpecStrict: every property of the clock schema is required
// and no others are allowed, as strict tool schemas demand (docs/clock-tool.md).
func TestClockToolSpecStrict(t *testing.T) {
	spec := ClockToolSpec()
	var schema map[string]any
	if err := json.Unmarshal(spec.Parameters, &schema); err != nil {
		t.Fatal(err)
	}
	var check func(path string, obj map[string]any)
	check = func(path string, obj map[string]any) {
		props, _ := obj["properties"].(map[string]any)
		req, _ := obj["required"].([]any)
		if len(props) == 0 || len(req) != len(props) || obj["additionalProperties"] != false {
			t.Fatalf("%s: not strict: %v", path, obj)
		}
		for _, r := range req {
			if _, ok := props[r.(string)]; !ok {
				t.Fatalf("%s: required %v not a property", path, r)
			}
		}
		if m, ok := props["items"].(map[string]any); ok {
			if inner, ok := m["items"].(map[string]any); ok {
				check(path+".items", inner)
			}
		}
	}
	check("clock", schema)
	actions := schema["properties"].(map[string]any)["action"].(map[string]any)["enum"].([]any)
	if fmt.Sprint(actions) != fmt.Sprint(ClockActions()) {
		t.Fatalf("schema actions %v, ClockActions %v", actions, ClockActions())
	}
	if spec.Name != ClockToolName || !spec.Strict || !strings.Contains(spec.Description, "schedule") {
		t.Fatalf("spec %+v", spec)
	}
	a := ClockActions()
	a[0] = "mutated"
	if !slices.Equal(ClockActions(), clockActions) || clockActions[0] != "get" {
		t.Fatal("ClockActions must return a copy")
	}
}
