package reqscan

import (
	"bytes"
	"unicode/utf16"
	"unicode/utf8"
)

// Unquote decodes the JSON string literal raw (quotes included). Lone
// surrogates become U+FFFD, as in encoding/json.
func Unquote(raw []byte) (string, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return "", false
	}
	return unescape(raw[1 : len(raw)-1])
}

func hexVal(c byte) rune {
	switch {
	case c >= '0' && c <= '9':
		return rune(c - '0')
	case c >= 'a' && c <= 'f':
		return rune(c - 'a' + 10)
	case c >= 'A' && c <= 'F':
		return rune(c - 'A' + 10)
	}
	return -1
}

func hex4(b []byte) rune {
	if len(b) < 4 {
		return -1
	}
	var r rune
	for _, c := range b[:4] {
		h := hexVal(c)
		if h < 0 {
			return -1
		}
		r = r<<4 | h
	}
	return r
}

// unescape decodes the inside of a JSON string literal.
func unescape(s []byte) (string, bool) {
	i := bytes.IndexByte(s, '\\')
	if i < 0 {
		return string(s), true
	}
	out := make([]byte, 0, len(s))
	out = append(out, s[:i]...)
	for i < len(s) {
		c := s[i]
		if c != '\\' {
			j := bytes.IndexByte(s[i:], '\\')
			if j < 0 {
				j = len(s) - i
			}
			out = append(out, s[i:i+j]...)
			i += j
			continue
		}
		if i+1 >= len(s) {
			return "", false
		}
		switch s[i+1] {
		case '"', '\\', '/':
			out = append(out, s[i+1])
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		case 'n':
			out = append(out, '\n')
		case 'r':
			out = append(out, '\r')
		case 't':
			out = append(out, '\t')
		case 'u':
			r := hex4(s[i+2:])
			if r < 0 {
				return "", false
			}
			i += 6
			if utf16.IsSurrogate(r) {
				r2 := rune(-1)
				if i+6 <= len(s) && s[i] == '\\' && s[i+1] == 'u' {
					r2 = hex4(s[i+2:])
				}
				if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
					r = d
					i += 6
				} else {
					r = utf8.RuneError
				}
			}
			out = utf8.AppendRune(out, r)
			continue
		default:
			return "", false
		}
		i += 2
	}
	return string(out), true
}

const hexDigits = "0123456789abcdef"

// AppendQuote appends s as a JSON string literal. It escapes only what
// JSON requires (quote, backslash, control characters) and copies all
// other bytes, invalid UTF-8 included, unchanged, so re-quoting decoded
// text changes as little as possible.
func AppendQuote(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		// Eight bytes at a time while none needs escaping (SWAR): a byte
		// loop costs several times as much in the wasm guest, which quotes
		// the time tag into every request.
		for i+8 <= len(s) && stops(load64s(s, i)) == 0 {
			i += 8
		}
		if i >= len(s) {
			break
		}
		c := s[i]
		if !strStop[c] {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// MayHoldTag reports whether the valid JSON string literal raw (quotes
// included) may decode to text containing "<**": it holds "<**"
// literally or a \u escape of '<' or '*' (TagHint for one string). It is
// false only when the text cannot hold a tag, and costs one scan with the
// string scanner, not a decode.
func MayHoldTag(raw []byte) bool {
	v := Checker{b: raw}
	v.str(raw, 0)
	return v.tag
}

// KeyName returns the decoded form of a raw object key, which is the key
// itself unless it holds escapes.
func KeyName(key []byte) []byte {
	if bytes.IndexByte(key, '\\') < 0 {
		return key
	}
	s, ok := unescape(key)
	if !ok {
		return key
	}
	return []byte(s)
}
