//go:build !wasm

package reqscan

const hasValueWords = false

// valueWords exists only under wasm (value_wasm.s).
func valueWords(b []byte, i int, ltOn uint64, out []uint32) (j int, flags uint64) {
	return -1, valueBailed
}
