//go:build !wasm

package reqscan

import "math/bits"

// odd8s marks the odd bytes' high bits: odd8 spread one bit per byte.
const odd8s = 0x8000800080008000

// scanWords is words.go's scanner in Go; under wasm it is assembly
// (words_wasm.s), which TestScanWords holds to the same reference.
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
