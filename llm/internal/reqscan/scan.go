// Package reqscan is a small allocation-free JSON scanner for request
// bodies (docs/protocols.md "Body edits"). It validates a document once and then
// walks it by byte offsets, so that callers can splice edits into the
// original bytes instead of decoding and re-encoding the whole body.
//
// Offsets are always into the caller's slice. Walk functions assume the
// document already passed Valid; on malformed input they stop early
// rather than panic.
package reqscan

import "bytes"

// MaxDepth is the deepest nesting Valid accepts, matching encoding/json.
const MaxDepth = 10000

// strStop marks the bytes that end a fast run inside a JSON string.
var strStop = func() (t [256]bool) {
	for c := 0; c < 0x20; c++ {
		t[c] = true
	}
	t['"'] = true
	t['\\'] = true
	return t
}()

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipSpace returns the index of the first non-whitespace byte at or after i.
func SkipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// Valid reports whether b holds exactly one RFC 8259 JSON value, with
// optional surrounding whitespace. Like encoding/json it does not check
// UTF-8 validity and rejects nesting deeper than MaxDepth.
func Valid(b []byte) bool {
	v := Checker{b: b}
	i := v.Value(SkipSpace(b, 0), 0)
	return i >= 0 && SkipSpace(b, i) == len(b)
}

// Checker validates parts of one document and notes, on the way, whether
// any string in them may hold a directive tag (TagHint). Its methods are
// the validating walk: CheckMembers, CheckValue and Valid use it too.
//
// The validator is written for Go's wasm backend, where the filter runs:
// one loop with an explicit container stack instead of a recursive call
// per value, and strings scanned 8 bytes at a time with the stop byte
// found by counting trailing zeros rather than byte by byte.
type Checker struct {
	b   []byte
	tag bool
}

// NewChecker returns a Checker over b.
func NewChecker(b []byte) *Checker { return &Checker{b: b} }

// TagHint reports whether a string the checker passed over may decode to
// text containing "<**": it holds "<**" literally, or a \u escape of '<'
// or '*'. It is false only when no such string was seen, so a caller may
// skip looking for tags then; when true, the caller looks.
func (v *Checker) TagHint() bool { return v.tag }

// SetTagHint sets the hint and returns the one it replaces: a caller that
// wants to know whether one value holds a tag clears it before checking
// the value and merges the two after.
func (v *Checker) SetTagHint(tag bool) (was bool) {
	was, v.tag = v.tag, tag
	return was
}

