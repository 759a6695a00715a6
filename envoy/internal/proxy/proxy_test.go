package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

func TestPassthroughHeadersAndCompletion(t *testing.T) {
	up := newUpstream(t, nil)
	var seen httpfilter.Headers
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				seen = append(httpfilter.Headers(nil), *h...)
				h.Add("x-added-by-filter", "yes")
				return httpfilter.HeadersContinue
			}
		},
	}})
	req, _ := http.NewRequest("GET", e.url+"/v1/models?x=1", nil)
	req.Host = "api.example"
	req.Header.Set("X-Custom", "v")
	req.Header["User-Agent"] = []string{""} // the client sends none
	resp, body := do(t, req)
	if resp.StatusCode != 200 || body != "upstream GET /v1/models" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("Server") != "envoy" || resp.Header.Get("X-Envoy-Upstream-Service-Time") == "" {
		t.Errorf("response headers: %v", resp.Header)
	}
	wantPseudo := []string{":authority", ":path", ":method", ":scheme"}
	for i, k := range wantPseudo {
		if i >= len(seen) || seen[i].Key != k {
			t.Fatalf("pseudo-headers not first in order: %v", seen)
		}
	}
	if v, _ := seen.Get(":path"); v != "/v1/models?x=1" {
		t.Errorf(":path = %q", v)
	}
	if v, _ := seen.Get(":authority"); v != "api.example" {
		t.Errorf(":authority = %q", v)
	}
	r := up.last(t)
	if r.host != "api.example" || r.path != "/v1/models?x=1" {
		t.Errorf("upstream saw host %q path %q", r.host, r.path)
	}
	if r.header.Get("X-Custom") != "v" || r.header.Get("X-Added-By-Filter") != "yes" {
		t.Errorf("upstream headers: %v", r.header)
	}
	if r.header.Get("X-Request-Id") == "" || r.header.Get("X-Forwarded-Proto") != "http" {
		t.Errorf("x-request-id / x-forwarded-proto missing: %v", r.header)
	}
	if v := r.header.Get("X-Envoy-Expected-Rq-Timeout-Ms"); v != "15000" { // the default route timeout
		t.Errorf("x-envoy-expected-rq-timeout-ms = %q", v)
	}
	if ua := r.header.Get("User-Agent"); strings.HasPrefix(ua, "Go-http-client") {
		t.Errorf("proxy invented a user agent: %q", ua)
	}
	ev := e.rec.events()
	want := []string{"f0:dh end=true", "f0:eh 200 end=false"}
	for i, w := range want {
		if i >= len(ev) || ev[i] != w {
			t.Fatalf("events %v, want prefix %v", ev, want)
		}
	}
}

func TestHeadersStopAllResumedFromAnotherGoroutine(t *testing.T) {
	up := newUpstream(t, nil)
	release := make(chan struct{})
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				go func() {
					<-release
					h.Set("x-from-async", "1") // safe: the stream is paused on us
					f.cb.ContinueDecoding()
				}()
				return httpfilter.HeadersStopAll
			}
		},
		nil, // second filter must not see anything before the first continues
	}})
	result := make(chan string, 1)
	go func() {
		_, body := post(t, e.url+"/p", "hello body")
		result <- body
	}()
	time.Sleep(150 * time.Millisecond) // real time: the proxy has no injected clock; a leaked request would reach upstream by now
	if n := up.hits.Load(); n != 0 {
		t.Fatalf("upstream hit %d times while the filter held the headers", n)
	}
	for _, ev := range e.rec.events() {
		if strings.HasPrefix(ev, "f1:") || strings.HasPrefix(ev, "f0:dd") {
			t.Fatalf("event %q delivered during StopAll: %v", ev, e.rec.events())
		}
	}
	close(release)
	select {
	case body := <-result:
		if body != "upstream POST /p" {
			t.Fatalf("body %q", body)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("request never completed after ContinueDecoding")
	}
	r := up.last(t)
	if string(r.body) != "hello body" || r.header.Get("X-From-Async") != "1" {
		t.Fatalf("upstream got body %q headers %v", r.body, r.header)
	}
	// After continue, the held body reaches the stopped filter itself, and
	// the next filter sees headers without end_stream.
	if !e.rec.has("f0:dd 10 end=true") || !e.rec.has("f1:dh end=false") || !e.rec.has("f1:dd 10 end=true") {
		t.Fatalf("events %v", e.rec.events())
	}
}

func TestDataStopAndBufferSeesWholeBodyAndReplacesIt(t *testing.T) {
	up := newUpstream(t, nil)
	var sizes []int
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				h.Del("content-length")
				return httpfilter.HeadersContinue
			}
			f.decodeData = func(f *fakeFilter, b *httpfilter.Buffer, end bool) httpfilter.DataStatus {
				sizes = append(sizes, len(b.Bytes))
				if !end {
					return httpfilter.DataStopAndBuffer
				}
				b.Bytes = append([]byte("REPLACED:"), bytes.ToUpper(b.Bytes)...)
				return httpfilter.DataContinue
			}
		},
	}})
	// Send the body in separate chunks so the filter is called repeatedly.
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 4; i++ {
			pw.Write(bytes.Repeat([]byte{'a' + byte(i)}, 1000))
			time.Sleep(30 * time.Millisecond) // real pacing: separate chunks reach the filter as separate calls
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", e.url+"/buf", pr)
	resp, _ := do(t, req)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if len(sizes) < 2 {
		t.Fatalf("filter called %d times; want several (sizes %v)", len(sizes), sizes)
	}
	for i := 1; i < len(sizes); i++ {
		if sizes[i] < sizes[i-1] {
			t.Fatalf("buffer shrank between calls: %v", sizes)
		}
	}
	if sizes[len(sizes)-1] != 4000 {
		t.Fatalf("last call saw %d bytes, want the whole 4000 (sizes %v)", sizes[len(sizes)-1], sizes)
	}
	got := up.last(t).body
	want := "REPLACED:" + strings.Repeat("A", 1000) + strings.Repeat("B", 1000) + strings.Repeat("C", 1000) + strings.Repeat("D", 1000)
	if string(got) != want {
		t.Fatalf("upstream body %d bytes, want the replaced body (%d)", len(got), len(want))
	}
}

