package llm

import (
	"encoding/json"
	"testing"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// clientToolWalk is clientTool as it was before the index: a walk of the
// client's tools array per lookup, kept as the oracle.
func clientToolWalk(r *Request, name string) span {
	if !r.tools.ok() || r.body[r.tools.s] != '[' {
		return noSpan
	}
	b := r.body
	found := noSpan
	reqscan.Elements(b, r.tools.s, func(vs, ve int) bool {
		if b[vs] != '{' {
			return true
		}
		reqscan.Members(b, vs, func(key []byte, s, e int) bool {
			switch {
			case reqscan.KeyIs(key, "name"):
				if stringIs(b[s:e], name) {
					found = span{vs, ve}
				}
			case r.proto == Chat && (reqscan.KeyIs(key, "function") || reqscan.KeyIs(key, "custom")):
				if b[s] == '{' {
					if ns, ne := reqscan.Member(b, s, "name"); ns >= 0 && stringIs(b[ns:ne], name) {
						found = span{vs, ve}
					}
				}
			}
			return true
		})
		return !found.ok()
	})
	return found
}

// FuzzClientToolIndex: the index of the client's tools finds what walking
// the array finds, for every protocol, and where a new tool goes; the
// validation that lists them accepts no invalid JSON.
func FuzzClientToolIndex(f *testing.F) {
	for _, c := range []struct{ body, name string }{
		{`{"messages":[],"tools":[{"name":"a"},{"name":"b"},{"name":"a","x":1}]}`, "a"},
		{`{"messages":[],"tools":[{"type":"function","function":{"name":"clock"}},{"type":"custom","custom":{"name":"timer"}},{"name":"x"}]}`, "timer"},
		{`{"messages":[],"tools":[{"name":"\u0063lock"},7,"s",{"name":1}]}`, "clock"},
		{`{"messages":[],"tools":[]}`, "a"},
		{`{"messages":[],"tools":null}`, "a"},
		{`{"input":"q","tools":[{"type":"function","name":"read_timer"}]}`, "read_timer"},
		{`{"messages":[],"tools":[{"name":"a",}]}`, "a"},
		{`{"messages":[],"tools":[{"function":{"name":"a","name":"b"}}],"tools":[{"name":"c"}]}`, "c"},
		{`{"messages":[],"tools":[{"function":{"name":"a"},"x":[1,2,{"y":"\ud800"}]}]}`, "a"},
	} {
		for p := Chat; p <= Messages; p++ {
			f.Add(byte(p), []byte(c.body), c.name)
		}
	}
	bodies, protos := clientBodies(f)
	for i, body := range bodies {
		for _, name := range []string{"Bash", "shell", "apply_patch", "clock", "Read", "update_plan"} {
			f.Add(byte(protos[i]), body, name)
		}
	}
	f.Fuzz(func(t *testing.T, proto byte, body []byte, name string) {
		p := Protocol(proto%3 + 1)
		r, err := ParseRequest(p, body)
		if err == nil && !json.Valid(body) {
			t.Fatalf("%v: invalid JSON accepted: %q", p, body)
		}
		if err != nil {
			return
		}
		if got, want := r.clientTool(name), clientToolWalk(r, name); got != want {
			t.Fatalf("%v %q: clientTool(%q) = %v, walking finds %v", p, body, name, got, want)
		}
		if r.tools.ok() && r.body[r.tools.s] == '[' {
			pos, empty := r.arrayEnd(r.tools)
			if r.clientToolsEnd != pos || r.clientToolsEmpty != empty {
				t.Fatalf("%v %q: indexed array end %d (empty %v), arrayEnd %d (empty %v)", p, body, r.clientToolsEnd, r.clientToolsEmpty, pos, empty)
			}
		}
	})
}
