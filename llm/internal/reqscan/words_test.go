package reqscan

import (
	"math/rand/v2"
	"testing"
)

// scanFrom is str's loop without its event handling: scanWords, then
// strTail for what it leaves.
func scanFrom(b []byte, i int, carry uint64, lt bool) int {
	ltOn := uint64(0)
	if lt {
		ltOn = msb
	}
	j, next := scanWords(b, i, carry, ltOn)
	if next == wordsDone {
		return j
	}
	return strTail(b, j, next, lt)
}

// stringBytes are the bytes scanWords settles, and neighbours of them
// that a borrow between bytes could confuse with them.
var stringBytes = []byte{'a', '"', '#', '\\', ']', 'n', 't', 'u', '/', '<', '=', '*', 0x00, 0x01, 0x1f, 0x20, 0x7f, 0x80, 0xff}

// TestScanWords holds scanWords (the string scan valueWords does in
// assembly, in Go) to strTail, which settles each word with packed
// masks: random strings of the bytes that matter, from every start, with
// and without a carry and with and without '<' stops.
func TestScanWords(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	b := make([]byte, 0, 80)
	for trial := 0; trial < 200000; trial++ {
		b = b[:rng.IntN(80)]
		for k := range b {
			b[k] = stringBytes[rng.IntN(len(stringBytes))]
		}
		i := 0
		if len(b) > 0 {
			i = rng.IntN(len(b))
		}
		carry, lt := uint64(trial&1), trial&2 != 0
		if got, want := scanFrom(b, i, carry, lt), strTail(b, i, carry, lt); got != want {
			t.Fatalf("scanning %q from %d (carry %d, '<' stops %v): %d, strTail says %d", b, i, carry, lt, got, want)
		}
	}
}

func FuzzScanWords(f *testing.F) {
	for _, s := range swarSeeds {
		f.Add([]byte(s), uint(1), false, true)
	}
	f.Add([]byte(`0123456\\\\\\\"x`), uint(0), true, false)
	f.Fuzz(func(t *testing.T, b []byte, i uint, carry, lt bool) {
		if len(b) == 0 {
			return
		}
		start := int(i % uint(len(b)))
		c := uint64(0)
		if carry {
			c = 1
		}
		if got, want := scanFrom(b, start, c, lt), strTail(b, start, c, lt); got != want {
			t.Fatalf("scanning %q from %d (carry %d, '<' stops %v): %d, strTail says %d", b, start, c, lt, got, want)
		}
	})
}
