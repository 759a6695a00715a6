#include "textflag.h"

// valueWords (value.go) is Checker.Value's loop written out in
// WebAssembly, with str's string scan inside it: one function, so the
// walk of a nested value takes no Go call and no resume-table jump per
// token. Its states are explicit (R13), and strings are settled 8 bytes
// at a time with masks (scanWords, words.go, is the same scan in Go).
// str hands a whole string to it too.

#define MSB $0x8080808080808080
#define LOW7 $0x7f7f7f7f7f7f7f7f
#define ODD $0x8000800080008000

// Registers: R0 the address being read, R1 the document's end address,
// R2 the string's carry (the high bit of byte 0 is escaped), R3 the
// nesting level, R4 the word or byte at R0, R5-R8 the quote, backslash,
// control and '<' masks, R9 events, R10 scratch, R11 the escape code and
// next carry, R12 escaped bytes, R13 the state, R14 ltOn, R15 flags (bit 0
// a tag may be held, bit 1 the string being read is a key, bits 8 and up
// the members of the value, if it is an object), F16 the container stack
// (bit l set: level l+1 is an object), F17 &out[0] and F18 how many
// members out holds, both as f64 bits.
#define VALUE $0
#define KEY $1
#define STRING $2
#define COLON $3
#define AFTER $4

// NE pushes ne(x, k) for x in R4: the high bit set in each byte of x
// other than k, the others clear (eqMask's complement in msb). R10 is
// scratch.
#define NE(k) Get R4; I64Const k; I64Xor; Tee R10; I64Const LOW7; I64And; I64Const LOW7; I64Add; Get R10; I64Or

// NOTMSB turns the top of the stack y into ^y & msb.
#define NOTMSB I64Const MSB; I64And; I64Const MSB; I64Xor

// EQMASK pushes eqMask(x, k) for x in R4.
#define EQMASK(k) NE(k); NOTMSB

// ADV advances R0 by n bytes.
#define ADV(n) Get R0; I64Const n; I64Add; Set R0

// POP closes the innermost container.
#define POP Get R3; I64Const $1; I64Sub; Set R3

// TAG notes that a tag may be held and stops looking at '<'.
#define TAG Get R15; I64Const $1; I64Or; Set R15; I64Const $0; Set R14

// STARS notes a tag when the '<' at the address in r is followed by
// "**" inside the document.
#define STARS(r) Get r; I64Const $3; I64Add; Get R1; I64LeU; If; Get r; I32WrapI64; I64Load16U $1; I64Const $0x2a2a; I64Eq; If; TAG; End; End

// FAIL returns -1: the value is invalid.
#define FAIL Get SP; I64Const $-1; I64Store j+64(FP); Get SP; I64Const $0; I64Store flags+72(FP); RET

// BAIL returns with the bail flag: Value's Go loop takes the value.
#define BAIL Get SP; I64Const $-1; I64Store j+64(FP); Get SP; I64Const $2; I64Store flags+72(FP); RET

// SKIPWS advances R0 past whitespace and leaves the next byte in R4,
// failing at the document's end.
#define SKIPWS Block; Loop; Get R0; Get R1; I64GeU; If; FAIL; End; Get R0; I32WrapI64; I64Load8U $0; Tee R4; I64Const $32; I64GtU; BrIf $1; I64Const $0x100002600; Get R4; I64ShrU; I64Const $1; I64And; I64Eqz; BrIf $1; ADV($1); Br $0; End; End

// ISDIGIT pushes whether the byte in R4 is a digit (i32).
#define ISDIGIT Get R4; I64Const $48; I64Sub; I64Const $10; I64LtU

// LOADB loads the byte at R0 into R4, or fails at the document's end.
#define LOADB Get R0; Get R1; I64GeU; If; FAIL; End; Get R0; I32WrapI64; I64Load8U $0; Set R4

// PEEKB sets R4 to the byte at R0, or to 0 at the document's end.
#define PEEKB I64Const $0; Set R4; Get R0; Get R1; I64LtU; If; Get R0; I32WrapI64; I64Load8U $0; Set R4; End

