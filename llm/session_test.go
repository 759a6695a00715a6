package llm

import (
	"net/http"
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