func bufferAll(f *fakeFilter, b *httpfilter.Buffer, end bool) httpfilter.DataStatus {
	if !end {
		return httpfilter.DataStopAndBuffer
	}
	return httpfilter.DataContinue
}

func TestRequestOverBufferLimitIs413ThroughEncoders(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{bufferLimit: 1024, upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeData = bufferAll
			f.encodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				h.Add("x-encoder-saw", "yes")
				return httpfilter.HeadersContinue
			}
		},
	}})
	pr, pw := io.Pipe()
	go func() {
		for i := 0; i < 8; i++ {
			if _, err := pw.Write(bytes.Repeat([]byte("x"), 512)); err != nil {
				return
			}
			time.Sleep(10 * time.Millisecond) // real pacing: separate chunks reach the filter as separate calls
		}
		pw.Close()
	}()
	req, _ := http.NewRequest("POST", e.url+"/big", pr)
	resp, body := do(t, req)
	if resp.StatusCode != 413 || body != "Payload Too Large" {
		t.Fatalf("got %d %q, want 413", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Encoder-Saw") != "yes" {
		t.Fatal("413 local reply did not pass through the encoder filter")
	}
}

func TestRequestUnderLimitPasses(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{bufferLimit: 1024, upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) { f.decodeData = bufferAll },
	}})
	resp, _ := post(t, e.url+"/small", strings.Repeat("x", 1000))
	if resp.StatusCode != 200 || len(up.last(t).body) != 1000 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func TestResponseOverLimitIs500BeforeHeadersSent(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		for i := 0; i < 8; i++ {
			w.Write(bytes.Repeat([]byte("r"), 512))
			w.(http.Flusher).Flush()
		}
	})
	e := start(t, setup{bufferLimit: 1024, idleTimeout: "5s", upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			// The outer encoder holds the headers from the client...
			f.encodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				return httpfilter.HeadersStopAll
			}
		},
		// ...while the inner one buffers the body past the limit.
		func(f *fakeFilter) { f.encodeData = bufferAll },
	}})
	resp, body := get(t, e.url+"/r")
	if resp.StatusCode != 500 || body != "Internal Server Error" {
		t.Fatalf("got %d %q, want 500", resp.StatusCode, body)
	}
}

func TestResponseOverLimitAfterHeadersSentResets(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		for i := 0; i < 8; i++ {
			w.Write(bytes.Repeat([]byte("r"), 512))
			w.(http.Flusher).Flush()
			time.Sleep(5 * time.Millisecond) // real pacing: the limit trips after headers went out
		}
	})
	e := start(t, setup{bufferLimit: 1024, upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) { f.encodeData = bufferAll },
	}})
	resp, err := http.Get(e.url + "/r")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d, want the upstream's 200 already sent", resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("read %d bytes cleanly; want a reset stream", len(b))
	}
}

func TestLocalReplyFromDecoderPassesEncoders(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) { // first in config order: last encoder
			f.encodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				h.Add("x-outer", "1")
				h.Del("content-length") // it changes the body below
				return httpfilter.HeadersContinue
			}
			f.encodeData = func(f *fakeFilter, b *httpfilter.Buffer, end bool) httpfilter.DataStatus {
				b.Bytes = append(b.Bytes, "+outer"...)
				return httpfilter.DataContinue
			}
		},
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				// Reply from another goroutine while paused, like an
				// http_call response arriving.
				go f.cb.SendLocalReply(403, []byte("denied"), httpfilter.Headers{{Key: "x-reason", Value: "test"}}, "filter_denied")
				return httpfilter.HeadersStopAll
			}
		},
	}})
	resp, body := get(t, e.url+"/x")
	if resp.StatusCode != 403 || body != "denied+outer" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Outer") != "1" || resp.Header.Get("X-Reason") != "test" || resp.Header.Get("Content-Type") != "text/plain" {
		t.Fatalf("headers %v", resp.Header)
	}
	if up.hits.Load() != 0 {
		t.Fatal("upstream was called")
	}
	// The replying filter's own encoder ran too (all encoders see it).
	if !e.rec.has("f1:eh 403 end=false") || !e.rec.has("f0:eh 403 end=false") {
		t.Fatalf("events %v", e.rec.events())
	}
	if i := f1Info(e); i.ResponseCode != 403 || i.ResponseDetails != "filter_denied" {
		t.Fatalf("stream info %+v", i)
	}
}

func f1Info(e *env) httpfilter.StreamInfo {
	fs := e.facs[1].filters()
	return *fs[len(fs)-1].cb.Info()
}

