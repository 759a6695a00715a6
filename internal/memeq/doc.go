// Package memeq compares byte slices as fast under the filter's wasm build
// as natively: Go's wasm port compares a byte per loop iteration
// (internal/bytealg), which the filter paid on every KB it compared.
package memeq
