//go:build wasm

package reqscan

// scanWords is words.go's scanner in WebAssembly (words_wasm.s): Go's wasm
// backend sends every branch through the function's resume table and
// keeps arguments and spills in linear memory, which in this loop costs
// more than the bit operations themselves.
//
//go:noescape
func scanWords(b []byte, i int, carry, ltOn uint64) (j int, next uint64)
