package llm

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// requestSeeds are the saved SDK captures plus hand-written odd shapes.
func requestSeeds(f *testing.F) [][]byte {
	files, _ := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	if len(files) == 0 {
		f.Fatal("no seed bodies in testdata/requests")
	}
	var seeds [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		seeds = append(seeds, b)
	}
	for _, s := range []string{
		`{"messages":[]}`, `{"input":null}`, `{}`, `{"input":""}`, `[]`, `{"messages":{}}`,
		`{"messages":[{"role":"user","content":[{"type":"text","text":"<**a**>"},{"type":"text","text":" <**b**>"}]}],"tools":null}`,
		`{"messages":[{"role":"user","content":"<**x**>"},{"role":"assistant","content":"k"}],"tools":[],"stream":false}`,
		`{"\u006dessages":[{"role":"\u0075ser","content":"a\u003c**route:r**\u003eb"}] , "messages" : [ {"role":"user","content":"<**clock:clear**>"} ] }`,
		`{"messages":[1,"x",{"role":"user","content":null},{"role":"user"}],"input":[{"role":"user","content":"<**z**>"}]}`,
	} {
		seeds = append(seeds, []byte(s))
	}
	return seeds
}

func FuzzRequestEdit(f *testing.F) {
	for _, b := range requestSeeds(f) {
		for mode := uint8(0); mode < 6; mode++ {
			f.Add(mode, b)
		}
	}
	// mode picks the protocol and whether stripping comes first, as in the
	// filter, or last; the result must be valid either way.
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		p := Protocol(mode%3) + Chat
		stripLast := mode/3%2 == 1
		r, err := ParseRequest(p, body)
		if errors.Is(err, ErrMalformedJSON) != !json.Valid(body) {
			t.Fatalf("ParseRequest error %v but json.Valid=%v", err, json.Valid(body))
		}
		if err != nil {
			return
		}
		userBefore, otherBefore := texts(t, p, body)
		r.Directives()
		if !stripLast {
			r.StripDirectives()
		}
		const tag1, tag2 = "[Time/Date]: now", "second"
		if err := r.AppendUserText(tag1); err != nil {
			if !errors.Is(err, ErrBodyShape) {
				t.Fatal(err)
			}
			return
		}
		must(t, r.AppendUserText(tag2))
		if err := r.InjectTools([]ToolSpec{strictTool(), {Name: "exec", Description: "d"}}); err != nil && !errors.Is(err, ErrBodyShape) {
			t.Fatal(err)
		}
		r.SetStream(!r.Stream())
		if stripLast {
			r.StripDirectives()
		}
		out := r.Bytes()
		if !json.Valid(out) {
			t.Fatalf("invalid JSON out:\n%s\nfrom:\n%s", out, body)
		}
		again, err := ParseRequest(p, out)
		if err != nil {
			t.Fatalf("edited body does not re-parse: %v", err)
		}
		if n := again.StripDirectives(); n != 0 {
			t.Fatalf("%d tags left after stripping:\n%s", n, out)
		}
		userAfter, otherAfter := texts(t, p, out)
		if !utf8.Valid(body) {
			return // encoding/json rewrites invalid UTF-8, so the oracle cannot compare
		}
		if !slices.Equal(otherBefore, otherAfter) {
			t.Fatalf("non-user text changed: %q -> %q", otherBefore, otherAfter)
		}
		var want, got []string
		for _, s := range userBefore {
			if s, _ = StripDirectives(s); strings.TrimSpace(s) != "" {
				want = append(want, s)
			}
		}
		for _, s := range userAfter {
			if strings.TrimSpace(s) != "" && s != StrippedPlaceholder && s != tag1 && s != tag2 {
				got = append(got, s)
			}
		}
		if !slices.Equal(want, got) {
			t.Fatalf("user text: want %q, got %q\nout: %s", want, got, out)
		}
	})
}

// reuseSpare is the Request FuzzRequestReuse parses into: it carries the
// state of the previous input, as the filter's spare requests do.
var reuseSpare *Request

// FuzzRequestReuse checks that a Request reused by ParseRequestInto
// answers exactly as a fresh one: the same error, directives and edited
// bytes, whatever the previous body left in it.
func FuzzRequestReuse(f *testing.F) {
	for _, b := range requestSeeds(f) {
		for mode := uint8(0); mode < 3; mode++ {
			f.Add(mode, b)
		}
	}
	edit := func(r *Request) (string, []Directive) {
		dirs := slices.Clone(r.Directives())
		r.StripDirectives()
		_ = r.AppendUserText("[Time/Date]: now")
		_ = r.InjectTools([]ToolSpec{strictTool(), {Name: "exec", Description: "d"}})
		_ = r.AppendUserText("second")
		return string(r.Bytes()), dirs
	}
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		p := Protocol(mode%3) + Chat
		fresh, err1 := ParseRequest(p, body)
		reused, err2 := ParseRequestInto(reuseSpare, p, body)
		if reuseSpare == nil {
			reuseSpare = reused
		}
		if (err1 == nil) != (err2 == nil) || err1 != nil && err1.Error() != err2.Error() {
			t.Fatalf("fresh error %v, reused %v", err1, err2)
		}
		if err1 != nil {
			return
		}
		wantOut, wantDirs := edit(fresh)
		gotOut, gotDirs := edit(reused)
		if gotOut != wantOut {
			t.Fatalf("reused request built\n%s\nfresh\n%s", gotOut, wantOut)
		}
		if len(gotDirs) != len(wantDirs) {
			t.Fatalf("reused request found %d directives, fresh %d", len(gotDirs), len(wantDirs))
		}
		for i := range gotDirs {
			if gotDirs[i].Raw != wantDirs[i].Raw || gotDirs[i].Position != wantDirs[i].Position {
				t.Fatalf("directive %d: reused %+v, fresh %+v", i, gotDirs[i], wantDirs[i])
			}
		}
	})
}

// FuzzMessageKeyAndRole: indexList's shortcuts classify keys and roles
// exactly as decoding them would.
func FuzzMessageKeyAndRole(f *testing.F) {
	for _, s := range []string{"role", "type", "content", `\u0072ole`, `t\u0079pe`, `conten\u0074`, "rolex", "", `"user"`, "tool_calls", "tool_call_id", `"tool"`,
		`"assistant"`, `"system"`, `"\u0075ser"`, `"s\u0079stem"`, `"assistan\u0074"`, `"other"`, `"user`, `7`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		// Keys are the inside of a validated string, roles a validated value.
		isKey := json.Valid(append(append([]byte{'"'}, raw...), '"'))
		want := keyOther
		switch {
		case reqscan.KeyIs(raw, "role"):
			want = keyRole
		case reqscan.KeyIs(raw, "type"):
			want = keyType
		case reqscan.KeyIs(raw, "content"):
			want = keyContent
		}
		if got := messageKey(raw); isKey && got != want {
			t.Fatalf("messageKey(%q) = %d, want %d", raw, got, want)
		}
		wantRole := roleOther
		switch {
		case stringIs(raw, "user"):
			wantRole = roleUser
		case stringIs(raw, "assistant"):
			wantRole = roleAssistant
		case stringIs(raw, "system"):
			wantRole = roleSystem
		}
		if got := roleOf(raw, span{0, len(raw)}); json.Valid(raw) && got != wantRole {
			t.Fatalf("roleOf(%q) = %d, want %d", raw, got, wantRole)
		}
	})
}