// DIGITS advances R0 past digits (at least one, else it fails).
#define DIGITS LOADB; ISDIGIT; I32Eqz; If; FAIL; End; Block; Loop; ADV($1); PEEKB; ISDIGIT; I32Eqz; BrIf $1; Br $0; End; End

// HEX fails unless the byte at address R10+off is a hex digit.
#define HEX(off) Get R10; I32WrapI64; I64Load8U off; Set R4; ISDIGIT; Get R4; I64Const $32; I64Or; I64Const $97; I64Sub; I64Const $6; I64LtU; I32Or; I32Eqz; If; FAIL; End

// REC stores the offset of R0 in the value's field at off (0 the key's
// quote, 4 past the key, 8 the value, 12 past it) of the current member,
// when the walk is in the members of the value, an object, and out has
// room for this one.
#define REC(off) Get R3; I64Const $1; I64Eq; Get F16; I64ReinterpretF64; I32WrapI64; I32Const $1; I32And; I32And; If; Get R15; I64Const $8; I64ShrU; Tee R10; I64Eqz; I32Eqz; Get R10; Get F18; I64ReinterpretF64; I64LeU; I32And; If; Get F17; I64ReinterpretF64; Get R10; I64Const $4; I64Shl; I64Add; I64Const $16; I64Sub; I32WrapI64; Get R0; I64Load b_base+0(FP); I64Sub; I32WrapI64; I32Store off; End; End

// PUSH opens a container at the next level: obj is 1 for an object.
#define PUSH(obj) Get R3; I64Const $60; I64GeU; If; BAIL; End; Get F16; I64ReinterpretF64; I64Const $1; Get R3; I64Shl; I64Const $-1; I64Xor; I64And; I64Const obj; Get R3; I64Shl; I64Or; F64ReinterpretI64; Set F16; Get R3; I64Const $1; I64Add; Set R3