func TestLocalReplyDuringEncodeGoesDirect(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.encodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				h.Add("x-outer", "1")
				return httpfilter.HeadersContinue
			}
		},
		func(f *fakeFilter) {
			f.encodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				f.cb.SendLocalReply(502, []byte("bad upstream"), nil, "filter_rejected_response")
				return httpfilter.HeadersStopAll
			}
		},
	}})
	resp, body := get(t, e.url+"/x")
	if resp.StatusCode != 502 || body != "bad upstream" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if resp.Header.Get("X-Outer") != "" {
		t.Fatal("a local reply raised while encoding must bypass the encoder filters")
	}
}

func TestSSEIsLive(t *testing.T) {
	firstSeen := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "data: first\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-firstSeen: // the client must have the first event already
		case <-time.After(5 * time.Second):
		}
		fmt.Fprint(w, "data: second\n\n")
	})
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){nil}})
	resp, err := http.Get(e.url + "/sse")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	got := make(chan string, 1)
	go func() {
		line, _ := br.ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if line != "data: first\n" {
			t.Fatalf("first line %q", line)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("first SSE event did not arrive while the upstream was still streaming")
	}
	close(firstSeen)
	rest, _ := io.ReadAll(br)
	if string(rest) != "\ndata: second\n\n" {
		t.Fatalf("rest %q", rest)
	}
}

// TestHeadersLeaveBeforeTheBody: response headers written in one event go
// out when the stream waits for the next, not with the body that follows
// later (the client must see them while the upstream still thinks).
func TestHeadersLeaveBeforeTheBody(t *testing.T) {
	headersSeen := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		select {
		case <-headersSeen:
		case <-time.After(5 * time.Second):
		}
		fmt.Fprint(w, "{}")
	})
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){nil}})
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Get(e.url + "/slow")
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- resp
	}()
	select {
	case resp, ok := <-got:
		if !ok {
			return
		}
		defer resp.Body.Close()
		close(headersSeen)
		if b, _ := io.ReadAll(resp.Body); string(b) != "{}" {
			t.Fatalf("body %q", b)
		}
	case <-time.After(3 * time.Second):
		close(headersSeen)
		t.Fatal("the headers waited for the body")
	}
}

func TestRouteTimeoutIs504(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){nil},
		routes: `
              - match: { prefix: "/" }
                route: { cluster: a, timeout: 0.2s }`})
	t0 := time.Now()
	resp, body := get(t, e.url+"/slow")
	if resp.StatusCode != 504 || body != "upstream request timeout" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if time.Since(t0) > 4*time.Second {
		t.Fatal("timeout did not cut the request short")
	}
	if !e.rec.has("f0:eh 504 end=false") {
		t.Fatalf("504 did not pass the encoders: %v", e.rec.events())
	}
}

// The router tells the upstream the route timeout in
// x-envoy-expected-rq-timeout-ms, replacing one the client sent, and
// sends none when the route has no timeout, as Envoy's router does.
func TestExpectedTimeoutHeader(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, routes: `
              - match: { prefix: "/none" }
                route: { cluster: a, timeout: 0s }
              - match: { prefix: "/" }
                route: { cluster: a, timeout: 2.5s }`})
	for path, want := range map[string][]string{"/none": nil, "/timed": {"2500"}} {
		req, _ := http.NewRequest("GET", e.url+path, nil)
		req.Header.Set("X-Envoy-Expected-Rq-Timeout-Ms", "1")
		if resp, _ := do(t, req); resp.StatusCode != 200 {
			t.Fatalf("%s: status %d", path, resp.StatusCode)
		}
		if got := up.last(t).header.Values("X-Envoy-Expected-Rq-Timeout-Ms"); !slices.Equal(got, want) {
			t.Errorf("%s: upstream got x-envoy-expected-rq-timeout-ms %q, want %q", path, got, want)
		}
	}
}

// The connection manager drops the x-envoy control headers a client sends
// (no request is internal here), so only a filter can set the router's
// timeouts; the router reads and removes them and tells the upstream the
// result.
func TestEnvoyControlHeaders(t *testing.T) {
	up := newUpstream(t, nil)
	var seen httpfilter.Headers
	var set [][2]string // what the filter adds
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				seen = slices.Clone(*h)
				for _, kv := range set {
					h.Set(kv[0], kv[1])
				}
				return httpfilter.HeadersContinue
			}
		},
	}})
	send := func(clientHeaders ...string) recorded {
		t.Helper()
		req, _ := http.NewRequest("GET", e.url+"/", nil)
		for i := 0; i < len(clientHeaders); i += 2 {
			req.Header.Set(clientHeaders[i], clientHeaders[i+1])
		}
		if resp, _ := do(t, req); resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return up.last(t)
	}

	r := send("x-envoy-upstream-rq-timeout-ms", "50", "x-envoy-retry-on", "5xx", "x-envoy-internal", "true", "x-envoy-custom", "kept",
		"x-forwarded-client-cert", "By=spiffe://x")
	for _, k := range []string{"x-envoy-upstream-rq-timeout-ms", "x-envoy-retry-on", "x-envoy-internal", "x-forwarded-client-cert"} {
		if v, ok := seen.Get(k); ok {
			t.Errorf("the filter saw the client's %s: %q", k, v)
		}
	}
	if v, _ := seen.Get("x-envoy-custom"); v != "kept" {
		t.Errorf("x-envoy-custom = %q, want it kept", v)
	}
	if v := r.header.Get("X-Envoy-Expected-Rq-Timeout-Ms"); v != "15000" {
		t.Errorf("a client's timeout header set the expected timeout %q", v)
	}

	set = [][2]string{{"x-envoy-upstream-rq-timeout-ms", "3000"}}
	if r := send(); r.header.Get("X-Envoy-Expected-Rq-Timeout-Ms") != "3000" || r.header.Get("X-Envoy-Upstream-Rq-Timeout-Ms") != "" {
		t.Errorf("a filter's timeout: upstream headers %v", r.header)
	}
	set = [][2]string{{"x-envoy-upstream-rq-timeout-ms", "3000"}, {"x-envoy-upstream-rq-per-try-timeout-ms", "1000"}}
	if r := send(); r.header.Get("X-Envoy-Expected-Rq-Timeout-Ms") != "1000" || r.header.Get("X-Envoy-Upstream-Rq-Per-Try-Timeout-Ms") != "" {
		t.Errorf("a filter's per-try timeout: upstream headers %v", r.header)
	}
	set = [][2]string{{"x-envoy-upstream-rq-timeout-ms", "3000"}, {"x-envoy-upstream-rq-per-try-timeout-ms", "5000"}}
	if r := send(); r.header.Get("X-Envoy-Expected-Rq-Timeout-Ms") != "3000" {
		t.Errorf("a per-try timeout over the global one: upstream headers %v", r.header)
	}
}

