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

// TestTimerToolSpecsStrict: the six timer tools (docs/timers.md) have strict
// schemas whose properties are exactly the arguments each tool reads.
func TestTimerToolSpecsStrict(t *testing.T) {
	want := map[string][]string{
		TimerToolName:       {"total_duration", "timeout_duration", "timer_id", "reason"},
		ReadTimerToolName:   {"timer_id"},
		StopTimerToolName:   {"timer_id", "reason"},
		CancelTimerToolName: {"timer_id", "reason"},
		PauseTimerToolName:  {"timer_id", "pause_duration", "reason"},
		ResumeTimerToolName: {"timer_id", "reason"},
	}
	specs := TimerToolSpecs()
	var names []string
	for _, spec := range specs {
		names = append(names, spec.Name)
		var schema struct {
			Type       string                    `json:"type"`
			Properties map[string]map[string]any `json:"properties"`
			Required   []string                  `json:"required"`
			Additional *bool                     `json:"additionalProperties"`
		}
		if err := json.Unmarshal(spec.Parameters, &schema); err != nil {
			t.Fatalf("%s: %v", spec.Name, err)
		}
		if !spec.Strict || schema.Type != "object" || schema.Additional == nil || *schema.Additional {
			t.Fatalf("%s: not strict: %s", spec.Name, spec.Parameters)
		}
		if !slices.Equal(schema.Required, want[spec.Name]) || len(schema.Properties) != len(want[spec.Name]) {
			t.Fatalf("%s: required %v, properties %v; want %v", spec.Name, schema.Required, schema.Properties, want[spec.Name])
		}
		for name, p := range schema.Properties {
			typ := "string"
			if strings.HasSuffix(name, "_duration") {
				typ = "number"
			}
			if p["type"] != typ || p["description"] == "" {
				t.Fatalf("%s.%s: %v", spec.Name, name, p)
			}
		}
	}
	if !slices.Equal(names, TimerToolNames()) {
		t.Fatalf("specs %v, names %v", names, TimerToolNames())
	}
}
