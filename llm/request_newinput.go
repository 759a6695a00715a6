package llm

import (
	"bytes"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// New input and user turns (docs/directives.md).
//
// Clients resend the whole conversation on every request, so a directive
// typed once is in every later body. Directives are therefore read only
// from the input that is new in this request: the user messages after the
// last item the model produced.
//
// What the model produced (the boundary):
//   - Chat, Messages: a message with role "assistant". In Messages an
//     assistant message that is the very last one is a prefill the client
//     wrote, not a model turn, so it is not a boundary.
//   - Responses: a "message" item (or an item without "type") with role
//     "assistant", and every other item type except tool outputs (types
//     ending in "_output", and "mcp_approval_response"): function_call,
//     reasoning, web_search_call, item_reference, and any unknown type, so
//     that an unknown item never makes old user text look new.
//
// Tool results (Chat role:tool, Messages tool_result blocks, Responses
// *_output items), system and developer messages are never user text, so
// they neither carry directives nor end the new input.
//
// A user turn is a user message (Responses: user message item) whose
// content is a string or holds at least one text part (Chat "text",
// Responses "input_text", Messages "text"). A Messages user message made
// only of tool_result (or image) blocks is not a turn: it answers the model
// inside the same turn. A Responses string input is one turn. Turns are
// counted over the body as the client sent it, so the count is the same
// every time a client resends the same history.

// FirstNewUserMessage returns the index in messages[] (Responses: input[])
// of the first user turn after the last item the model produced, or -1 when
// the request has no new user text, e.g. a tool round trip whose last user
// message holds only tool results. A Responses string input is index 0.
func (r *Request) FirstNewUserMessage() int {
	r.scan()
	return r.firstNew
}

// PreviousResponseID returns the Responses previous_response_id, or "".
// With it the provider keeps the history and the body holds only the new
// items, so user-turn positions count from that response (docs/directives.md).
func (r *Request) PreviousResponseID() string {
	if r.proto != Responses {
		return ""
	}
	return r.stringAt(r.prevResponse)
}

// newInputStart returns the index of the first message after the last
// model-produced one (0 when there is none).
func (r *Request) newInputStart() int {
	last := len(r.msgs) - 1
	if r.proto == Messages && last >= 0 && r.msgs[last].model {
		last-- // a trailing assistant message is the client's prefill
	}
	for i := last; i >= 0; i-- {
		if r.msgs[i].model {
			return i + 1
		}
	}
	return 0
}

// modelItemOf reports whether a list element whose "role" is or is not
// "assistant", with this "type" value (a span into the body, noSpan when
// absent), was produced by the model; see the rules above.
func (r *Request) modelItemOf(isAssistant bool, typ span) bool {
	if r.proto != Responses {
		return isAssistant
	}
	t := r.rawString(typ)
	if len(t) == 0 || string(t) == "message" {
		return isAssistant
	}
	return !bytes.HasSuffix(t, []byte("_output")) && string(t) != "mcp_approval_response"
}

// rawString returns the decoded JSON string at sp without allocating when
// it has no escapes, or nil if sp is absent or not a string.
func (r *Request) rawString(sp span) []byte {
	if !sp.ok() || r.body[sp.s] != '"' {
		return nil
	}
	raw := r.body[sp.s+1 : sp.e-1]
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw
	}
	s, _ := reqscan.Unquote(r.body[sp.s:sp.e])
	return []byte(s)
}

// userTurn reports whether a user message's content parts make it a user
// turn: a string content is one text part; see the rules above.
func userTurn(parts []part) bool {
	for i := range parts {
		if parts[i].text.ok() {
			return true
		}
	}
	return false
}

// userContentParts lists a user message's content parts into parts and
// reports whether the content is a string or an array (anything else is
// not user text).
func (r *Request) userContentParts(m message, textType string, parts []part) ([]part, bool) {
	switch r.body[m.content.s] {
	case '"':
		return append(parts, part{elem: m.content, text: m.content}), true
	case '[':
		reqscan.Elements(r.body, m.content.s, func(vs, ve int) bool {
			parts = append(parts, part{elem: span{vs, ve}, text: r.textOfPart(vs, textType)})
			return true
		})
		return parts, true
	}
	return parts, false
}
