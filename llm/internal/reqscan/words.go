package reqscan

// scanWords scans a string's bytes from b[i], 8 at a time, settling every
// quote, backslash, control byte and (when ltOn is msb) '<' of a word with
// bit operations; carry is 1 when b[i] is escaped. It is Go on most
// architectures (words_other.go) and assembly under wasm (words_wasm.s).
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

// wordsDone is scanWords' next when j is final.
const wordsDone = 2
