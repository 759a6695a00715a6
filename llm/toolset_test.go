package llm

import (
	"errors"
	"testing"
)

// FuzzInjectSet: a ToolSet injects what InjectRendered of its tools
// injects, into any body and after any earlier injection, and leaves the
// request in a state whose later injections and lookups agree too.
func FuzzInjectSet(f *testing.F) {
	for _, body := range []string{
		`{"messages":[]}`,
		`{"messages":[],"tools":null}`,
		`{"messages":[],"tools":[ ]}`,
		`{"messages":[],"tools":[{"name":"a","input_schema":{}}]}`,
		`{"messages":[],"tools":[{"type":"function","function":{"name":"b"}},{"name":"x"}]}`,
		`{"messages":[],"tools":"x"}`,
		`{"input":"q","tools":[{"type":"function","name":"a"}]}`,
		`{}`,
	} {
		for p := Chat; p <= Messages; p++ {
			f.Add(byte(p), []byte(body), "a,b", "b,c", false)
			f.Add(byte(p), []byte(body), "c", "a", true)
			f.Add(byte(p), []byte(body), "a,a", "", false)
		}
	}
	bodies, protos := clientBodies(f)
	for i, body := range bodies {
		f.Add(byte(protos[i]), body, "clock,set_timer", "clock", false)
		f.Add(byte(protos[i]), body, "Bash,clock", "", true)
	}
	f.Fuzz(func(t *testing.T, proto byte, body []byte, first, second string, injectBefore bool) {
		p := Protocol(proto%3 + 1)
		tools := func(names string) []RenderedTool {
			var out []RenderedTool
			for n := range splitNames(names) {
				rt, err := ToolSpec{Name: n, Description: "d " + n + " " + first}.Render(p)
				if err != nil {
					return nil
				}
				out = append(out, rt)
			}
			return out
		}
		firstTools, secondTools := tools(first), tools(second)
		set, err := NewToolSet(p, firstTools...)
		if err != nil {
			t.Fatal(err)
		}
		want, err := ParseRequest(p, body)
		if err != nil {
			return
		}
		got, _ := ParseRequest(p, body)
		if injectBefore {
			errW, errG := want.InjectRendered(secondTools...), got.InjectRendered(secondTools...)
			if (errW == nil) != (errG == nil) {
				t.Fatal("the same injection failed once")
			}
		}
		errW, errG := want.InjectRendered(firstTools...), got.InjectSet(set)
		if (errW == nil) != (errG == nil) || errW != nil && !errors.Is(errG, ErrBodyShape) && !errors.Is(errG, ErrToolSpec) {
			t.Fatalf("%v %q: InjectRendered: %v, InjectSet: %v", p, body, errW, errG)
		}
		check := func(step string) {
			t.Helper()
			if w, g := string(want.Bytes()), string(got.Bytes()); w != g {
				t.Fatalf("%v %q %s:\nInjectRendered %s\nInjectSet      %s", p, body, step, w, g)
			}
			if w, g := want.Size(), got.Size(); w != g {
				t.Fatalf("%s: Size %d, want %d", step, g, w)
			}
			for n := range splitNames(first + "," + second + ",x,Bash") {
				if want.HasToolNamed(n) != got.HasToolNamed(n) {
					t.Fatalf("%s: HasToolNamed(%q) differs", step, n)
				}
			}
		}
		check("after the set")
		errW, errG = want.InjectRendered(secondTools...), got.InjectRendered(secondTools...)
		if (errW == nil) != (errG == nil) {
			t.Fatalf("a later injection: %v, %v", errW, errG)
		}
		check("after a later injection")
	})
}

// splitNames yields the non-empty comma-separated names of s.
func splitNames(s string) func(func(string) bool) {
	return func(yield func(string) bool) {
		start := 0
		for i := 0; i <= len(s); i++ {
			if i == len(s) || s[i] == ',' {
				if i > start && !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
	}
}

func TestToolSetRejectsOtherProtocols(t *testing.T) {
	rt, err := strictTool().Render(Chat)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewToolSet(Messages, rt); !errors.Is(err, ErrToolSpec) {
		t.Fatalf("a Chat tool in a Messages set: %v", err)
	}
	set, err := NewToolSet(Chat, rt)
	if err != nil {
		t.Fatal(err)
	}
	r := parse(t, Messages, `{"messages":[]}`)
	if err := r.InjectSet(set); !errors.Is(err, ErrToolSpec) {
		t.Fatalf("a Chat set into a Messages request: %v", err)
	}
	if r.Edited() {
		t.Fatal("a failed injection edited the request")
	}
}
