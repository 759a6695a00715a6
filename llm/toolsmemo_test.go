package llm

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// memoView is what indexing the tools array leaves in a Request, and what
// the filter's edit then builds from it.
type memoView struct {
	tools            span
	clientTools      []clientToolName
	clientToolsEnd   int
	clientToolsEmpty bool
	tagHint          bool
	found            []span // clientTool of a few names
	dirs             []Directive
	firstNew         int
	stripped         int
	out              []byte
}

func viewOf(t *testing.T, r *Request) memoView {
	t.Helper()
	v := memoView{tools: r.tools, clientTools: append([]clientToolName{}, r.clientTools...),
		clientToolsEnd: r.clientToolsEnd, clientToolsEmpty: r.clientToolsEmpty, tagHint: r.tagHint}
	for _, name := range []string{"Bash", "shell", "exec", "clock", "a"} {
		v.found = append(v.found, r.clientTool(name))
	}
	v.dirs, v.firstNew, v.stripped, v.out = editAll(t, r)
	return v
}

// checkMemo parses body through m and fresh and requires the same result.
func checkMemo(t *testing.T, m *ToolsMemo, p Protocol, body []byte) {
	t.Helper()
	fresh, err1 := ParseRequest(p, body)
	memo, err2 := ParseRequestWith(nil, m, p, body)
	if (err1 == nil) != (err2 == nil) || err1 != nil && err1.Error() != err2.Error() {
		t.Fatalf("fresh parse: %v, through the memo: %v\n%s", err1, err2, body)
	}
	if err1 != nil {
		return
	}
	want, got := viewOf(t, fresh), viewOf(t, memo)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("through the memo\n%+v\nfresh\n%+v\nbody %s", got, want, body)
	}
}

// clientBodies are the captured requests of real clients, with their protocol.
func clientBodies(tb testing.TB) (bodies [][]byte, protos []Protocol) {
	files, _ := filepath.Glob("testdata/clients/*.json")
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			tb.Fatal(err)
		}
		var captured struct {
			Path string          `json:"path"`
			Body json.RawMessage `json:"body"`
		}
		if json.Unmarshal(raw, &captured) != nil || len(captured.Body) == 0 {
			continue
		}
		bodies, protos = append(bodies, captured.Body), append(protos, DetectProtocol(captured.Path))
	}
	if len(bodies) == 0 {
		tb.Fatal("no client captures in testdata/clients")
	}
	return bodies, protos
}

// The real clients' tools arrays are recognised on their next request,
// wherever they sit in it, and the result is the fresh parse's.
func TestToolsMemoRecognisesClientTools(t *testing.T) {
	bodies, protos := clientBodies(t)
	for i, body := range bodies {
		p := protos[i]
		var m ToolsMemo
		checkMemo(t, &m, p, body) // remembers
		if m.hits != 0 {
			t.Fatalf("%v: a hit on an empty memo", p)
		}
		checkMemo(t, &m, p, body)
		if m.hits != 1 {
			t.Fatalf("%v: the same request again: %d hits, want 1", p, m.hits)
		}
		// The next turn: a longer history moves the tools array.
		next := bytes.Replace(body, []byte(`{"role":"user"`), []byte(`{"role":"user","content":"earlier"},{"role":"user"`), 1)
		if bytes.Equal(next, body) {
			next = append([]byte(`{"pad":"`+strings.Repeat("x", 100)+`",`), body[1:]...)
		}
		checkMemo(t, &m, p, next)
		if m.hits != 2 {
			t.Fatalf("%v: the tools array at another offset: %d hits, want 2", p, m.hits)
		}
		// Another protocol never takes the entry.
		other := Chat
		if p == Chat {
			other = Messages
		}
		checkMemo(t, &m, other, body)
		if m.hits != 2 {
			t.Fatalf("%v's array was taken for %v", p, other)
		}
	}
}

// A tag in a remembered array still sets the hint, and a copy of the
// array that the body cuts short or breaks after is judged on its own.
func TestToolsMemoEdges(t *testing.T) {
	tools := `[{"name":"Bash","description":"run <**clock:clear**> ` + strings.Repeat("d", toolsMemoMin) + `"},{"name":"Read"}]`
	var m ToolsMemo
	for _, body := range []string{
		`{"messages":[{"role":"user","content":"hi"}],"tools":` + tools + `}`,
		`{"tools":` + tools + `,"messages":[{"role":"user","content":"hi <**route:x**>"}]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":` + tools + `x}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":` + tools[:len(tools)-1] + `}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":` + tools + `,"tools":[]}`,
		`{"messages":[{"role":"user","content":"hi"}],"tools":[],"tools":` + tools + `}`,
	} {
		checkMemo(t, &m, Messages, []byte(body))
	}
	if m.hits != 4 {
		t.Fatalf("%d hits, want 4 (every body after the first holds the array whole)", m.hits)
	}
	// An array over toolsMemoMax is parsed as ever and not kept.
	huge := `{"messages":[],"tools":[{"name":"a","description":"` + strings.Repeat("d", toolsMemoMax) + `"}]}`
	checkMemo(t, &m, Messages, []byte(huge))
	checkMemo(t, &m, Messages, []byte(huge))
	for _, e := range m.entries {
		if len(e.raw) > toolsMemoMax {
			t.Fatalf("the memo keeps an array of %d bytes", len(e.raw))
		}
	}
}

// FuzzToolsMemo: a request parsed through a memo that has seen another
// request builds exactly what a fresh parse builds.
func FuzzToolsMemo(f *testing.F) {
	bodies, protos := clientBodies(f)
	for i, b := range bodies {
		f.Add(byte(protos[i]), b, b)
		f.Add(byte(protos[i]), b, bytes.Replace(b, []byte(`"tools":[`), []byte(`"x":1,"tools":[`), 1))
	}
	for _, b := range requestSeeds(f) {
		f.Add(byte(Chat), b, b)
	}
	// Every array is remembered, however short: the fuzzer's small inputs
	// reach the memo's paths too.
	defer func(was int) { toolsMemoMin = was }(toolsMemoMin)
	toolsMemoMin = 1
	f.Fuzz(func(t *testing.T, proto byte, first, second []byte) {
		p := Protocol(proto%3) + Chat
		var m ToolsMemo
		_, _ = ParseRequestWith(nil, &m, p, first)
		checkMemo(t, &m, p, second)
		checkMemo(t, &m, p, second) // now with second's own array remembered
	})
}
