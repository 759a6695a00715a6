package llm

import (
	"net/http"
	"strings"
	"testing"
)

func TestSessionIDHeaderOrder(t *testing.T) {
	r := parse(t, Messages, `{"messages":[],"metadata":{"user_id":"{\"session_id\":\"from-body\"}"},"prompt_cache_key":"pck"}`)
	h := http.Header{}
	for _, name := range SessionHeaders() {
		h.Set(name, "v-"+name)
	}
	// Removing the winning header each time reveals the next in order.
	for _, name := range SessionHeaders() {
		if got := r.SessionID(h); got != "v-"+name {
			t.Fatalf("got %q, want header %s", got, name)
		}
		h.Del(name)
	}
	if got := r.SessionID(h); got != "from-body" {
		t.Errorf("got %q after headers", got)
	}
	h.Set("x-chime-session", "   ")
	if got := r.SessionID(h); got != "from-body" {
		t.Errorf("blank header used: %q", got)
	}
	if got := r.SessionID(HeaderFunc(func(name string) string {
		if name == "thread-id" {
			return "th-1"
		}
		return ""
	})); got != "th-1" {
		t.Errorf("HeaderFunc: %q", got)
	}
}

func TestSessionIDFromBody(t *testing.T) {
	tests := []struct{ body, want string }{
		{`{"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"s-json\"}"}}`, "s-json"},
		{`{"metadata":{"user_id":"user_abc_account_1f2e_session_9b1c-77aa"}}`, "9b1c-77aa"},
		{`{"metadata":{"user_id":"session_only"}}`, "only"},
		{`{"metadata":{"user_id":"{\"device_id\":\"d\"}"},"prompt_cache_key":"pck"}`, "pck"},
		{`{"metadata":{"user_id":"{broken"},"prompt_cache_key":"pck"}`, "pck"},
		{`{"metadata":{"user_id":"mysession_x"},"prompt_cache_key":"pck"}`, "pck"},
		{`{"metadata":{"user_id":"user_session_"},"prompt_cache_key":"pck"}`, "pck"},
		{`{"metadata":{"user_id":7},"prompt_cache_key":"pck"}`, "pck"},
		{`{"metadata":"x","prompt_cache_key":" pck "}`, "pck"},
		{`{"prompt_cache_key":5}`, ""},
		{`{}`, ""},
	}
	for _, tt := range tests {
		r := parse(t, Responses, tt.body)
		if got := r.SessionID(nil); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.body, got, tt.want)
		}
	}
}

// FuzzSessionFromUserID: metadata.user_id is client input (issue 17). The
// id found is trimmed, a substring of the input or of its session_id
// field, and a session_<id> match holds only id bytes.
func FuzzSessionFromUserID(f *testing.F) {
	for _, s := range []string{
		`{"session_id":"abc-123"}`, `{"session_id":7}`, `{"session_id":" x "}`, `{bad`,
		`user_1_account_2_session_0f3a.b-c`, `session_`, `xsession_abc`, `a_session_b_session_c`,
		"", " ", `{"session_id":"\u0000"}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, userID string) {
		id := SessionFromUserID(userID)
		if id == "" {
			return
		}
		if id != strings.TrimSpace(id) {
			t.Fatalf("untrimmed id %q from %q", id, userID)
		}
		if strings.HasPrefix(strings.TrimSpace(userID), "{") {
			return // a JSON string may be escaped in the input
		}
		if !strings.Contains(userID, "session_"+id) {
			t.Fatalf("id %q is not a session_<id> of %q", id, userID)
		}
		for i := 0; i < len(id); i++ {
			if !isIDByte(id[i]) {
				t.Fatalf("id %q has byte %q", id, id[i])
			}
		}
	})
}

// FuzzSessionID: any body with any user_id: no panic, and a header wins.
func FuzzSessionID(f *testing.F) {
	f.Add(`{"messages":[],"metadata":{"user_id":"{\"session_id\":\"s\"}"}}`, "")
	f.Add(`{"messages":[],"metadata":{"user_id":"u_session_abc"},"prompt_cache_key":"p"}`, "h")
	f.Add(`{"messages":[],"metadata":[]}`, "")
	f.Fuzz(func(t *testing.T, body, header string) {
		r, err := ParseRequest(Messages, []byte(body))
		if err != nil {
			return
		}
		h := http.Header{}
		if strings.TrimSpace(header) != "" {
			h.Set(SessionHeaders()[0], header)
			if got := r.SessionID(h); got != strings.TrimSpace(header) {
				t.Fatalf("header %q lost to %q", header, got)
			}
		}
		_ = r.SessionID(nil)
	})
}
