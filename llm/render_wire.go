package llm

import (
	"strconv"
	"unicode/utf8"
)

// wireBuf appends JSON fragments without reflection: the renderers run in the
// wasm filter, where encoding/json's allocations and reflection are costly.
type wireBuf []byte

func (b *wireBuf) raw(s string) { *b = append(*b, s...) }

func (b *wireBuf) rawBytes(s []byte) { *b = append(*b, s...) }

func (b *wireBuf) int(n int) { *b = strconv.AppendInt(*b, int64(n), 10) }

// str appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, so the output
// is always valid JSON whatever the input.
func (b *wireBuf) str(s string) {
	const hex = "0123456789abcdef"
	out := append(*b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' && c < utf8.RuneSelf {
			i++
			continue
		}
		if c < utf8.RuneSelf {
			out = append(out, s[start:i]...)
			switch c {
			case '"', '\\':
				out = append(out, '\\', c)
			case '\n':
				out = append(out, '\\', 'n')
			case '\r':
				out = append(out, '\\', 'r')
			case '\t':
				out = append(out, '\\', 't')
			default:
				out = append(out, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			out = append(out, s[start:i]...)
			out = append(out, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			out = append(out, s[start:i]...)
			out = append(out, `\u202`...)
			out = append(out, hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	out = append(out, s[start:]...)
	*b = append(out, '"')
}

// key appends `"k":` with a leading comma unless the object just opened.
func (b *wireBuf) key(k string) {
	if n := len(*b); n > 0 {
		if last := (*b)[n-1]; last != '{' && last != '[' {
			*b = append(*b, ',')
		}
	}
	*b = append(*b, '"')
	*b = append(*b, k...)
	*b = append(*b, '"', ':')
}

func (b *wireBuf) kstr(k, v string) { b.key(k); b.str(v) }

func (b *wireBuf) kint(k string, v int) { b.key(k); b.int(v) }

func (b *wireBuf) kraw(k, v string) { b.key(k); b.raw(v) }

// sseEvent appends one SSE event: an optional event line, one data line and
// the blank line. JSON from wireBuf never contains a raw newline.
func (b *wireBuf) sseEvent(name string, data []byte) {
	if name != "" {
		b.raw("event: ")
		b.raw(name)
		b.raw("\n")
	}
	b.raw("data: ")
	b.rawBytes(data)
	b.raw("\n\n")
}

// chunkText splits s into pieces of about n bytes, never inside a UTF-8
// sequence, so every delta is valid text on its own.
func chunkText(s string, n int) []string {
	if n <= 0 {
		n = 8
	}
	var out []string
	for len(s) > 0 {
		cut := min(n, len(s))
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}
