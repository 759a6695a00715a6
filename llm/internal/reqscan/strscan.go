package reqscan

import (
	"math/bits"
	"runtime"
)

const (
	lsb   = 0x0101010101010101
	msb   = 0x8080808080808080
	low7  = 0x7f7f7f7f7f7f7f7f
	odd8  = 0xaa       // the odd bit positions of an 8-bit mask
	odd32 = 0xaaaaaaaa // and of a 32-bit one
)

// eqMask has the high bit set in exactly the bytes of x equal to the byte
// k repeats (k is c*lsb). It is exact: no borrow crosses a byte.
func eqMask(x, k uint64) uint64 {
	t := x ^ k
	return ^((t&low7 + low7) | t) & msb
}

// ctrlMask has the high bit set in exactly the bytes of x below 0x20.
func ctrlMask(x uint64) uint64 { return ^((x&low7 + lsb*0x60) | x) & msb }

// pack turns a mask of high bits into 8 bits, bit k for byte k.
func pack(m uint64) uint64 { return (m >> 7) * 0x0102040810204080 >> 56 }

// escapedBits returns which of 8 bytes are escaped (the byte after an
// odd run of backslashes), given their backslash bits bs and carry, 1 when
// the first byte is escaped by the word before. It returns the carry for
// the next word too. This is the carry-less form of simdjson's escape
// scanner on 8 bits.
func escapedBits(bs, carry uint64) (escaped, next uint64) {
	if bs == 0 {
		return carry, 0
	}
	pe := bs &^ carry // backslashes that may escape: not escaped themselves
	code := ((pe<<1 | odd8) - pe) ^ odd8
	return (code ^ (bs | carry)) & 0xff, (code & bs) >> 7
}

// escLen is the length of a valid escape by the byte after the
// backslash, 0 for an invalid one.
var escLen = func() (t [256]uint8) {
	for _, c := range `"\\/bfnrt` {
		t[c] = 2
	}
	t['u'] = 6
	return t
}()

// escape validates the escape at b[i]=='\\' and returns its length, or 0.
// A \u escape of '<' or '*' sets the tag hint.
func (v *Checker) escape(b []byte, i int) int {
	if i+1 >= len(b) {
		return 0
	}
	k := int(escLen[b[i+1]])
	if k != 6 {
		return k
	}
	if i+6 > len(b) || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
		return 0
	}
	if b[i+2] == '0' && b[i+3] == '0' && (b[i+4] == '3' && b[i+5]|0x20 == 'c' || b[i+4] == '2' && b[i+5]|0x20 == 'a') {
		v.tag = true
	}
	return 6
}

// tailWord returns the bytes b[i:] (fewer than 8) as a little-endian
// word, padded with 'a', which stops nothing.
func tailWord(b []byte, i int) uint64 {
	x := uint64(lsb * 'a')
	for k := len(b) - 1; k >= i; k-- {
		x = x<<8 | uint64(b[k])
	}
	return x
}

// maskScanner selects the string scanner: masks settling 8 bytes at a
// time under wasm (in assembly, value_wasm.s; scanWords, words.go, is
// the same scan in Go), strWords natively. Go's wasm backend makes each
// branch and call cost as much as dozens of bit operations, so there
// settling every stop of a word with bit operations wins; on a CPU the
// word loop with byte-by-byte stops is faster. Tests run both.
var maskScanner = runtime.GOARCH == "wasm"

// str validates the string starting at b[i]=='"' and returns the index
// after it, or -1. Until the tag hint is set it also looks at each '<'.
//
// Under wasm the assembly walk (valueWords) scans the string; elsewhere
// scanWords does the work, and str handles what it leaves: escapes other
// than \", \\, \n and \t, each '<' while the hint is unset, and the
// document's last bytes (strTail).
func (v *Checker) str(b []byte, i int) int {
	if !maskScanner {
		return v.strWords(b, i)
	}
	open := i
	i++
	// A first word without a quote, backslash, control byte or '<' is
	// skipped here, and a short string with only plain bytes ends here:
	// a call costs in wasm, and most keys and values are short.
	if i+8 <= len(b) {
		x := load64(b, i)
		q := eqMask(x, lsb*'"')
		if stop := q | eqMask(x, lsb*'\\') | ctrlMask(x) | eqMask(x, lsb*'<'); stop == 0 {
			i += 8
		} else if low := q & -q; low != 0 && (low-1)&stop == 0 {
			return i + bits.TrailingZeros64(q)>>3 + 1
		}
	}
	if hasValueWords {
		ltOn := uint64(msb)
		if v.tag {
			ltOn = 0
		}
		j, flags := valueWords(b, open, ltOn, nil) // a string never bails
		if flags&valueTag != 0 {
			v.tag = true
		}
		return j
	}
	for {
		var ltOn uint64
		if !v.tag {
			ltOn = msb
		}
		j, next := scanWords(b, i, 0, ltOn)
		if next != wordsDone {
			j = strTail(b, j, next, ltOn != 0)
		}
		if j < 0 || b[j-1] == '"' {
			return j
		}
		if b[j-1] == '<' {
			if j+1 < len(b) && b[j] == '*' && b[j+1] == '*' {
				v.tag = true
			}
			i = j
			continue
		}
		// b[j-1] is a backslash.
		k := v.escape(b, j-1)
		if k == 0 {
			return -1
		}
		i = j - 1 + k
	}
}