// TE is kept as "te: trailers" when it names trailers, and dropped
// otherwise, as Envoy's connection manager sanitizes it; the other
// hop-by-hop headers never reach the filters.
func TestTEHeader(t *testing.T) {
	up := newUpstream(t, nil)
	var seen httpfilter.Headers
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				seen = slices.Clone(*h)
				return httpfilter.HeadersContinue
			}
		},
	}})
	for _, tc := range []struct {
		lines string
		want  []string
	}{
		{"TE: gzip, trailers\r\nTe: trailers\r\n", []string{"trailers"}},
		{"TE: gzip\r\n", nil},
		{"", nil},
	} {
		c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		req := "GET /x HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\n" + tc.lines + "X-After: 1\r\n\r\n"
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		if code, _ := readResponse(t, c); code != 200 {
			t.Fatalf("%q: status %d", tc.lines, code)
		}
		c.Close()
		var te []string
		for _, kv := range seen {
			switch kv.Key {
			case "te":
				te = append(te, kv.Value)
			case "connection", "keep-alive", "proxy-connection":
				t.Errorf("%q: the filter saw %s", tc.lines, kv.Key)
			}
		}
		if !slices.Equal(te, tc.want) {
			t.Errorf("%q: the filter saw te %q, want %q", tc.lines, te, tc.want)
		}
		if got := up.last(t).header.Values("Te"); !slices.Equal(got, tc.want) {
			t.Errorf("%q: the upstream got te %q, want %q", tc.lines, got, tc.want)
		}
	}
}

// A per-try timeout a filter sets ends the request as Envoy's router does
// when no retry is left.
func TestPerTryTimeout(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){nil,
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				h.Set("x-envoy-upstream-rq-per-try-timeout-ms", "200")
				return httpfilter.HeadersContinue
			}
		},
	}})
	resp, body := get(t, e.url+"/slow")
	if resp.StatusCode != 504 || body != "upstream request timeout" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if i := f1Info(e); i.ResponseDetails != "upstream_per_try_timeout" {
		t.Errorf("details %q", i.ResponseDetails)
	}
	if n := e.stats.Counter("cluster.a.upstream_rq_per_try_timeout", "").Value(); n != 1 {
		t.Errorf("upstream_rq_per_try_timeout = %d", n)
	}
}

func TestDirectResponseAndNoRoute(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){nil},
		routes: `
              - match: { path: "/health" }
                direct_response: { status: 200, body: { inline_string: "ok\n" } }
              - match: { prefix: "/api" }
                route: { cluster: a }`})
	resp, body := get(t, e.url+"/health?probe=1")
	if resp.StatusCode != 200 || body != "ok\n" {
		t.Fatalf("direct_response: %d %q", resp.StatusCode, body)
	}
	resp, _ = get(t, e.url+"/elsewhere")
	if resp.StatusCode != 404 {
		t.Fatalf("no route: %d", resp.StatusCode)
	}
	if up.hits.Load() != 0 {
		t.Fatal("upstream was called")
	}
	if !e.rec.has("f0:eh 200 end=false") || !e.rec.has("f0:eh 404 end=true") {
		t.Fatalf("local replies must pass the encoders: %v", e.rec.events())
	}
}

func TestHeaderMatchAndVirtualHosts(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { fmt.Fprint(w, "A") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { fmt.Fprint(w, "B") })
	e := start(t, setup{upstreams: map[string]string{"a": a.addr(), "b": b.addr()},
		routes: `
              - match:
                  prefix: "/"
                  headers: [{ name: x-pick, string_match: { exact: b } }]
                route: { cluster: b }
              - match: { prefix: "/" }
                route: { cluster: a }`,
		extraVhosts: `
            - name: only-b
              domains: ["b.example", "*.b.example"]
              routes:
              - match: { prefix: "/" }
                route: { cluster: b }`})
	cases := []struct {
		host, pick, want string
	}{
		{"x.example", "", "A"},
		{"x.example", "b", "B"},
		{"x.example", "c", "A"},
		{"b.example", "", "B"},
		{"api.b.example", "", "B"},
	}
	for _, c := range cases {
		req, _ := http.NewRequest("GET", e.url+"/", nil)
		req.Host = c.host
		if c.pick != "" {
			req.Header.Set("X-Pick", c.pick)
		}
		_, body := do(t, req)
		if body != c.want {
			t.Errorf("host %s x-pick %q: got %q want %q", c.host, c.pick, body, c.want)
		}
	}
}

