package reqscan

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestEscapedBits holds the word-wise escape scanner to a byte-by-byte
// one over every backslash pattern of three consecutive words.
func TestEscapedBits(t *testing.T) {
	words := make([]uint64, 0, 256)
	for w := uint64(0); w < 256; w++ {
		words = append(words, w)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200000; trial++ {
		ws := []uint64{words[rng.IntN(256)], words[rng.IntN(256)], words[rng.IntN(256)]}
		if trial < 256*2 { // every single word, with and without a carry in
			ws = []uint64{uint64(trial % 2 * 0x80), uint64(trial / 2)}
		}
		// The reference: walk the bytes, a backslash not escaped escapes the next.
		var want []bool
		escapedNext := false
		for _, w := range ws {
			for k := 0; k < 8; k++ {
				want = append(want, escapedNext)
				escapedNext = !escapedNext && w>>k&1 == 1
			}
		}
		carry := uint64(0)
		for wi, w := range ws {
			got, next := escapedBits(w, carry)
			for k := 0; k < 8; k++ {
				if (got>>k&1 == 1) != want[wi*8+k] {
					t.Fatalf("words %08b: byte %d of word %d escaped=%v, want %v", ws, k, wi, got>>k&1 == 1, want[wi*8+k])
				}
			}
			if got>>8 != 0 || next > 1 {
				t.Fatalf("words %08b: stray bits %x next %d", ws, got, next)
			}
			carry = next
		}
	}
}

func TestMasksExact(t *testing.T) {
	for c := 0; c < 256; c++ {
		for pos := 0; pos < 8; pos++ {
			// c at pos among neighbours that would borrow or carry into it.
			for _, fill := range []byte{0, 1, '"' + 1, '\\' + 1, 0x1f, 0x20, 0x21, 0x7f, 0x80, 0xff} {
				var w [8]byte
				for k := range w {
					w[k] = fill
				}
				w[pos] = byte(c)
				x := load64(w[:], 0)
				for k := 0; k < 8; k++ {
					bit := func(m uint64) bool { return pack(m)>>k&1 == 1 }
					if bit(eqMask(x, lsb*'"')) != (w[k] == '"') || bit(eqMask(x, lsb*'\\')) != (w[k] == '\\') ||
						bit(ctrlMask(x)) != (w[k] < 0x20) {
						t.Fatalf("word % x: masks wrong at byte %d", w, k)
					}
				}
			}
		}
	}
}

// naiveTagHint is what TagHint promises for a valid document, byte by
// byte: some string holds "<**" or a \u escape of '<' or '*'.
func naiveTagHint(b []byte) bool {
	in := false
	for i := 0; i < len(b); i++ {
		switch {
		case b[i] == '"':
			in = !in
		case !in:
		case b[i] == '\\':
			if b[i+1] == 'u' {
				switch strings.ToLower(string(b[i+2 : i+6])) {
				case "003c", "002a":
					return true
				}
			}
			i++
		case b[i] == '<' && bytes.HasPrefix(b[i:], []byte("<**")):
			return true
		}
	}
	return false
}

// TestStringsAgainstEncodingJSON builds many short strings from the bytes
// that matter to the word-wise scanner, at every alignment to 8 bytes, and
// holds Valid to encoding/json and TagHint to naiveTagHint.
func TestStringsAgainstEncodingJSON(t *testing.T) {
	bothScanners(func() { testStringsAgainstEncodingJSON(t) })
}

func testStringsAgainstEncodingJSON(t *testing.T) {
	alphabet := [][]byte{
		[]byte("a"), []byte(`"`), []byte(`\`), []byte(`\\`), []byte(`\"`), []byte(`\n`), []byte(`\t`), []byte(`\/`),
		[]byte(`\u`), []byte(`\u00e9`), []byte(`\u003c`), []byte(`\u002A`), []byte(`\uD83D\uDE00`), []byte(`\x`),
		[]byte("0"), []byte("3c"), []byte("<"), []byte("*"), []byte("<**"), []byte("\x01"), []byte("\x1f"), []byte(" "),
		[]byte("\x7f"), []byte("é"), []byte("→"), []byte("😀"), []byte("\xff"), []byte("\xc3"), []byte("\xe2\x86"),
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 100000; trial++ {
		var s []byte
		for k := rng.IntN(30); k > 0; k-- {
			s = append(s, alphabet[rng.IntN(len(alphabet))]...)
		}
		// Leading space moves the string across 8-byte alignments; trailing
		// space lets whole words run to the string's end.
		pad := strings.Repeat(" ", rng.IntN(9))
		tail := strings.Repeat(" ", rng.IntN(70))
		var doc []byte
		switch trial % 3 {
		case 0:
			doc = []byte(pad + `"` + string(s) + `"` + tail)
		case 1:
			doc = []byte(`[` + pad + `"` + string(s) + `","x"]` + tail)
		default:
			doc = []byte(`{"` + string(s) + `":1}` + pad + tail)
		}
		got, want := Valid(doc), json.Valid(doc)
		if got != want {
			t.Fatalf("Valid(%q) = %v, encoding/json says %v (masks %v)", doc, got, want, maskScanner)
		}
		if !got {
			continue
		}
		v := NewChecker(doc)
		v.Value(SkipSpace(doc, 0), 0)
		if v.TagHint() != naiveTagHint(doc) {
			t.Fatalf("TagHint(%q) = %v (masks %v)", doc, v.TagHint(), maskScanner)
		}
	}
}

// swarSeeds are edge cases of the word-wise string scanner: escapes,
// multibyte UTF-8, invalid UTF-8 and control bytes straddling 8-byte
// boundaries, strings ending at and near a word's end.
var swarSeeds = func() []string {
	var out []string
	for off := 0; off < 9; off++ {
		p := strings.Repeat("x", off)
		for _, s := range []string{
			`\"`, `\\`, `\\\"`, `\\\\`, `\n`, `\u00e9`, `\u003c**`, `<**`, `<*`, "\u00e9", "\u2192", "\U0001F600",
			"\xff\xfe", "\xc3", "\xe2\x82", "\x01", "\x1f", `\`, `\u12`, `\uzzzz`, `\q`,
		} {
			out = append(out, `"`+p+s+`"`, `["`+p+s+`"]`, `{"`+p+s+`":"`+s+p+`"}`, `"`+p+s)
		}
	}
	return out
}()

func FuzzStringScan(f *testing.F) {
	for _, s := range swarSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		bothScanners(func() {
			got, want := Valid(b), json.Valid(b)
			if got != want {
				t.Fatalf("Valid(%q) = %v, encoding/json says %v (masks %v)", b, got, want, maskScanner)
			}
			if !got {
				return
			}
			v := NewChecker(b)
			v.Value(SkipSpace(b, 0), 0)
			if v.TagHint() != naiveTagHint(b) {
				t.Fatalf("TagHint(%q) = %v (masks %v)", b, v.TagHint(), maskScanner)
			}
		})
	})
}
