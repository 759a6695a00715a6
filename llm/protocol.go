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
	if i := strings.IndexAny(path, "?#"); i >= 0 {
		path = path[:i]
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
