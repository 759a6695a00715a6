// Package llm owns the bytes of the three LLM wire protocols chime speaks
// (docs/protocols.md): OpenAI Chat Completions, OpenAI Responses and Anthropic
// Messages, in JSON and SSE framing. Both the wasm filter (GOOS=wasip1) and
// the host import it, so it must stay free of OS and network dependencies.
package llm

import "strings"

// Protocol identifies one of the supported wire protocols.
type Protocol int

const (
	// Unknown is any path chime does not handle; such requests pass through.
	Unknown   Protocol = iota
	Chat               // POST /v1/chat/completions
	Responses          // POST /v1/responses
	Messages           // POST /v1/messages
)

// String returns a short lower-case name ("chat", "responses", "messages").
func (p Protocol) String() string {
	switch p {
	case Chat:
		return "chat"
	case Responses:
		return "responses"
	case Messages:
		return "messages"
	}
	return "unknown"
}

// DetectProtocol resolves the protocol from a request path (docs/architecture.md#request-path).
// A query string is ignored (docs/protocols.md#session-identity: /v1/messages?beta=true).
func DetectProtocol(path string) Protocol {
	for i := 0; i < len(path); i++ {
		if path[i] == '?' || path[i] == '#' {
			path = path[:i]
			break
		}
	}
	if strings.IndexByte(path, '%') >= 0 {
		path = decodeUnreserved(path)
	}
	path = strings.TrimSuffix(path, "/")
	switch path {
	case "/v1/chat/completions":
		return Chat
	case "/v1/responses":
		return Responses
	case "/v1/messages":
		return Messages
	}
	return Unknown
}

// decodeUnreserved decodes the percent-encoded unreserved characters of a
// path (RFC 3986 §6.2.2.2: letters, digits, "-._~"), as an upstream
// normalizes them: /%76%31/chat/completions is /v1/chat/completions there,
// so it is one here too and cannot slip past the filter (docs/failures.md).
// Reserved ones such as %2F stay encoded: they are not a separator.
func decodeUnreserved(path string) string {
	var b strings.Builder
	for i := 0; i < len(path); i++ {
		if path[i] == '%' && i+2 < len(path) {
			if c, ok := unhex2(path[i+1], path[i+2]); ok && isUnreserved(c) {
				b.WriteByte(c)
				i += 2
				continue
			}
		}
		b.WriteByte(path[i])
	}
	return b.String()
}

func unhex2(hi, lo byte) (byte, bool) {
	h, ok1 := unhex(hi)
	l, ok2 := unhex(lo)
	return h<<4 | l, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}