func TestClearRouteCacheRematches(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { fmt.Fprint(w, "A") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { fmt.Fprint(w, "B") })
	routes := `
              - match: { prefix: "/b" }
                route: { cluster: b }
              - match: { prefix: "/" }
                route: { cluster: a }`
	for _, clear := range []bool{true, false} {
		e := start(t, setup{upstreams: map[string]string{"a": a.addr(), "b": b.addr()}, routes: routes, filters: []func(*fakeFilter){
			func(f *fakeFilter) {
				f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
					h.Set(":path", "/b/rewritten")
					if clear {
						f.cb.ClearRouteCache()
					}
					return httpfilter.HeadersContinue
				}
			},
		}})
		_, body := get(t, e.url+"/a")
		want := "A" // the route matched before the filter stays cached
		if clear {
			want = "B"
		}
		if body != want {
			t.Errorf("clear=%v: got %q want %q", clear, body, want)
		}
	}
}

func TestUpstreamConnectFailureIs503(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	e := start(t, setup{upstreams: map[string]string{"a": dead}, filters: []func(*fakeFilter){nil}})
	resp, body := get(t, e.url+"/")
	if resp.StatusCode != 503 || !strings.Contains(body, "reset reason: connection failure") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestClientDisconnectCancelsEverything(t *testing.T) {
	upstreamCancelled := make(chan struct{})
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		fmt.Fprint(w, "data: x\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(upstreamCancelled)
	})
	var filterCtx atomic.Value
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				filterCtx.Store(f.cb.Context())
				return httpfilter.HeadersContinue
			}
		},
	}})
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", e.url+"/sse", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	if line, _ := br.ReadString('\n'); line != "data: x\n" {
		t.Fatalf("line %q", line)
	}
	cancel()
	resp.Body.Close()
	select {
	case <-upstreamCancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("upstream request was not cancelled")
	}
	fctx := filterCtx.Load().(context.Context)
	select {
	case <-fctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("filter Context() not cancelled")
	}
	f := e.facs[0].filters()[0]
	select {
	case <-f.done:
	case <-time.After(5 * time.Second):
		t.Fatal("OnStreamComplete not called after disconnect")
	}
}

func TestResetStreamFromFilter(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				go f.cb.ResetStream()
				return httpfilter.HeadersStopAll
			}
		},
	}})
	resp, err := http.Get(e.url + "/")
	if err == nil {
		resp.Body.Close()
		t.Fatalf("got response %d; want a reset connection", resp.StatusCode)
	}
	if up.hits.Load() != 0 {
		t.Fatal("upstream was called")
	}
}

func TestEncoderStopAllHoldsResponseUntilContinue(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { fmt.Fprint(w, "payload") })
	release := make(chan struct{})
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.encodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				go func() {
					<-release
					h.Set("x-late", "1")
					f.cb.ContinueEncoding()
				}()
				return httpfilter.HeadersStopAll
			}
		},
	}})
	got := make(chan *http.Response, 1)
	go func() {
		resp, err := http.Get(e.url + "/")
		if err == nil {
			got <- resp
		}
	}()
	select {
	case <-got:
		t.Fatal("response headers reached the client during encoder StopAll")
	case <-time.After(150 * time.Millisecond):
	}
	close(release)
	resp := <-got
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "payload" || resp.Header.Get("X-Late") != "1" {
		t.Fatalf("body %q headers %v", b, resp.Header)
	}
	if !e.rec.has("f0:ed 7 end=true") {
		t.Fatalf("held body must reach the stopped filter: %v", e.rec.events())
	}
}

func TestTrailersPassThrough(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Trailer", "X-Up-Trailer")
		w.WriteHeader(200)
		fmt.Fprintf(w, "req-trailer=%s", r.Trailer.Get("X-Req-Trailer"))
		w.Header().Set("X-Up-Trailer", "done")
	})
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){nil}})
	pr, pw := io.Pipe()
	go func() { pw.Write([]byte("body")); pw.Close() }()
	req, _ := http.NewRequest("POST", e.url+"/t", pr)
	req.Trailer = http.Header{"X-Req-Trailer": {"rt"}}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "req-trailer=rt" || resp.Trailer.Get("X-Up-Trailer") != "done" {
		t.Fatalf("body %q trailers %v", b, resp.Trailer)
	}
	if !e.rec.has("f0:dt") || !e.rec.has("f0:et") {
		t.Fatalf("trailers not shown to the filter: %v", e.rec.events())
	}
}

func TestWorkersRoundRobinPerConnection(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{workers: 2, upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){nil}})
	for i := 0; i < 2; i++ {
		tr := &http.Transport{}
		get2 := func() {
			req, _ := http.NewRequest("GET", e.url+"/", nil)
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		get2()
		get2() // same connection: same worker
		tr.CloseIdleConnections()
	}
	fs := e.facs[0].filters()
	w := func(i int) int { return fs[i].cb.Info().Worker }
	if len(fs) != 4 || w(0) != w(1) || w(2) != w(3) || w(0) == w(2) {
		t.Fatalf("workers %d %d %d %d: want per-connection round robin", w(0), w(1), w(2), w(3))
	}
	c := func(i int) uint64 { return fs[i].cb.Info().ConnectionID }
	if c(0) == 0 || c(0) != c(1) || c(2) != c(3) || c(0) == c(2) {
		t.Fatalf("connection ids %d %d %d %d: want one per connection", c(0), c(1), c(2), c(3))
	}
}