// strTail is the scanners' loop over the document's last bytes, a word at
// a time; the final partial word is padded (tailWord).
func strTail(b []byte, i int, carry uint64, lt bool) int {
	n := len(b)
	ltOn := uint64(0)
	if lt {
		ltOn = msb
	}
	for ; i < n; i += 8 {
		var x uint64
		if i+8 <= n {
			x = load64(b, i)
		} else {
			x = tailWord(b, i)
		}
		q, bs, c, l := eqMask(x, lsb*'"'), eqMask(x, lsb*'\\'), ctrlMask(x), eqMask(x, lsb*'<')&ltOn
		escaped, next := escapedBits(pack(bs), carry)
		ev := pack(q|l)&^escaped | escaped&^pack(q|bs|eqMask(x, lsb*'n')|eqMask(x, lsb*'t'))
		first := ev & -ev
		if pack(c)&(first-1) != 0 {
			return -1
		}
		if first != 0 {
			if e := i + eventEnd(first, escaped); e <= n {
				return e
			}
			return -1 // an escape of the padding
		}
		carry = next
	}
	return -1
}

// eventEnd is where a scanner returns for the event at the lowest bit of
// first: past an unescaped quote or '<', or at an escaped byte (just past
// its backslash).
func eventEnd(first, escaped uint64) int {
	p := bits.TrailingZeros64(first)
	if first&escaped == 0 {
		p++
	}
	return p
}

// zeroBytes has the high bit set in every byte of x that is zero, and
// possibly in bytes above one that is (a borrow): exact for the lowest.
func zeroBytes(x uint64) uint64 { return (x - lsb) &^ x & msb }

// stops marks the bytes that end a plain run inside a JSON string: a
// quote, a backslash or a control character. Only its lowest mark is
// exact; the caller checks the byte.
func stops(x uint64) uint64 {
	return zeroBytes(x^(lsb*'"')) | zeroBytes(x^(lsb*'\\')) | (x-lsb*0x20)&^x&msb
}

// plainRun skips 8 bytes at a time while none of them stops a plain run
// (SWAR; wasm has no SIMD IndexByte).
func plainRun(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		if stops(load64(b, i)) != 0 {
			break
		}
	}
	return i
}

// strWords is str natively: it skips plain bytes 8 at a time and handles
// each stop byte by byte, which on a CPU that predicts branches well is
// faster than settling whole blocks with bit operations.
func (v *Checker) strWords(b []byte, i int) int {
	i++
	n := len(b)
	for {
		if v.tag {
			i = plainRun(b, i)
			if i+8 <= n {
				i += bits.TrailingZeros64(stops(load64(b, i))) >> 3
			} else {
				for i < n && !strStop[b[i]] {
					i++
				}
			}
		} else {
			// plainRun that also stops at '<', written out: a call per
			// stop costs in wasm, and it is too large to inline.
			for ; i+8 <= n; i += 8 {
				x := load64(b, i)
				if m := stops(x) | zeroBytes(x^(lsb*'<')); m != 0 {
					i += bits.TrailingZeros64(m) >> 3
					break
				}
			}
			if i+8 > n {
				for i < n && !strStop[b[i]] && b[i] != '<' {
					i++
				}
			}
		}
		if i >= n {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			// The short escapes inline: a call per escape costs in wasm.
			if i+1 < n && escLen[b[i+1]] == 2 {
				i += 2
				continue
			}
			k := v.escape(b, i)
			if k == 0 {
				return -1
			}
			i += k
		case c == '<':
			if i+2 < n && b[i+1] == '*' && b[i+2] == '*' {
				v.tag = true
			}
			i++
		case c < 0x20:
			return -1
		default: // a byte above a stop in the same word: not one itself
			i++
		}
	}
}
