package reqscan

import (
	"math"
	"unsafe"
)

// valueWords flags.
const (
	valueTag    = 1 // a string in the value may hold a directive tag
	valueBailed = 2 // too deep for valueWords: Value's Go loop takes it
)

// valueAsm selects valueWords, Value's loop in WebAssembly
// (value_wasm.s), under wasm; the tests switch it with maskScanner.
var valueAsm = hasValueWords

// Field is one member of an object as Object records it: the offsets of
// its key's opening quote, past the key's closing quote, of its value and
// past the value.
type Field struct{ KeyStart, KeyEnd, ValueStart, ValueEnd uint32 }

// Key returns the member's raw (still escaped) key in b.
func (m Field) Key(b []byte) []byte { return b[m.KeyStart+1 : m.KeyEnd-1] }

// Object validates the value at i, nested depth levels deep, as Value
// does, and when it is an object records its members in out, in order.
// It returns the index after the value (or -1) and the number of members,
// which may exceed len(out): then only the first len(out) are recorded.
// Under wasm the walk and the recording are one call into assembly
// (value_wasm.s) instead of a Go callback per member.
func (v *Checker) Object(i, depth int, out []Field) (end, n int) {
	if valueAsm && maskScanner && depth < MaxDepth-64 && uint(i) < uint(len(v.b)) && len(v.b) <= math.MaxUint32 {
		ltOn := uint64(msb)
		if v.tag {
			ltOn = 0
		}
		words := unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(out))), 4*len(out))
		j, flags := valueWords(v.b, i, ltOn, words)
		if flags&valueBailed == 0 {
			if flags&valueTag != 0 {
				v.tag = true
			}
			if j < 0 {
				return -1, 0
			}
			return j, int(flags >> 8)
		}
	}
	if uint(i) >= uint(len(v.b)) || v.b[i] != '{' {
		end = v.Value(i, depth)
		if end < 0 {
			return -1, 0
		}
		return end, 0
	}
	end = v.Members(i, func(key []byte, vs int) int {
		ve := v.Value(vs, depth+1)
		if ve >= 0 && n < len(out) {
			// key is v.b[quote+1 : closing quote]: its offset is in its capacity.
			ks := cap(v.b) - cap(key) - 1
			out[n] = Field{uint32(ks), uint32(ks + len(key) + 2), uint32(vs), uint32(ve)}
		}
		n++
		return ve
	})
	if end < 0 {
		return -1, 0
	}
	return end, n
}
