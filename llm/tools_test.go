package llm

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// strictTool is a strict function tool shaped like the server tools chime
// injects (hostapi owns the real ones; llm must not import it).
func strictTool() ToolSpec {
	return ToolSpec{
		Name:        "clock",
		Description: "Read the time and set reminders. \"Quoted\" <text> & more.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"action":{"type":"string","enum":["get","schedule"]},` +
			`"items":{"type":"array","items":{"type":"object","properties":{"dueAt":{"type":"string"}},"required":["dueAt"],"additionalProperties":false}}},` +
			`"required":["action","items"],"additionalProperties":false}`),
		Strict: true,
	}
}

func TestInjectToolsShapes(t *testing.T) {
	spec := ToolSpec{Name: "clock", Description: "d \"q\"", Parameters: json.RawMessage(`{"type":"object"}`), Strict: true}
	tests := []struct {
		p          Protocol
		body, want string
	}{
		{Chat, `{"messages":[]}`, `{"messages":[],"tools":[{"type":"function","function":{"name":"clock","description":"d \"q\"","parameters":{"type":"object"},"strict":true}}]}`},
		{Responses, `{"input":"x","tools":null}`, `{"input":"x","tools":[{"type":"function","name":"clock","description":"d \"q\"","parameters":{"type":"object"},"strict":true}]}`},
		{Messages, `{"messages":[],"tools":[ ]}`, `{"messages":[],"tools":[{"name":"clock","description":"d \"q\"","input_schema":{"type":"object"}} ]}`},
		{Messages, `{"messages":[],"tools":[{"name":"a","input_schema":{}}]}`, `{"messages":[],"tools":[{"name":"a","input_schema":{}},{"name":"clock","description":"d \"q\"","input_schema":{"type":"object"}}]}`},
	}
	for _, tt := range tests {
		r := parse(t, tt.p, tt.body)
		if r.HasToolNamed("clock") {
			t.Error("HasToolNamed before injection")
		}
		must(t, r.InjectTools([]ToolSpec{spec}))
		if got := edited(t, r); got != tt.want {
			t.Errorf("%v:\ngot  %s\nwant %s", tt.p, got, tt.want)
		}
		if !r.HasToolNamed("clock") {
			t.Error("HasToolNamed after injection")
		}
	}
}

func TestInjectToolsReplacesSameName(t *testing.T) {
	r := parse(t, Chat, `{"messages":[],"tools":[{"type":"function","function":{"name":"clock","parameters":{}}},{"type":"custom","custom":{"name":"grep"}}]}`)
	if !r.HasToolNamed("grep") || !r.HasToolNamed("clock") {
		t.Fatal("client tools not found")
	}
	must(t, r.InjectTools([]ToolSpec{{Name: "clock", Description: "v1"}, {Name: "timer", Description: "v1"}}))
	must(t, r.InjectTools([]ToolSpec{{Name: "clock", Description: "v2"}, {Name: "timer", Description: "v2"}}))
	out := edited(t, r)
	if names := toolNames(Chat, []byte(out)); !slices.Equal(names, []string{"clock", "", "timer"}) {
		t.Errorf("names = %v in %s", names, out)
	}
	if gjson.Get(out, "tools.0.function.description").Str != "v2" || gjson.Get(out, "tools.2.function.description").Str != "v2" {
		t.Errorf("not replaced: %s", out)
	}
	// The same for a tools list chime created itself.
	r = parse(t, Messages, `{"messages":[]}`)
	must(t, r.InjectTools([]ToolSpec{{Name: "a"}, {Name: "b"}}))
	must(t, r.InjectTools([]ToolSpec{{Name: "a", Description: "new"}}))
	if got := gjson.Get(edited(t, r), "tools").Raw; got != `[{"name":"a","description":"new","input_schema":{"type":"object","properties":{}}},{"name":"b","description":"","input_schema":{"type":"object","properties":{}}}]` {
		t.Errorf("got %s", got)
	}
}

func TestInjectToolsErrors(t *testing.T) {
	r := parse(t, Chat, `{"messages":[],"tools":{}}`)
	if err := r.InjectTools([]ToolSpec{{Name: "a"}}); !errors.Is(err, ErrBodyShape) {
		t.Errorf("tools object: %v", err)
	}
	r = parse(t, Chat, `{"messages":[]}`)
	for _, bad := range []ToolSpec{{Name: ""}, {Name: "has space"}, {Name: strings.Repeat("x", 65)}, {Name: "p", Parameters: json.RawMessage(`[1]`)}, {Name: "p", Parameters: json.RawMessage(`{`)}} {
		if err := r.InjectTools([]ToolSpec{{Name: "ok"}, bad}); !errors.Is(err, ErrToolSpec) {
			t.Errorf("%+v: %v", bad, err)
		}
	}
	if r.Edited() {
		t.Error("a failed InjectTools left edits behind")
	}
}

// TestInjectRenderedShared: a tool rendered once goes into many requests;
// each gets the same bytes, later edits of one request (a second tool,
// text appended) leave the rendered bytes and the other requests alone,
// and a tool rendered for another protocol is refused.
func TestInjectRenderedShared(t *testing.T) {
	rt, err := strictTool().Render(Chat)
	must(t, err)
	other, err := ToolSpec{Name: "timer"}.Render(Chat)
	must(t, err)
	keep := string(rt.body)
	a := parse(t, Chat, `{"messages":[{"role":"user","content":"a"}]}`)
	b := parse(t, Chat, `{"messages":[{"role":"user","content":"b"}],"tools":null}`)
	must(t, a.InjectRendered(rt))
	must(t, b.InjectRendered(rt))
	must(t, a.InjectRendered(other))
	must(t, a.AppendUserText("tag"))
	outA, outB := edited(t, a), edited(t, b)
	if names := toolNames(Chat, []byte(outA)); !slices.Equal(names, []string{"clock", "timer"}) {
		t.Errorf("a: tools %v in %s", names, outA)
	}
	if names := toolNames(Chat, []byte(outB)); !slices.Equal(names, []string{"clock"}) {
		t.Errorf("b: tools %v in %s", names, outB)
	}
	if gjson.Get(outA, "tools.0").Raw != keep || gjson.Get(outB, "tools.0").Raw != keep || string(rt.body) != keep {
		t.Errorf("rendered bytes changed:\n%s\n%s", outA, outB)
	}
	if err := parse(t, Messages, `{"messages":[]}`).InjectRendered(rt); !errors.Is(err, ErrToolSpec) {
		t.Errorf("chat tool into a Messages request: %v", err)
	}
	if err := parse(t, Chat, `{"messages":[]}`).InjectRendered(RenderedTool{}); !errors.Is(err, ErrToolSpec) {
		t.Errorf("zero RenderedTool: %v", err)
	}
}
