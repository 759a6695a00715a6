package reqscan

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// randomValue appends a random JSON-like value: mostly valid, with
// invalid numbers, literals, escapes and bytes mixed in by bad.
func randomValue(rng *rand.Rand, b []byte, depth int, bad bool) []byte {
	ws := func() {
		for k := rng.IntN(3); k > 0; k-- {
			b = append(b, " \t\n\r"[rng.IntN(4)])
		}
	}
	pick := func(good, wrong []string) string {
		if bad && rng.IntN(8) == 0 {
			return wrong[rng.IntN(len(wrong))]
		}
		return good[rng.IntN(len(good))]
	}
	kind := rng.IntN(8)
	if depth > 6 {
		kind %= 4
	}
	switch kind {
	case 0:
		b = append(b, pick([]string{"0", "-0", "7", "-12", "3.25", "1e9", "2E-7", "-0.5e+3", "123456789012"},
			[]string{"01", "1.", "-", "1e", ".5", "+1", "1.e3", "--1", "0x1"})...)
	case 1:
		b = append(b, pick([]string{"true", "false", "null"}, []string{"tru", "nul", "fals", "True", "nulll"})...)
	case 2, 3:
		b = append(b, '"')
		for k := rng.IntN(40); k > 0; k-- {
			b = append(b, pick([]string{"a", "é", "<", "*", "<**", `\"`, `\\`, `\n`, `\t`, `\/`, `\b`, `\u00e9`, `\u003C`, `\u002a`, " "},
				[]string{`\x`, `\u12`, `\uZZZZ`, "\x01", "\x1f", `"`, `\`})...)
		}
		b = append(b, '"')
	case 4, 5:
		b = append(b, '[')
		ws()
		for k := rng.IntN(5); k > 0; k-- {
			b = randomValue(rng, b, depth+1, bad)
			ws()
			if k > 1 || bad && rng.IntN(10) == 0 {
				b = append(b, ',')
				ws()
			}
		}
		b = append(b, pick([]string{"]"}, []string{"}", ""})...)
	default:
		b = append(b, '{')
		ws()
		for k := rng.IntN(5); k > 0; k-- {
			b = append(b, pick([]string{`"k"`, `"role"`, `"a\"b"`, `"\u0072ole"`, `"<**"`}, []string{`k`, `'k'`, `1`})...)
			ws()
			b = append(b, pick([]string{":"}, []string{"", "="})...)
			ws()
			b = randomValue(rng, b, depth+1, bad)
			ws()
			if k > 1 || bad && rng.IntN(10) == 0 {
				b = append(b, ',')
				ws()
			}
		}
		b = append(b, pick([]string{"}"}, []string{"]", ""})...)
	}
	return b
}

// TestValueWords holds Value, under wasm the assembly walk (value_wasm.s)
// and elsewhere its Go loop, to encoding/json over random documents, at
// every nesting, valid and broken, whole and cut short, and holds the two
// walks to each other (the end index and the tag hint) where both exist.
func TestValueWords(t *testing.T) {
	defer func(was bool) { valueAsm = was }(valueAsm)
	rng := rand.New(rand.NewPCG(21, 22))
	var b []byte
	for trial := 0; trial < 30000; trial++ {
		b = randomValue(rng, b[:0], 0, trial%2 == 1)
		if trial%5 == 4 && len(b) > 1 {
			b = b[:rng.IntN(len(b))]
		}
		checkValueWalks(t, b)
	}
}

// checkValueWalks compares both walks of the value at the start of b and
// the document's validity with encoding/json.
func checkValueWalks(t *testing.T, b []byte) {
	t.Helper()
	var ends [2]int
	var tags [2]bool
	for k, asm := range []bool{false, true} {
		valueAsm = asm && hasValueWords
		v := Checker{b: b}
		ends[k], tags[k] = v.Value(0, 0), v.tag
	}
	if ends[0] != ends[1] || ends[0] >= 0 && tags[0] != tags[1] {
		t.Fatalf("%q: Go loop %d (tag %v), assembly %d (tag %v)", b, ends[0], tags[0], ends[1], tags[1])
	}
	if got, want := ends[1] >= 0 && SkipSpace(b, ends[1]) == len(b), json.Valid(b) && len(b) > 0 && !isSpace(b[0]); got != want {
		t.Fatalf("%q: valid %v, encoding/json says %v", b, got, want)
	}
}

// TestValueWordsDeep: past 60 levels the assembly hands the value to the
// Go loop, which still rejects nesting deeper than MaxDepth.
func TestValueWordsDeep(t *testing.T) {
	defer func(was bool) { valueAsm = was }(valueAsm)
	for _, n := range []int{59, 60, 61, 200, MaxDepth - 1, MaxDepth, MaxDepth + 1} {
		doc := []byte(strings.Repeat(`[{"a":`, n/2) + strings.Repeat("[", n%2) + `"<**"` + strings.Repeat("]", n%2) + strings.Repeat(`}]`, n/2))
		checkValueWalks(t, doc)
	}
}

func FuzzValueWords(f *testing.F) {
	for _, s := range validSeeds {
		f.Add([]byte(s))
	}
	rng := rand.New(rand.NewPCG(23, 24))
	for k := 0; k < 50; k++ {
		f.Add(randomValue(rng, nil, 0, k%2 == 1))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		defer func(was bool) { valueAsm = was }(valueAsm)
		checkValueWalks(t, b)
	})
}

// TestObject holds Object's members, recorded by the assembly under wasm,
// to the Go walk's (Members) over random documents, objects or not, with
// room for all members, some or none.
func TestObject(t *testing.T) {
	defer func(was bool) { valueAsm = was }(valueAsm)
	rng := rand.New(rand.NewPCG(25, 26))
	var b []byte
	for trial := 0; trial < 30000; trial++ {
		b = append(randomValue(rng, b[:0], 0, trial%3 == 2), " ,"...)
		room := rng.IntN(6)
		var got, want [2][]Field
		var ends, ns [2]int
		for k, asm := range []bool{false, true} {
			valueAsm = asm && hasValueWords
			out := make([]Field, room)
			v := Checker{b: b}
			ends[k], ns[k] = v.Object(0, 1, out)
			got[k] = out[:min(ns[k], room)]
			if ends[k] < 0 {
				continue
			}
			// The reference: Members over the same object.
			if b[0] == '{' {
				Members(b, 0, func(key []byte, vs, ve int) bool {
					ks := cap(b) - cap(key) - 1
					want[k] = append(want[k], Field{uint32(ks), uint32(ks + len(key) + 2), uint32(vs), uint32(ve)})
					return true
				})
			}
		}
		if ends[0] != ends[1] || ends[0] >= 0 && ns[0] != ns[1] {
			t.Fatalf("%q: Go walk %d with %d members, assembly %d with %d", b, ends[0], ns[0], ends[1], ns[1])
		}
		if ends[0] < 0 {
			continue
		}
		for k := range got {
			if ns[k] != len(want[k]) {
				t.Fatalf("%q: %d members, Members finds %d", b, ns[k], len(want[k]))
			}
			for m := range got[k] {
				if got[k][m] != want[k][m] {
					t.Fatalf("%q (assembly %v): member %d recorded as %+v, Members finds %+v (%q)", b, k == 1, m, got[k][m], want[k][m], want[k][m].Key(b))
				}
			}
		}
	}
}

// TestValueOutside: an index outside the document is invalid for both
// walks, never a read outside it.
func TestValueOutside(t *testing.T) {
	b := []byte(`{"a":[1,2]}`)
	for _, i := range []int{-1, -8, len(b), len(b) + 8} {
		v := Checker{b: b[:len(b):len(b)]}
		if got := v.Value(i, 0); got != -1 {
			t.Errorf("Value(%d) = %d, want -1", i, got)
		}
		if got, n := v.Object(i, 0, make([]Field, 2)); got != -1 || n != 0 {
			t.Errorf("Object(%d) = %d, %d, want -1, 0", i, got, n)
		}
	}
}
