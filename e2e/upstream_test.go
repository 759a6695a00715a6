package e2e

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// recorded is one request as a loopback server saw it.
type recorded struct {
	Method, Path string
	Header       http.Header
	Body         []byte
}

// recorder is a loopback HTTP server that records requests and answers with
// handler (or 200 "{}" when nil).
type recorder struct {
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []recorded
	handler http.HandlerFunc
}

func newRecorder(t testing.TB, handler http.HandlerFunc) *recorder {
	t.Helper()
	r := &recorder{handler: handler}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.reqs = append(r.reqs, recorded{req.Method, req.URL.RequestURI(), req.Header.Clone(), body})
		r.mu.Unlock()
		if r.handler != nil {
			r.handler(w, req)
			return
		}
		w.Header().Set("content-type", "application/json")
		_, _ = w.Write([]byte("{}"))
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *recorder) port() int { return r.srv.Listener.Addr().(*net.TCPAddr).Port }

func (r *recorder) requests() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.reqs...)
}
