package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()

	if _, err := run(t, "healthcheck", srv.URL+"/healthz"); err != nil {
		t.Fatalf("healthy server: %v", err)
	}
	status = http.StatusServiceUnavailable
	if _, err := run(t, "healthcheck", srv.URL+"/healthz"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("503: got %v, want an error naming 503", err)
	}
	if _, err := run(t, "healthcheck", srv.URL+"/nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("404: got %v", err)
	}
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	if _, err := run(t, "healthcheck", "--timeout", "1s", closed.URL+"/healthz"); err == nil {
		t.Fatal("closed port: want an error")
	}
	for _, bad := range []string{"localhost:8787/healthz", "ftp://x/healthz", "http://"} {
		if _, err := run(t, "healthcheck", bad); err == nil || !strings.Contains(err.Error(), "not an http(s) URL") {
			t.Errorf("%q: got %v, want a URL error", bad, err)
		}
	}
	if _, err := run(t, "healthcheck"); err == nil {
		t.Error("no URL: want an error")
	}
}
