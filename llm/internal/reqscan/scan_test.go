package reqscan

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
	"unicode/utf8"
)

var validSeeds = []string{
	`{}`, `[]`, ` {"a" : [1, -2.5e+3, true, false, null, "x\"y\\u00e9\n"]} `, `"\ud83d\ude00"`, `0`, `-0.0E-0`,
	`{"a":{"b":[{}]}}`, `"\u003c**"`, "\"caf\xc3\xa9\"",
	`{`, `[1,]`, `{"a":1,}`, `01`, `1.`, `.5`, `+1`, `"\x"`, "\"a\tb\"", `nul`, `[1 2]`, `{"a" 1}`, `"abc`, `{} x`, ``,
	`"\u12g4"`, `1e`, `--1`, `[[[[]]]]`, `{"\u0061":1}`,
	`{"a":"x <** y"}`, `"<*"`, `"\u003C*\u002A"`, `{"<**":1}`, `"0123456<**"`, `"01234567\u002a"`, "\"0123456789\x01\"",
	`"012345\\<**"`, `{"a" :[ {"b":[]} , [ ] ,{} ] }`, `{"a":]`, `[}`, `{"a":1]`, `[1}`, `{"a":{"b":1},"c":[1,{"d":[2]}]}`,
}

// nested returns depth containers, alternately objects and arrays.
func nested(depth int) string {
	var open, close string
	for i := 0; i < depth; i++ {
		if i%2 == 0 {
			open, close = open+`{"k":`, "}"+close
		} else {
			open, close = open+"[1,", "]"+close
		}
	}
	return open + "0" + close
}

// bothScanners runs fn with each string scanner (see maskScanner).
func bothScanners(fn func()) {
	defer func(was bool) { maskScanner = was }(maskScanner)
	for _, masks := range []bool{false, true} {
		maskScanner = masks
		fn()
	}
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	bothScanners(func() { testValidMatchesEncodingJSON(t) })
}

func testValidMatchesEncodingJSON(t *testing.T) {
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
	// Objects and arrays mixed past the 64 levels the checker keeps in a
	// word, and one level too deep.
	for _, depth := range []int{63, 64, 65, 200, MaxDepth} {
		b := []byte(nested(depth))
		if !Valid(b) || !json.Valid(b) {
			t.Errorf("nesting %d: Valid=%v json.Valid=%v", depth, Valid(b), json.Valid(b))
		}
		bad := []byte(strings.Replace(string(b), "]}", "}]", 1))
		if Valid(bad) != json.Valid(bad) {
			t.Errorf("nesting %d with mismatched closers: Valid=%v json.Valid=%v", depth, Valid(bad), json.Valid(bad))
		}
	}
	if b := []byte(nested(MaxDepth + 1)); Valid(b) {
		t.Error("accepted mixed nesting deeper than MaxDepth")
	}
}

// decodesToTag reports whether any string in the JSON document b, keys
// included, decodes to text containing "<**".
func decodesToTag(t *testing.T, b []byte) bool {
	t.Helper()
	d := json.NewDecoder(strings.NewReader(string(b)))
	for {
		tok, err := d.Token()
		if err != nil {
			return false
		}
		if s, ok := tok.(string); ok && strings.Contains(s, "<**") {
			return true
		}
	}
}

func TestTagHint(t *testing.T) { bothScanners(func() { testTagHint(t) }) }

func testTagHint(t *testing.T) {
	for _, c := range []struct {
		doc  string
		want bool
	}{
		{`{"a":"plain text, long enough to take the eight-byte path"}`, false},
		{`{"a":"x <** y"}`, true},
		{`{"<**":1}`, true},
		{`["<* *", "< **", "**>"]`, false},
		{`"\u003c**"`, true},
		{`"<\u002A*"`, true},
		{`"\u00e9 \n"`, false},
		{`"0123456789abcdef<**"`, true},
		{`"ab<**"`, true},
	} {
		v := NewChecker([]byte(c.doc))
		if v.Value(0, 0) < 0 {
			t.Fatalf("%s: invalid", c.doc)
		}
		if v.TagHint() != c.want {
			t.Errorf("TagHint(%s) = %v, want %v", c.doc, v.TagHint(), c.want)
		}
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { bothScanners(func() { checkValid(t, b) }) })
}

func checkValid(t *testing.T, b []byte) {
	got, want := Valid(b), json.Valid(b)
	if got != want {
		t.Fatalf("Valid(%q) = %v, encoding/json says %v (masks %v)", b, got, want, maskScanner)
	}
	if !got {
		return
	}
	// The tag hint may say "maybe" too often, never too rarely.
	v := NewChecker(b)
	v.Value(SkipSpace(b, 0), 0)
	if !v.TagHint() && decodesToTag(t, b) {
		t.Fatalf("TagHint false for %q, which holds a tag", b)
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

// TestMayHoldTag holds MayHoldTag to naiveTagHint over strings of the
// bytes that make or break a tag, and to the decoded text: whenever the
// text holds "<**" it must say so.
func TestMayHoldTag(t *testing.T) {
	bothScanners(func() {
		rng := rand.New(rand.NewPCG(5, 8))
		alphabet := []string{"a", "<", "*", "**", "<**", `\u003c`, `\u003C`, `\u002a`, `\u002A`, `\u0041`, `\n`, `\"`, `\\`, "é", " "}
		for trial := 0; trial < 20000; trial++ {
			var s strings.Builder
			s.WriteByte('"')
			for k := rng.IntN(24); k > 0; k-- {
				s.WriteString(alphabet[rng.IntN(len(alphabet))])
			}
			s.WriteByte('"')
			raw := []byte(s.String())
			got := MayHoldTag(raw)
			if want := naiveTagHint(raw); got != want {
				t.Fatalf("MayHoldTag(%s) = %v, want %v (masks %v)", raw, got, want, maskScanner)
			}
			if text, ok := Unquote(raw); ok && strings.Contains(text, "<**") && !got {
				t.Fatalf("MayHoldTag(%s) = false, but it decodes to %q", raw, text)
			}
		}
	})
}

func TestKeyIs(t *testing.T) {
	for _, c := range []struct {
		key  string
		want bool
	}{
		{`role`, true}, {`r\u006fle`, true}, {`\u0072\u006f\u006c\u0065`, true}, {`rol`, false}, {`roles`, false},
		{`rolex`, false}, {`r\u006flex`, false}, {`r\u006f`, false}, {`\u0072ol`, false}, {``, false},
	} {
		if got := KeyIs([]byte(c.key), "role"); got != c.want {
			t.Errorf("KeyIs(%s, role) = %v", c.key, got)
		}
	}
}

// appendQuoteByBytes is AppendQuote byte by byte, as it was before the
// word-at-a-time skip: the oracle of FuzzAppendQuote.
func appendQuoteByBytes(dst []byte, s string) []byte {
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c < 0x20:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// FuzzAppendQuote: the quoted form is exactly the byte-by-byte one for
// any text (escapes at every offset of a word, invalid UTF-8, controls).
func FuzzAppendQuote(f *testing.F) {
	for _, s := range []string{"", "plain text longer than a word", "[Time/Date]: utc=`2026-02-02T21:22:38.229Z`",
		"0123456\"", "01234567\\", "\x00\x1f\x7f\xff", "ab\ncd\tef\rgh\"ij\\kl", "é→日本語 and \x01 after eight"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := string(AppendQuote([]byte("x"), s)), string(appendQuoteByBytes([]byte("x"), s)); got != want {
			t.Fatalf("AppendQuote(%q) = %s, want %s", s, got, want)
		}
	})
}
