package memeq

import (
	"bytes"
	"testing"
)

// FuzzEqual: Equal agrees with bytes.Equal, for every length around the
// 8- and 32-byte steps of the wasm version and a difference anywhere.
func FuzzEqual(f *testing.F) {
	f.Add([]byte("same"), []byte("same"))
	f.Add([]byte("same"), []byte("sane"))
	f.Add([]byte(""), []byte("x"))
	long := bytes.Repeat([]byte("0123456789abcdef"), 5)
	for _, n := range []int{7, 8, 9, 31, 32, 33, 63, 64, 65, 80} {
		f.Add(long[:n], long[:n])
		for _, at := range []int{0, n / 2, n - 1} {
			other := bytes.Clone(long[:n])
			other[at] ^= 0x20
			f.Add(long[:n], other)
		}
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		if got, want := Equal(a, b), bytes.Equal(a, b); got != want {
			t.Fatalf("Equal(%q, %q) = %v, want %v", a, b, got, want)
		}
		if !Equal(a, bytes.Clone(a)) {
			t.Fatalf("Equal(%q, a copy) = false", a)
		}
	})
}
