package host

import (
	"net/http"
	"net/url"
	"testing"
)

// FuzzJobCreateBody: POST /api/sessions/{id}/jobs bodies and session ids
// are untrusted; each gets 201, 400 (naming the field), 409 (the
// per-session limit) or 413, with a JSON body, never a 5xx or a panic.
func FuzzJobCreateBody(f *testing.F) {
	fx := newFixture(f)
	for _, s := range []string{
		`{"schedule":"5m","text":"x"}`,
		`{"kind":"cron","schedule":"0 9 * * 1-5","tz":"Europe/Paris","text":"standup","target":"isolated"}`,
		`{"schedule":"2030-01-01T00:00:00Z","text":"later","name":"n"}`,
		`{"schedule":"0 9 * *","text":"x"}`,
		`{"schedule":"5m","text":"x","tz":"../../etc/passwd"}`,
		`{"schedule":"5m"}`, `{"schedule":7,"text":"x"}`, `{"extra":1}`, `[]`, `{}`, ``, `null`,
	} {
		f.Add("sess", []byte(s))
		f.Add("a/../b", []byte(s))
	}
	f.Fuzz(func(t *testing.T, session string, body []byte) {
		if session == "" {
			session = "s"
		}
		fuzzCall(t, fx, http.MethodPost, "/api/sessions/"+url.PathEscape(session)+"/jobs", body,
			http.StatusCreated, http.StatusBadRequest, http.StatusConflict, http.StatusRequestEntityTooLarge,
			http.StatusNotFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect)
	})
}
