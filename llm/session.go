package llm

import (
	"slices"
	"strings"

	"github.com/chimehq/chime/llm/internal/reqscan"
	"github.com/tidwall/gjson"
)

// HeaderGetter reads a request header by name (lower-case names are
// passed). net/http's Header satisfies it.
type HeaderGetter interface {
	Get(name string) string
}

// HeaderFunc adapts a lookup function, such as the wasm filter's header
// map accessor, to HeaderGetter.
type HeaderFunc func(name string) string

// Get calls f(name).
func (f HeaderFunc) Get(name string) string { return f(name) }

// sessionHeaders are the headers SessionID consults, in priority order
// (docs/protocols.md#session-identity).
var sessionHeaders = []string{
	"x-chime-session",
	"session_id", "session-id", "x-session-id",
	"conversation_id", "x-conversation-id",
	"x-claude-code-session-id", "thread-id",
}

// SessionHeaders returns the headers SessionID consults, in priority
// order (a copy).
func SessionHeaders() []string { return slices.Clone(sessionHeaders) }

// SessionID resolves the session id as docs/protocols.md#session-identity orders it: the headers of
// SessionHeaders, then the body's metadata.user_id, then its
// prompt_cache_key. It returns "" when there is none. The id is returned
// as sent (trimmed); the host sanitizes it before using it as a key.
// h may be nil.
func (r *Request) SessionID(h HeaderGetter) string {
	if h != nil {
		for _, name := range sessionHeaders {
			if v := strings.TrimSpace(h.Get(name)); v != "" {
				return v
			}
		}
	}
	if r.metadata.ok() && r.body[r.metadata.s] == '{' {
		if vs, ve := reqscan.Member(r.body, r.metadata.s, "user_id"); vs >= 0 {
			if id := SessionFromUserID(r.stringAt(span{vs, ve})); id != "" {
				return id
			}
		}
	}
	return strings.TrimSpace(r.stringAt(r.promptCacheKey))
}

// SessionFromUserID extracts a session id from a metadata.user_id value
// (docs/protocols.md#session-identity): either a JSON-encoded object with a string "session_id"
// field, as current agent CLIs send, or a string containing
// `session_<id>`, where id runs over [A-Za-z0-9._-]. It returns "" if
// neither is present.
func SessionFromUserID(userID string) string {
	s := strings.TrimSpace(userID)
	if strings.HasPrefix(s, "{") {
		if !gjson.Valid(s) {
			return ""
		}
		v := gjson.Get(s, "session_id")
		if v.Type != gjson.String {
			return ""
		}
		return strings.TrimSpace(v.Str)
	}
	const marker = "session_"
	for end := len(s); end > 0; {
		i := strings.LastIndex(s[:end], marker)
		if i < 0 {
			return ""
		}
		if i == 0 || !isIDByte(s[i-1]) || s[i-1] == '_' || s[i-1] == '-' || s[i-1] == '.' {
			j := i + len(marker)
			k := j
			for k < len(s) && isIDByte(s[k]) {
				k++
			}
			if k > j {
				return s[j:k]
			}
		}
		end = i
	}
	return ""
}

func isIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-'
}
