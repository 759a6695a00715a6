//go:build wasm

package reqscan

const hasValueWords = true

// valueWords validates the JSON value at b[i] as Checker.Value does, with
// ltOn msb while no tag has been seen (str's '<' stops), and returns the
// index after it or -1, and flags (valueTag, valueBailed, and the number
// of members from bit 8 when the value is an object). For the first
// len(out)/4 members it stores in out the offsets of the key's opening
// quote, past the key's closing quote, of the value and past it. It is
// WebAssembly (value_wasm.s): one function and no resume-table jump per
// token, where Go's wasm backend spends most of the walk's time.
//
//go:noescape
func valueWords(b []byte, i int, ltOn uint64, out []uint32) (j int, flags uint64)
