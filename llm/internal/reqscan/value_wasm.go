//go:build wasm

package reqscan

const hasValueWords = true

// valueWords validates the JSON value at b[i] as Checker.Value does, with
// ltOn msb while no tag has been seen (str's '<' stops), and returns the
// index after it or -1, and flags (valueTag, valueBailed). It is
// WebAssembly (value_wasm.s): one function and no resume-table jump per
// token, where Go's wasm backend spends most of the walk's time.
//
//go:noescape
func valueWords(b []byte, i int, ltOn uint64) (j int, flags uint64)
