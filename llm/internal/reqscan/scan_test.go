package reqscan

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

var validSeeds = []string{
	`{}`, `[]`, ` {"a" : [1, -2.5e+3, true, false, null, "x\"y\\u00e9\n"]} `, `"\ud83d\ude00"`, `0`, `-0.0E-0`,
	`{"a":{"b":[{}]}}`, `"\u003c**"`, "\"caf\xc3\xa9\"",
	`{`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `+1`, `"\x"`, "\"a\tb\"", `nul`, `[1 2]`, `{"a" 1}`, `"abc`, `{} x`, ``,
	`"\u12g4"`, `1e`, `--1`, `[[[[]]]]`, `{"\u0061":1}`,
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, s := range validSeeds {
		if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("Valid(%q) = %v, encoding/json says %v", s, got, want)
		}
	}
	deep := strings.Repeat("[", MaxDepth+1) + strings.Repeat("]", MaxDepth+1)
	if Valid([]byte(deep)) {
		t.Error("accepted nesting deeper than MaxDepth")
	}
	ok := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	if !Valid([]byte(ok)) {
		t.Error("rejected nesting of exactly MaxDepth")
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, want := Valid(b), json.Valid(b)
		if got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v", b, got, want)
		}
		if !got {
			return
		}
		// Walking a valid document reaches its end and agrees on strings.
		i := SkipSpace(b, 0)
		if end := SkipValue(b, i); SkipSpace(b, end) != len(b) {
			t.Fatalf("SkipValue stopped at %d of %d", end, len(b))
		}
		if b[i] == '"' {
			s, ok := Unquote(b[i:SkipValue(b, i)])
			var want string
			// encoding/json turns invalid UTF-8 into U+FFFD; Unquote keeps the bytes.
			if err := json.Unmarshal(b, &want); err != nil || !ok || (utf8.Valid(b) && s != want) {
				t.Fatalf("Unquote = %q,%v; encoding/json = %q,%v", s, ok, want, err)
			}
			q := AppendQuote(nil, s)
			var back string
			if s2, ok := Unquote(q); !ok || s2 != s || !json.Valid(q) {
				t.Fatalf("AppendQuote(%q) = %s does not round-trip", s, q)
			}
			if err := json.Unmarshal(q, &back); err != nil || (utf8.ValidString(s) && back != s) {
				t.Fatalf("AppendQuote(%q) = %s does not round-trip", s, q)
			}
		}
		if b[i] == '{' {
			n := 0
			if Members(b, i, func(key []byte, vs, ve int) bool { n++; return true }) < 0 {
				t.Fatal("Members failed on a valid object")
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err == nil && len(m) > n {
				t.Fatalf("Members saw %d members, encoding/json %d", n, len(m))
			}
		}
		if b[i] == '[' {
			n := 0
			if Elements(b, i, func(vs, ve int) bool { n++; return true }) < 0 {
				t.Fatal("Elements failed on a valid array")
			}
			var a []json.RawMessage
			if err := json.Unmarshal(b, &a); err != nil || len(a) != n {
				t.Fatalf("Elements saw %d, encoding/json %d (%v)", n, len(a), err)
			}
		}
	})
}

func TestMembersAndMember(t *testing.T) {
	b := []byte(`{"a":1, "b" : {"c":"x\"}"}, "a":[2,3]}`)
	var keys []string
	Members(b, 0, func(key []byte, vs, ve int) bool {
		keys = append(keys, string(key)+"="+string(b[vs:ve]))
		return true
	})
	if got := strings.Join(keys, " "); got != `a=1 b={"c":"x\"}"} a=[2,3]` {
		t.Errorf("members: %s", got)
	}
	if vs, ve := Member(b, 0, "a"); string(b[vs:ve]) != "[2,3]" {
		t.Errorf("last duplicate should win, got %s", b[vs:ve])
	}
	if vs, _ := Member(b, 0, "zz"); vs != -1 {
		t.Error("missing member found")
	}
}

func TestAppendQuoteMinimal(t *testing.T) {
	got := string(AppendQuote(nil, "a\"b\\c\n\x01<é>"))
	if got != `"a\"b\\c\n\u0001<é>"` {
		t.Errorf("got %s", got)
	}
}

func TestMayContain(t *testing.T) {
	if !MayContain([]byte(`"a <** b"`), "<**") || MayContain([]byte(`"a \n b"`), "<**") ||
		!MayContain([]byte(`"a \u003c** b"`), "<**") {
		t.Error("MayContain wrong")
	}
}