func TestHTTPCaller(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if r.URL.Path == "/slow" {
			time.Sleep(time.Second) // real time under test: an upstream slower than the call's timeout
		}
		w.Header().Set("X-Echo", r.Header.Get("X-In"))
		w.WriteHeader(201)
		fmt.Fprintf(w, "%s %s %s", r.Method, r.Host, body)
	})
	e := start(t, setup{upstreams: map[string]string{"host": up.addr()}, routes: `
              - match: { prefix: "/" }
                direct_response: { status: 200 }`})
	hdr := httpfilter.Headers{{Key: ":method", Value: "POST"}, {Key: ":path", Value: "/prepare"}, {Key: ":authority", Value: "chime_host"}, {Key: "x-in", Value: "1"}}
	resp, err := e.clusters.Call(context.Background(), "host", hdr, []byte("payload"), nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := resp.Headers.Get(":status"); st != "201" || resp.Headers[0].Key != ":status" {
		t.Fatalf("headers %v", resp.Headers)
	}
	if v, _ := resp.Headers.Get("x-echo"); v != "1" || string(resp.Body) != "POST chime_host payload" {
		t.Fatalf("got %v %q", resp.Headers, resp.Body)
	}
	// The async client's router marks the call internal and tells the
	// upstream the call's timeout.
	if r := up.last(t); r.header.Get("X-Envoy-Internal") != "true" || r.header.Get("X-Envoy-Expected-Rq-Timeout-Ms") != "1000" {
		t.Errorf("upstream headers of a call: %v", r.header)
	}
	if _, ok := hdr.Get("x-envoy-internal"); ok {
		t.Error("Call changed the caller's headers")
	}
	// A caller's x-envoy-upstream-rq-timeout-ms sets the timeout and is
	// removed; a call without a timeout tells the upstream none.
	withTimeout := append(slices.Clone(hdr), httpfilter.Header{Key: "x-envoy-upstream-rq-timeout-ms", Value: "2500"})
	if _, err := e.clusters.Call(context.Background(), "host", withTimeout, nil, nil, time.Second); err != nil {
		t.Fatal(err)
	}
	if r := up.last(t); r.header.Get("X-Envoy-Expected-Rq-Timeout-Ms") != "2500" || r.header.Get("X-Envoy-Upstream-Rq-Timeout-Ms") != "" {
		t.Errorf("upstream headers of a call with a timeout header: %v", r.header)
	}
	if _, err := e.clusters.Call(context.Background(), "host", hdr, nil, nil, 0); err != nil {
		t.Fatal(err)
	}
	if r := up.last(t); r.header.Values("X-Envoy-Expected-Rq-Timeout-Ms") != nil {
		t.Errorf("a call without a timeout: upstream headers %v", r.header)
	}
	if !e.clusters.HasCluster("host") || e.clusters.HasCluster("nope") {
		t.Fatal("HasCluster")
	}
	if _, err := e.clusters.Call(context.Background(), "nope", hdr, nil, nil, time.Second); !errors.Is(err, httpfilter.ErrUnknownCluster) {
		t.Fatalf("unknown cluster: %v", err)
	}
	for _, missing := range []string{":method", ":path", ":authority"} {
		h := append(httpfilter.Headers(nil), hdr...)
		h.Del(missing)
		if _, err := e.clusters.Call(context.Background(), "host", h, nil, nil, time.Second); err == nil || !strings.Contains(err.Error(), missing) {
			t.Fatalf("missing %s: %v", missing, err)
		}
	}
	slow := append(httpfilter.Headers(nil), hdr...)
	slow.Set(":path", "/slow")
	// Envoy's async client answers an upstream timeout with the router's
	// 504 local reply, not an error.
	resp, err = e.clusters.Call(context.Background(), "host", slow, nil, nil, 100*time.Millisecond)
	if err != nil {
		t.Fatalf("timeout: %v", err)
	}
	if st, _ := resp.Headers.Get(":status"); st != "504" || string(resp.Body) != "upstream request timeout" {
		t.Fatalf("timeout not applied: %v %q", resp.Headers, resp.Body)
	}
	// A refused connection is the router's 503, with Envoy's reset reason.
	down := NewClusters([]*config.Cluster{{Name: "down", Type: "STATIC", LBPolicy: "ROUND_ROBIN", ConnectTimeout: time.Second,
		Network: "tcp", Endpoints: []string{closedPort(t)}, Hostnames: []string{""}}}, stats.New())
	defer down.Close()
	resp, err = down.Call(context.Background(), "down", hdr, nil, nil, time.Second)
	if err != nil {
		t.Fatalf("connection refused: %v", err)
	}
	if st, _ := resp.Headers.Get(":status"); st != "503" ||
		!strings.HasPrefix(string(resp.Body), "upstream connect error or disconnect/reset before headers. reset reason: connection failure") {
		t.Fatalf("connection refused: %v %q", resp.Headers, resp.Body)
	}
	// Envoy checks the pseudo headers' presence only: empty values are sent.
	empty := httpfilter.Headers{{Key: ":method", Value: ""}, {Key: ":path", Value: ""}, {Key: ":authority", Value: ""}}
	if resp, err = e.clusters.Call(context.Background(), "host", empty, nil, nil, time.Second); err != nil {
		t.Fatalf("empty pseudo headers: %v", err)
	}
	if st, _ := resp.Headers.Get(":status"); st == "" || st == "503" {
		t.Fatalf("empty pseudo headers: %v %q", resp.Headers, resp.Body)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestStreamIdleTimeout(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select {
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	e := start(t, setup{idleTimeout: "0.2s", upstreams: map[string]string{"a": up.addr()}, routes: `
              - match: { prefix: "/" }
                route: { cluster: a, timeout: 0s }`})
	resp, body := get(t, e.url+"/")
	if resp.StatusCode != 408 || body != "stream timeout" {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestBufferEditedAfterPauseIsForwarded(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				h.Del("content-length")
				return httpfilter.HeadersContinue
			}
			f.decodeData = func(f *fakeFilter, b *httpfilter.Buffer, end bool) httpfilter.DataStatus {
				if !end {
					return httpfilter.DataStopAndBuffer
				}
				// Like an http_call response doing proxy_set_buffer_bytes
				// later, then resuming.
				go func() {
					time.Sleep(20 * time.Millisecond) // real delay: the continue arrives after the filter call returned
					b.Bytes = []byte("edited later")
					f.cb.ContinueDecoding()
				}()
				return httpfilter.DataStopAndBuffer
			}
		},
	}})
	post(t, e.url+"/", "original body")
	if got := string(up.last(t).body); got != "edited later" {
		t.Fatalf("upstream got %q; the live buffer's bytes must be forwarded", got)
	}
}

