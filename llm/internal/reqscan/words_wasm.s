#include "textflag.h"

// scanWords (words.go; words_other.go in Go) written out in WebAssembly:
// one structured loop, no resume table, arguments and masks in locals.
// The masks and the escape trick are the ones words.go explains, with two
// shortcuts that give the same answers: the test for a word with no stop
// is one AND chain over the masks' complements, and a word whose
// backslashes are all unescaped (no two in a row) skips the odd-run
// subtraction. TestScanWords holds it to strTail; TestUnderWasm runs it.

#define MSB $0x8080808080808080
#define LOW7 $0x7f7f7f7f7f7f7f7f
#define ODD $0x8000800080008000

// EQMASK pushes eqMask(x, k) for x in R4; R10 is scratch.
#define EQMASK(k) Get R4; I64Const k; I64Xor; Tee R10; I64Const LOW7; I64And; I64Const LOW7; I64Add; Get R10; I64Or; I64Const MSB; I64And; I64Const MSB; I64Xor

// NE pushes ne(x, k): the high bit set in each byte of x (in R4) other
// than k, the others clear; eqMask(x, k) is its complement in msb. R10 is
// scratch.
#define NE(k) Get R4; I64Const k; I64Xor; Tee R10; I64Const LOW7; I64And; I64Const LOW7; I64Add; Get R10; I64Or

// NOTMSB turns the top of the stack y into ^y & msb.
#define NOTMSB I64Const MSB; I64And; I64Const MSB; I64Xor

// func scanWords(b []byte, i int, carry, ltOn uint64) (j int, next uint64)
//
// R0 the word's address, R1 the last address a whole word starts at,
// R2 the carry on the high bit of byte 0, R3 ltOn, R4 the word,
// R5 quotes, R6 backslashes, R7 control bytes, R8 '<' (when ltOn),
// R9 events, R11 the escape code and then the next carry, R12 escaped
// bytes, R13 &b[0].
TEXT ·scanWords(SB), NOSPLIT, $0-64
	I64Load b_base+0(FP)
	Set R13
	Get R13
	I64Load i+24(FP)
	I64Add
	Set R0
	Get R13
	I64Load b_len+8(FP)
	I64Add
	I64Const $8
	I64Sub
	Set R1
	I64Load carry+32(FP)
	I64Const $7
	I64Shl
	Set R2
	I64Load ltOn+40(FP)
	Set R3

	Block
	Loop
		Get R0
		Get R1
		I64GtS
		BrIf $1

		Get R0
		I32WrapI64
		I64Load $0
		Set R4

		// Each mask first in its complement (the high bit set where the
		// byte is not one), which makes the common test, a word with no
		// stop at all, one AND chain.
		NE($0x2222222222222222)
		Tee R5
		NE($0x5c5c5c5c5c5c5c5c)
		Tee R6
		I64And
		Get R4
		I64Const LOW7
		I64And
		I64Const $0x6060606060606060
		I64Add
		Get R4
		I64Or
		Tee R7
		I64And
		NE($0x3c3c3c3c3c3c3c3c)
		Get R3
		I64Const $-1
		I64Xor
		I64Or
		Tee R8
		I64And
		NOTMSB
		Get R2
		I64Or
		I64Eqz
		If
			// Nothing to settle in this word: the next one.
			Get R0
			I64Const $8
			I64Add
			Set R0
			Br $1
		End
		Get R5
		NOTMSB
		Set R5
		Get R6
		NOTMSB
		Set R6
		Get R7
		NOTMSB
		Set R7
		Get R8
		NOTMSB
		Set R8

		// No backslash is escaped itself (no two in a row, none escaped
		// by the carry): each escapes the byte after it. Otherwise the
		// odd-run trick: code = ((pe<<8 | odd) - pe) ^ odd, pe = s &^ carry.
		// R11 is the next word's carry.
		Get R6
		I64Const $8
		I64Shl
		Get R2
		I64Or
		Tee R12
		Get R6
		I64And
		I64Eqz
		If
			Get R6
			I64Const $56
			I64ShrU
			Set R11
		Else
			Get R6
			Get R2
			I64Const $-1
			I64Xor
			I64And
			Set R9
			Get R9
			I64Const $8
			I64Shl
			I64Const ODD
			I64Or
			Get R9
			I64Sub
			I64Const ODD
			I64Xor
			Set R11

			// escaped = (code ^ (s | carry)) & msb
			Get R11
			Get R6
			Get R2
			I64Or
			I64Xor
			I64Const MSB
			I64And
			Set R12

			// carry = (code & s) >> 63 << 7
			Get R11
			Get R6
			I64And
			I64Const $63
			I64ShrU
			I64Const $7
			I64Shl
			Set R11
		End

		// events = (q|l) &^ escaped | escaped &^ (q|s|'n'|'t'); the
		// 'n' and 't' masks only when some other byte is escaped.
		Get R12
		Get R5
		Get R6
		I64Or
		I64Const $-1
		I64Xor
		I64And
		Set R9
		Get R9
		I64Eqz
		I32Eqz
		If
			Get R9
			EQMASK($0x6e6e6e6e6e6e6e6e)
			EQMASK($0x7474747474747474)
			I64Or
			I64Const $-1
			I64Xor
			I64And
			Set R9
		End
		Get R5
		Get R8
		I64Or
		Get R12
		I64Const $-1
		I64Xor
		I64And
		Get R9
		I64Or
		Tee R9

		// No event and no control byte, the usual word with escapes:
		// the next one.
		Get R7
		I64Or
		I64Eqz
		If
			Get R11
			Set R2
			Get R0
			I64Const $8
			I64Add
			Set R0
			Br $1
		End

		// first = events & -events
		Get R9
		I64Const $0
		Get R9
		I64Sub
		I64And
		Set R9

		// A control byte before the first event: invalid.
		Get R7
		Get R9
		I64Const $1
		I64Sub
		I64And
		I64Eqz
		I32Eqz
		If
			Get SP
			I64Const $-1
			I64Store j+48(FP)
			Get SP
			I64Const $2
			I64Store next+56(FP)
			RET
		End

		// An event: past it, or at an escaped byte.
		Get R9
		I64Eqz
		I32Eqz
		If
			Get SP
			Get R0
			Get R13
			I64Sub
			Get R9
			I64Ctz
			I64Const $3
			I64ShrU
			I64Add
			Get R9
			Get R12
			I64And
			I64Eqz
			I64ExtendI32U
			I64Add
			I64Store j+48(FP)
			Get SP
			I64Const $2
			I64Store next+56(FP)
			RET
		End

		Get R11
		Set R2

		Get R0
		I64Const $8
		I64Add
		Set R0
		Br $0
	End
	End

	Get SP
	Get R0
	Get R13
	I64Sub
	I64Store j+48(FP)
	Get SP
	Get R2
	I64Const $7
	I64ShrU
	I64Store next+56(FP)
	RET
