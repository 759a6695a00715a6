//go:build wasm

package memeq

import "unsafe"

// Equal reports whether a and b hold the same bytes. Under wasm,
// bytes.Equal compares a byte per loop iteration (internal/bytealg's
// memeqbody); this compares 32 bytes per iteration, about 8 times faster
// on the KB the filter compares (a memoised tools array, a response chunk
// against what goes out).
func Equal(a, b []byte) bool {
	n := len(a)
	if n != len(b) {
		return false
	}
	i := 0
	for ; i+32 <= n; i += 32 {
		if load64(a, i) != load64(b, i) || load64(a, i+8) != load64(b, i+8) ||
			load64(a, i+16) != load64(b, i+16) || load64(a, i+24) != load64(b, i+24) {
			return false
		}
	}
	for ; i+8 <= n; i += 8 {
		if load64(a, i) != load64(b, i) {
			return false
		}
	}
	for ; i < n; i++ {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// load64 reads 8 bytes at b[i:] (little-endian, as wasm is); the caller
// guarantees i+8 <= len(b). No bounds check: this is the loop's cost.
func load64(b []byte, i int) uint64 {
	return *(*uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), i))
}
