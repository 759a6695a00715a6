//go:build !wasm

package memeq

import "bytes"

// Equal reports whether a and b hold the same bytes (bytes.Equal: the
// wasm build has its own, equal_wasm.go).
func Equal(a, b []byte) bool { return bytes.Equal(a, b) }