// func valueWords(b []byte, i int, ltOn uint64, out []uint32) (j int, flags uint64)
TEXT ·valueWords(SB), NOSPLIT, $0-80
	I64Load b_base+0(FP)
	I64Load i+24(FP)
	I64Add
	Set R0
	I64Load b_base+0(FP)
	I64Load b_len+8(FP)
	I64Add
	Set R1
	I64Load ltOn+32(FP)
	Set R14
	I64Const $0
	Set R15
	I64Const $0
	Set R3
	I64Const $0
	F64ReinterpretI64
	Set F16
	I64Load out_base+40(FP)
	F64ReinterpretI64
	Set F17
	I64Load out_len+48(FP)
	I64Const $2
	I64ShrU
	F64ReinterpretI64
	Set F18
	// A value starts at R0: no whitespace first, as in Value.
	LOADB
	Get R4
	I64Const $32
	I64LeU
	If
		FAIL
	End
	I64Const VALUE
	Set R13

	Loop
		// A string, the commonest state: R0 at its opening quote.
		Get R13
		I64Const STRING
		I64Eq
		If
			ADV($1)
			I64Const $0
			Set R2
			Block // the closing quote
			Loop // the string's bytes
			Block // an escape at R0
			Get R0
			I64Const $8
			I64Add
			Get R1
			I64LeU
			If
				// A whole word, settled with masks (scanWords in words.go).
				Get R0
				I32WrapI64
				I64Load $0
				Set R4
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
				Get R14
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
					ADV($8)
					Br $3 // the next word
				End
				Get R5
				NOTMSB
				Set R5
				Get R6
				NOTMSB
				Set R6
				Get R8
				NOTMSB
				Set R8
				// Escaped bytes, and the next word's carry in R11.
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
					Get R11
					Get R6
					Get R2
					I64Or
					I64Xor
					I64Const MSB
					I64And
					Set R12
					Get R11
					Get R6
					I64And
					I64Const $63
					I64ShrU
					I64Const $7
					I64Shl
					Set R11
				End
				// Events: a quote or '<' not escaped, an escaped byte
				// other than a quote, backslash, 'n' or 't'.
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
				Get R7
				NOTMSB
				Tee R7
				I64Or
				I64Eqz
				If
					Get R11
					Set R2
					ADV($8)
					Br $3 // the next word
				End
				// The first event; a control byte before it is invalid.
				Get R9
				I64Const $0
				Get R9
				I64Sub
				I64And
				Set R9
				Get R7
				Get R9
				I64Const $1
				I64Sub
				I64And
				I64Eqz
				I32Eqz
				If
					FAIL
				End
				Get R9
				I64Eqz
				If
					FAIL // a control byte and no event
				End
				// R10 = the event's address.
				Get R0
				Get R9
				I64Ctz
				I64Const $3
				I64ShrU
				I64Add
				Set R10
				Get R9
				Get R12
				I64And
				I64Eqz
				I32Eqz
				If
					// An escaped byte: its backslash is just before it.
					Get R10
					I64Const $1
					I64Sub
					Set R0
					I64Const $0
					Set R2
					Br $2 // the escape
				End
				Get R10
				I32WrapI64
				I64Load8U $0
				I64Const $34
				I64Eq
				If
					Get R10
					I64Const $1
					I64Add
					Set R0
					Br $4 // the closing quote
				End
				// '<': a tag when "**" follows.
				Get R10
				I64Const $1
				I64Add
				Set R0
				I64Const $0
				Set R2
				STARS(R10)
				Br $2 // the next bytes
			End
			// Fewer than 8 bytes left: one byte at a time.
			Get R2
			I64Eqz
			I32Eqz
			If
				// The last word ended in a backslash escaping this byte.
				Get R0
				I64Const $1
				I64Sub
				Set R0
				I64Const $0
				Set R2
				Br $1 // the escape
			End
			LOADB
			Get R4
			I64Const $34
			I64Eq
			If
				ADV($1)
				Br $3 // the closing quote
			End
			Get R4
			I64Const $92
			I64Eq
			BrIf $0 // the escape
			Get R4
			I64Const $32
			I64LtU
			If
				FAIL
			End
			Get R4
			I64Const $60
			I64Eq
			Get R14
			I64Eqz
			I32Eqz
			I32And
			If
				STARS(R0)
			End
			ADV($1)
			Br $1 // the next bytes
			End // the escape at R0: a backslash
			Get R0
			I64Const $2
			I64Add
			Get R1
			I64GtU
			If
				FAIL
			End
			Get R0
			I32WrapI64
			I64Load8U $1
			Set R4
			// " \ / b f n r t
			Get R4
			I64Const $34
			I64Eq
			Get R4
			I64Const $92
			I64Eq
			I32Or
			Get R4
			I64Const $47
			I64Eq
			I32Or
			Get R4
			I64Const $98
			I64Eq
			I32Or
			Get R4
			I64Const $102
			I64Eq
			I32Or
			Get R4
			I64Const $110
			I64Eq
			I32Or
			Get R4
			I64Const $114
			I64Eq
			I32Or
			Get R4
			I64Const $116
			I64Eq
			I32Or
			If
				ADV($2)
				Br $1 // the next bytes
			End
			Get R4
			I64Const $117
			I64Ne
			If
				FAIL
			End
			Get R0
			I64Const $6
			I64Add
			Get R1
			I64GtU
			If
				FAIL
			End
			Get R0
			Set R10
			HEX($2)
			HEX($3)
			HEX($4)
			HEX($5)
			// \u003c or \u002a (either case): a tag may be held.
			Get R0
			I32WrapI64
			I64Load32U $2
			I64Const $0x20200000
			I64Or
			Set R4
			Get R4
			I64Const $0x63333030
			I64Eq
			Get R4
			I64Const $0x61323030
			I64Eq
			I32Or
			If
				TAG
			End
			ADV($6)
			Br $0 // the next bytes
			End // the string's bytes
			End // the closing quote: R0 past it
			// A key goes on to its colon, a value to what follows it.
			Get R15
			I64Const $2
			I64And
			I64Eqz
			If
				I64Const AFTER
				Set R13
			Else
				REC($4)
				I64Const COLON
				Set R13
			End
			Br $1
		End

		// After a value: the end, a comma, or a container's close.
		Get R13
		I64Const AFTER
		I64Eq
		If
			REC($12)
			Get R3
			I64Eqz
			If
				Get SP
				Get R0
				I64Load b_base+0(FP)
				I64Sub
				I64Store j+64(FP)
				Get SP
				Get R15
				I64Const $-3
				I64And
				I64Store flags+72(FP)
				RET
			End
			SKIPWS
			// R9 = 1 when the innermost container is an object.
			Get F16
			I64ReinterpretF64
			Get R3
			I64Const $1
			I64Sub
			I64ShrU
			I64Const $1
			I64And
			Set R9
			Get R4
			I64Const $44
			I64Eq
			If
				ADV($1)
				Get R9
				I64Eqz
				If
					I64Const VALUE
					Set R13
				Else
					I64Const KEY
					Set R13
				End
				Br $2
			End
			// '}' closes an object, ']' an array: '}' is 125, ']' 93.
			Get R4
			I64Const $93
			Get R9
			I64Const $32
			I64Mul
			I64Add
			I64Ne
			If
				FAIL
			End
			ADV($1)
			POP
			Br $1
		End

		// A value.
		Get R13
		I64Const VALUE
		I64Eq
		If
			SKIPWS
			REC($8)
			Get R4
			I64Const $34
			I64Eq
			If
				Get R15
				I64Const $-3
				I64And
				Set R15
				I64Const STRING
				Set R13
				Br $2
			End
			Get R4
			I64Const $123
			I64Eq
			If
				PUSH($1)
				ADV($1)
				SKIPWS
				Get R4
				I64Const $125
				I64Eq
				If
					ADV($1)
					POP
					I64Const AFTER
					Set R13
					Br $3
				End
				I64Const KEY
				Set R13
				Br $2
			End
			Get R4
			I64Const $91
			I64Eq
			If
				PUSH($0)
				ADV($1)
				SKIPWS
				Get R4
				I64Const $93
				I64Eq
				If
					ADV($1)
					POP
					I64Const AFTER
					Set R13
				End
				Br $2
			End
			I64Const AFTER
			Set R13
			// true, false, null: R10 = the bytes after the first four.
			Get R4
			I64Const $116
			I64Eq
			Get R4
			I64Const $110
			I64Eq
			I32Or
			Get R4
			I64Const $102
			I64Eq
			I32Or
			If
				Get R0
				I64Const $4
				I64Add
				Get R1
				I64GtU
				If
					FAIL
				End
				Get R0
				I32WrapI64
				I64Load32U $0
				Set R10
				Get R10
				I64Const $0x65757274 // "true"
				I64Eq
				Get R10
				I64Const $0x6c6c756e // "null"
				I64Eq
				I32Or
				If
					ADV($4)
					Br $3
				End
				Get R10
				I64Const $0x736c6166 // "fals"
				I64Ne
				If
					FAIL
				End
				ADV($4)
				LOADB
				Get R4
				I64Const $101 // 'e'
				I64Ne
				If
					FAIL
				End
				ADV($1)
				Br $2
			End
			// A number: -? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?
			Get R4
			I64Const $45
			I64Eq
			If
				ADV($1)
			End
			LOADB
			Get R4
			I64Const $48
			I64Eq
			If
				ADV($1)
			Else
				DIGITS
			End
			PEEKB
			Get R4
			I64Const $46
			I64Eq
			If
				ADV($1)
				DIGITS
			End
			PEEKB
			Get R4
			I64Const $32
			I64Or
			I64Const $101
			I64Eq
			If
				ADV($1)
				PEEKB
				Get R4
				I64Const $43
				I64Eq
				Get R4
				I64Const $45
				I64Eq
				I32Or
				If
					ADV($1)
				End
				DIGITS
			End
			Br $1
		End

		// A member's key: its opening quote.
		Get R13
		I64Const KEY
		I64Eq
		If
			SKIPWS
			Get R4
			I64Const $34
			I64Ne
			If
				FAIL
			End
			Get R15
			I64Const $2
			I64Or
			Set R15
			// A member of the value's own object: counted, its key noted.
			Get R3
			I64Const $1
			I64Eq
			If
				Get R15
				I64Const $256
				I64Add
				Set R15
			End
			REC($0)
			I64Const STRING
			Set R13
			Br $1
		End

		// COLON: between a key and its value.
		SKIPWS
		Get R4
		I64Const $58
		I64Ne
		If
			FAIL
		End
		ADV($1)
		I64Const VALUE
		Set R13
		Br $0
	End
	// Not reached: every state branches back or returns.
	FAIL
