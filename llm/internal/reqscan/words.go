package reqscan

import "math/bits"

// wordsDone is scanWords' next when j is final.
const wordsDone = 2

// odd8s marks the odd bytes' high bits: odd8 spread one bit per byte.
const odd8s = 0x8000800080008000

// scanWords scans a string's bytes from b[i], 8 at a time, settling every
// quote, backslash, control byte and (when ltOn is msb) '<' of a word with
// bit operations; carry is 1 when b[i] is escaped. It is the string scan
// valueWords does in assembly (value_wasm.s), in Go: str runs it when the
// tests select the mask scanner on a CPU, and TestScanWords holds it to
// strTail.
//
// With next <= 1 it ran out of whole words: j is the first byte not
// scanned and next its carry, for strTail. With next == wordsDone, j is
// the answer str expects: past a closing quote or a '<', at the byte an
// escape other than \" \\ \n \t escapes (just past its backslash), or -1
// for an invalid string.
//
// The masks keep one bit per byte (the high bit) rather than packed ones:
// simdjson's odd-backslash-run trick works there too, since a borrow
// crosses the seven zero bits between two high bits as it crosses one
// bit in packed form.
func scanWords(b []byte, i int, carry, ltOn uint64) (j int, next uint64) {
	cs := carry << 7
	for ; i+8 <= len(b); i += 8 {
		x := load64(b, i)
		q, s, c, l := eqMask(x, lsb*'"'), eqMask(x, lsb*'\\'), ctrlMask(x), eqMask(x, lsb*'<')&ltOn
		if q|s|c|l|cs == 0 {
			continue
		}
		pe := s &^ cs
		code := ((pe<<8 | odd8s) - pe) ^ odd8s
		escaped := (code ^ (s | cs)) & msb
		ev := (q|l)&^escaped | escaped&^(q|s|eqMask(x, lsb*'n')|eqMask(x, lsb*'t'))
		first := ev & -ev
		if c&(first-1) != 0 {
			return -1, wordsDone
		}
		if first != 0 {
			p := bits.TrailingZeros64(first) >> 3
			if first&escaped == 0 {
				p++
			}
			return i + p, wordsDone
		}
		cs = (code & s) >> 63 << 7
	}
	return i, cs >> 7
}