// Members is CheckMembers on the checker's document. It is walkMembers
// written out with direct calls: under wasm an indirect call through a
// method value costs more than the short key it scans.
func (v *Checker) Members(i int, fn func(key []byte, vs int) (ve int)) int {
	b := v.b
	if i >= len(b) || b[i] != '{' {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for i < len(b) && b[i] == '"' {
		ke := v.str(b, i)
		if ke < 0 {
			return -1
		}
		key := b[i+1 : ke-1]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		ve := fn(key, skipSpace(b, i+1))
		if ve < 0 {
			return -1
		}
		i = skipSpace(b, ve)
		if i >= len(b) {
			return -1
		}
		if b[i] == '}' {
			return i + 1
		}
		if b[i] != ',' {
			return -1
		}
		i = skipSpace(b, i+1)
	}
	return -1
}

// Value validates the value at i, nested depth levels deep, and returns
// the index after it, or -1.
func (v *Checker) Value(i, depth int) int {
	if valueAsm && maskScanner && depth < MaxDepth-64 && uint(i) < uint(len(v.b)) {
		ltOn := uint64(msb)
		if v.tag {
			ltOn = 0
		}
		j, flags := valueWords(v.b, i, ltOn, nil)
		if flags&valueBailed == 0 {
			if flags&valueTag != 0 {
				v.tag = true
			}
			return j
		}
	}
	b := v.b
	n := len(b)
	// The open containers, innermost last: bit l of stack is 1 for an
	// object at level l < 64; deeper levels spill into deep.
	var stack uint64
	var deep []bool
	level := 0
	for {
		if uint(i) >= uint(n) { // past the end, or -1 from a key
			return -1
		}
		switch c := b[i]; c {
		case '"':
			i = v.str(b, i)
		case '{', '[':
			if depth+level >= MaxDepth {
				return -1
			}
			obj := c == '{'
			if level < 64 {
				if obj {
					stack |= 1 << level
				} else {
					stack &^= 1 << level
				}
			} else {
				deep = append(deep, obj)
			}
			level++
			i = skipSpace(b, i+1)
			if i < n && b[i] == c+2 { // '}' and ']' are two past '{' and '['
				i++
				level--
				if level >= 64 {
					deep = deep[:len(deep)-1]
				}
				break
			}
			if obj {
				i = v.key(i)
			}
			continue
		case 't':
			i = literal(b, i, "true")
		case 'f':
			i = literal(b, i, "false")
		case 'n':
			i = literal(b, i, "null")
		default:
			if c != '-' && !isDigit(c) {
				return -1
			}
			i = number(b, i)
		}
		// After a value: close what ends here, then expect the next one.
		for {
			if i < 0 {
				return -1
			}
			if level == 0 {
				return i
			}
			i = skipSpace(b, i)
			if i >= n {
				return -1
			}
			var obj bool
			if level <= 64 {
				obj = stack&(1<<(level-1)) != 0
			} else {
				obj = deep[len(deep)-1]
			}
			c := b[i]
			if c == ',' {
				i = skipSpace(b, i+1)
				if obj {
					i = v.key(i)
				}
				break
			}
			if obj && c != '}' || !obj && c != ']' {
				return -1
			}
			i++
			level--
			if level >= 64 {
				deep = deep[:len(deep)-1]
			}
		}
		if i < 0 {
			return -1
		}
	}
}

// skipSpace is SkipSpace with the common case, no space, inline.
func skipSpace(b []byte, i int) int {
	if i < len(b) && b[i] > ' ' {
		return i
	}
	return SkipSpace(b, i)
}

// key validates `"name" :` at i and returns where the value starts, or -1.
func (v *Checker) key(i int) int {
	b := v.b
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = v.str(b, i); i < 0 {
		return -1
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipSpace(b, i+1)
}

func literal(b []byte, i int, lit string) int {
	if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
		return i + len(lit)
	}
	return -1
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func number(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	if i >= len(b) || !isDigit(b[i]) {
		return -1
	}
	if b[i] == '0' {
		i++
	} else {
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return -1
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i
}

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// StringEnd returns the index just after the string that starts at
// b[i]=='"', or -1. It uses IndexByte, so long strings scan fast.
func StringEnd(b []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return -1
		}
		i += j
		bs := 0
		for k := i - 1; k >= 0 && b[k] == '\\'; k-- {
			bs++
		}
		i++
		if bs%2 == 0 {
			return i
		}
	}
}

// SkipValue returns the index just after the value at b[i] (which must not
// be whitespace), or -1 if it is malformed or truncated.
func SkipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return StringEnd(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				if i = StringEnd(b, i); i < 0 {
					return -1
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return -1
	}
	// number or literal: runs until a delimiter.
	j := i
	for j < len(b) {
		c := b[j]
		if c == ',' || c == '}' || c == ']' || isSpace(c) {
			break
		}
		j++
	}
	if j == i {
		return -1
	}
	return j
}

// Members calls fn for each member of the object at b[i]=='{' with the raw
// key bytes (inside the quotes, still escaped) and the value span
// [vs, ve). fn returns false to stop. Members returns the index just after
// the object, or -1 if it stopped early or the object is malformed.
func Members(b []byte, i int, fn func(key []byte, vs, ve int) bool) int {
	return WalkMembers(b, i, func(key []byte, vs int) int {
		ve := SkipValue(b, vs)
		if ve < 0 || !fn(key, vs, ve) {
			return -1
		}
		return ve
	})
}

// WalkMembers is Members for callers that read a value while passing over
// it: fn gets the value's start and returns its end, or -1 to stop. This
// saves a second pass over large values.
func WalkMembers(b []byte, i int, fn func(key []byte, vs int) (ve int)) int {
	return walkMembers(b, i, StringEnd, fn)
}

// CheckMembers is WalkMembers that also validates the keys. Together with
// CheckElements and CheckValue it lets a caller validate a document and
// index it in one pass; fn must pass over values with CheckValue.
func CheckMembers(b []byte, i int, fn func(key []byte, vs int) (ve int)) int {
	return NewChecker(b).Members(i, fn)
}

// CheckValue validates the value at b[i], nested depth levels deep, and
// returns the index after it, or -1.
func CheckValue(b []byte, i, depth int) int {
	return NewChecker(b).Value(i, depth)
}

func walkMembers(b []byte, i int, strEnd func([]byte, int) int, fn func(key []byte, vs int) (ve int)) int {
	if i >= len(b) || b[i] != '{' {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for i < len(b) && b[i] == '"' {
		ke := strEnd(b, i)
		if ke < 0 {
			return -1
		}
		key := b[i+1 : ke-1]
		i = skipSpace(b, ke)
		if i >= len(b) || b[i] != ':' {
			return -1
		}
		ve := fn(key, skipSpace(b, i+1))
		if ve < 0 {
			return -1
		}
		i = skipSpace(b, ve)
		if i >= len(b) {
			return -1
		}
		if b[i] == '}' {
			return i + 1
		}
		if b[i] != ',' {
			return -1
		}
		i = skipSpace(b, i+1)
	}
	return -1
}

// Elements calls fn for each element span [vs, ve) of the array at
// b[i]=='['. It returns like Members.
func Elements(b []byte, i int, fn func(vs, ve int) bool) int {
	return WalkElements(b, i, func(vs int) int {
		ve := SkipValue(b, vs)
		if ve < 0 || !fn(vs, ve) {
			return -1
		}
		return ve
	})
}

// WalkElements is Elements with WalkMembers' contract for fn. It checks
// the array's own syntax, so with CheckValue it validates too.
func WalkElements(b []byte, i int, fn func(vs int) (ve int)) int {
	if i >= len(b) || b[i] != '[' {
		return -1
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == ']' {
		return i + 1
	}
	for i < len(b) {
		ve := fn(i)
		if ve < 0 {
			return -1
		}
		i = skipSpace(b, ve)
		if i >= len(b) {
			return -1
		}
		if b[i] == ']' {
			return i + 1
		}
		if b[i] != ',' {
			return -1
		}
		i = skipSpace(b, i+1)
	}
	return -1
}

// KeyIs reports whether the raw (still escaped) key equals name, which
// holds no quote or backslash.
func KeyIs(key []byte, name string) bool {
	// An escape is longer than the character it stands for, so a key no
	// longer than name equals it only byte for byte; most keys are
	// settled here without looking for a backslash.
	if len(key) <= len(name) {
		return string(key) == name
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return false
	}
	s, ok := unescape(key)
	return ok && s == name
}

// Member returns the value span of the last member named name in the
// object at b[i], or (-1, -1). The last one wins, as in encoding/json and
// most provider stacks, so an edit applies to the value the provider reads.
func Member(b []byte, i int, name string) (vs, ve int) {
	vs, ve = -1, -1
	Members(b, i, func(key []byte, s, e int) bool {
		if KeyIs(key, name) {
			vs, ve = s, e
		}
		return true
	})
	return vs, ve
}