// TestHTTPCallCircuitBreaker: past circuit_breakers max_requests open
// http_calls, the router answers at once with its overflow 503, as Envoy
// does (default 1024); a call that ends frees its slot.
func TestHTTPCallCircuitBreaker(t *testing.T) {
	release := make(chan struct{})
	arrived := make(chan struct{}, 4)
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		arrived <- struct{}{}
		<-release
		w.WriteHeader(200)
	})
	cs := NewClusters([]*config.Cluster{{Name: "host", Type: "STATIC", LBPolicy: "ROUND_ROBIN", ConnectTimeout: time.Second,
		Network: "tcp", Endpoints: []string{up.addr()}, Hostnames: []string{""}, MaxRequests: 2}}, stats.New())
	defer cs.Close()
	hdr := httpfilter.Headers{{Key: ":method", Value: "POST"}, {Key: ":path", Value: "/"}, {Key: ":authority", Value: "h"}}
	done := make(chan string, 2)
	for range 2 {
		go func() {
			resp, err := cs.Call(context.Background(), "host", hdr, nil, nil, 10*time.Second)
			if err != nil {
				done <- err.Error()
				return
			}
			st, _ := resp.Headers.Get(":status")
			done <- st
		}()
	}
	<-arrived
	<-arrived
	resp, err := cs.Call(context.Background(), "host", hdr, nil, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := resp.Headers.Get(":status")
	over, _ := resp.Headers.Get("x-envoy-overloaded")
	if st != "503" || over != "true" || !strings.HasSuffix(string(resp.Body), "reset reason: overflow") {
		t.Fatalf("third call: %v %q", resp.Headers, resp.Body)
	}
	close(release)
	for range 2 {
		if s := <-done; s != "200" {
			t.Fatalf("held call: %s", s)
		}
	}
	if resp, err := cs.Call(context.Background(), "host", hdr, nil, nil, time.Second); err != nil {
		t.Fatal(err)
	} else if st, _ := resp.Headers.Get(":status"); st != "200" {
		t.Fatalf("after the others ended: %v", resp.Headers)
	}
}

// TestHeadersStopIterationRoutesOnBody: StopIteration from headers (wasm
// PAUSE with allow_on_headers_stop_iteration, docs/local-runtime.md) still delivers the
// body to that filter; a header edit plus ClearRouteCache there re-picks
// the route, and Continue from data sends headers, then body, onward.
func TestHeadersStopIterationRoutesOnBody(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { fmt.Fprint(w, "A") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request, _ []byte) { fmt.Fprint(w, "B") })
	routes := `
              - match:
                  prefix: "/"
                  headers: [{ name: x-pick, string_match: { exact: b } }]
                route: { cluster: b }
              - match: { prefix: "/" }
                route: { cluster: a }`
	e := start(t, setup{upstreams: map[string]string{"a": a.addr(), "b": b.addr()}, routes: routes, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			var hdrs *httpfilter.Headers
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				hdrs = h
				return httpfilter.HeadersStopIteration
			}
			f.decodeData = func(f *fakeFilter, buf *httpfilter.Buffer, end bool) httpfilter.DataStatus {
				if !end {
					return httpfilter.DataStopAndBuffer
				}
				if bytes.Contains(buf.Bytes, []byte("pick=b")) {
					hdrs.Set("x-pick", "b")
					f.cb.ClearRouteCache()
				}
				return httpfilter.DataContinue
			}
		},
		nil,
	}})
	for _, c := range []struct{ body, want string }{{"pick=b please", "B"}, {"nothing", "A"}} {
		pr, pw := io.Pipe()
		go func() {
			pw.Write([]byte(c.body[:3]))
			time.Sleep(20 * time.Millisecond) // real pacing: two chunks reach the filter as two calls
			pw.Write([]byte(c.body[3:]))
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", e.url+"/x", pr)
		resp, got := do(t, req)
		if resp.StatusCode != 200 || got != c.want {
			t.Errorf("body %q: %d %q, want %q", c.body, resp.StatusCode, got, c.want)
		}
	}
	if r := b.last(t); string(r.body) != "pick=b please" || r.header.Get("X-Pick") != "b" {
		t.Errorf("upstream b got %q %v", r.body, r.header)
	}
	// f0 saw the body while holding the headers; f1 saw headers only after.
	evs := e.rec.events()
	first := slices.Index(evs, "f1:dh end=false")
	if first < 0 || !slices.Contains(evs[:first], "f0:dd 3 end=false") || !slices.Contains(evs[:first], "f0:dd 13 end=true") ||
		first+1 >= len(evs) || evs[first+1] != "f1:dd 13 end=true" {
		t.Errorf("events:\n%s", strings.Join(evs, "\n"))
	}
}

// TestHeadersStopIterationContinueDecoding: after StopIteration a
// ContinueDecoding sends the held headers and the buffered body on, and
// trailers reach the stopped filter too.
func TestHeadersStopIterationContinueDecoding(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				return httpfilter.HeadersStopIteration
			}
			f.decodeData = bufferAll
			f.decodeTrailers = func(f *fakeFilter, t *httpfilter.Headers) httpfilter.TrailersStatus {
				go f.cb.ContinueDecoding()
				return httpfilter.TrailersStop
			}
		},
	}})
	req, _ := http.NewRequest("POST", e.url+"/t", io.MultiReader(strings.NewReader("chunked body")))
	req.Trailer = http.Header{"X-T": {"1"}}
	resp, body := do(t, req)
	if resp.StatusCode != 200 || body != "upstream POST /t" {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	if r := up.last(t); string(r.body) != "chunked body" {
		t.Errorf("upstream body %q", r.body)
	}
	if !e.rec.has("f0:dt") {
		t.Errorf("trailers never reached the stopped filter: %v", e.rec.events())
	}
}

// TestResponseBeforeRequestCompleteClosesConnection: a local reply sent
// before the request body is complete carries "connection: close" and the
// connection is closed, as Envoy does for HTTP/1.1; the unread rest of the
// body is never parsed as another request.
func TestResponseBeforeRequestCompleteClosesConnection(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				f.cb.SendLocalReply(403, []byte("denied"), nil, "test")
				return httpfilter.HeadersStopAll
			}
		},
	}})
	c, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The body announces 200 bytes and starts with what looks like a request.
	smuggled := "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n"
	fmt.Fprintf(c, "POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 200\r\n\r\n%s", smuggled)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || string(body) != "denied" || !resp.Close { // Close: "connection: close" was sent
		t.Fatalf("%d %q close=%v", resp.StatusCode, body, resp.Close)
	}
	// The rest of the body would complete the request; the proxy must
	// have closed the connection instead of answering anything else.
	fmt.Fprint(c, strings.Repeat("x", 200-len(smuggled)))
	if rest, err := io.ReadAll(br); err != nil && !errors.Is(err, syscall.ECONNRESET) || len(rest) > 0 {
		t.Fatalf("after the reply the connection gave %q, %v; want EOF", rest, err)
	}
	if up.hits.Load() != 0 {
		t.Error("the upstream was reached")
	}
	if got := e.stats.Counter("http.main.downstream_rq_response_before_rq_complete", "").Value(); got != 1 {
		t.Errorf("downstream_rq_response_before_rq_complete = %d", got)
	}

	// A complete request (no body) keeps the connection open.
	resp2, _ := get(t, e.url+"/q")
	if resp2.StatusCode != 403 || resp2.Close {
		t.Error("a reply after the whole request closed the connection")
	}
}

// TestUpstreamServiceTime: responses from an upstream carry Envoy's
// x-envoy-upstream-service-time (ms); local replies do not.
func TestUpstreamServiceTime(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, routes: `
              - match: { prefix: "/direct" }
                direct_response: { status: 200, body: { inline_string: "d" } }
              - match: { prefix: "/" }
                route: { cluster: a }`})
	resp, _ := get(t, e.url+"/x")
	if v := resp.Header.Get("X-Envoy-Upstream-Service-Time"); v == "" || strings.Trim(v, "0123456789") != "" {
		t.Errorf("x-envoy-upstream-service-time = %q", v)
	}
	resp, _ = get(t, e.url+"/direct")
	if v, ok := resp.Header["X-Envoy-Upstream-Service-Time"]; ok {
		t.Errorf("a direct response has x-envoy-upstream-service-time %q", v)
	}
}

// TestRequestHeadersOver60KiBRefused: like Envoy's default
// max_request_headers_kb, a request whose headers exceed 60 KiB gets 431
// and never reaches a filter or the upstream (docs/failures.md).
func TestRequestHeadersOver60KiBRefused(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}})
	for _, tc := range []struct {
		size int
		want int
	}{{50 << 10, http.StatusOK}, {61 << 10, http.StatusRequestHeaderFieldsTooLarge}, {100 << 10, http.StatusRequestHeaderFieldsTooLarge}} {
		req, _ := http.NewRequest("GET", e.url+"/v1/models", nil)
		req.Header.Set("X-Chime-Session", strings.Repeat("s", tc.size))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%d B header: %v", tc.size, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%d B header: %d, want %d", tc.size, resp.StatusCode, tc.want)
		}
	}
}
