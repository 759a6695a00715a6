package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// fakeFilter is a native Go filter whose behaviour each test scripts.
// Unset hooks continue.
type fakeFilter struct {
	name string
	cb   httpfilter.Callbacks
	rec  *recorder

	decodeHeaders  func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus
	decodeData     func(f *fakeFilter, b *httpfilter.Buffer, end bool) httpfilter.DataStatus
	decodeTrailers func(f *fakeFilter, t *httpfilter.Headers) httpfilter.TrailersStatus
	encodeHeaders  func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus
	encodeData     func(f *fakeFilter, b *httpfilter.Buffer, end bool) httpfilter.DataStatus
	encodeTrailers func(f *fakeFilter, t *httpfilter.Headers) httpfilter.TrailersStatus

	completed atomic.Int32
	done      chan struct{} // closed by OnStreamComplete
	calls     atomic.Int32  // filter calls after completion (must stay 0)
}

func (f *fakeFilter) after() {
	if f.completed.Load() > 0 {
		f.calls.Add(1)
	}
}

func (f *fakeFilter) DecodeHeaders(h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
	f.after()
	f.rec.add("%s:dh end=%v", f.name, end)
	if f.decodeHeaders != nil {
		return f.decodeHeaders(f, h, end)
	}
	return httpfilter.HeadersContinue
}

func (f *fakeFilter) DecodeData(b *httpfilter.Buffer, end bool) httpfilter.DataStatus {
	f.after()
	f.rec.add("%s:dd %d end=%v", f.name, len(b.Bytes), end)
	if f.decodeData != nil {
		return f.decodeData(f, b, end)
	}
	return httpfilter.DataContinue
}

func (f *fakeFilter) DecodeTrailers(t *httpfilter.Headers) httpfilter.TrailersStatus {
	f.after()
	f.rec.add("%s:dt", f.name)
	if f.decodeTrailers != nil {
		return f.decodeTrailers(f, t)
	}
	return httpfilter.TrailersContinue
}

func (f *fakeFilter) EncodeHeaders(h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
	f.after()
	st, _ := h.Get(":status")
	f.rec.add("%s:eh %s end=%v", f.name, st, end)
	if f.encodeHeaders != nil {
		return f.encodeHeaders(f, h, end)
	}
	return httpfilter.HeadersContinue
}

func (f *fakeFilter) EncodeData(b *httpfilter.Buffer, end bool) httpfilter.DataStatus {
	f.after()
	f.rec.add("%s:ed %d end=%v", f.name, len(b.Bytes), end)
	if f.encodeData != nil {
		return f.encodeData(f, b, end)
	}
	return httpfilter.DataContinue
}

func (f *fakeFilter) EncodeTrailers(t *httpfilter.Headers) httpfilter.TrailersStatus {
	f.after()
	f.rec.add("%s:et", f.name)
	if f.encodeTrailers != nil {
		return f.encodeTrailers(f, t)
	}
	return httpfilter.TrailersContinue
}

func (f *fakeFilter) OnStreamComplete() {
	if f.completed.Add(1) == 1 {
		close(f.done)
	}
	f.rec.add("%s:complete", f.name)
}

// recorder logs filter calls in order.
type recorder struct {
	mu  sync.Mutex
	evs []string
}

func (r *recorder) add(format string, a ...any) {
	r.mu.Lock()
	r.evs = append(r.evs, fmt.Sprintf(format, a...))
	r.mu.Unlock()
}

func (r *recorder) events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.evs...)
}

func (r *recorder) has(ev string) bool {
	for _, e := range r.events() {
		if e == ev {
			return true
		}
	}
	return false
}

// fakeFactory builds one scripted filter per stream.
type fakeFactory struct {
	name   string
	rec    *recorder
	script func(f *fakeFilter)
	mu     sync.Mutex
	made   []*fakeFilter
}

func (ff *fakeFactory) NewFilter(cb httpfilter.Callbacks) (httpfilter.Filter, error) {
	f := &fakeFilter{name: ff.name, cb: cb, rec: ff.rec, done: make(chan struct{})}
	if ff.script != nil {
		ff.script(f)
	}
	ff.mu.Lock()
	ff.made = append(ff.made, f)
	ff.mu.Unlock()
	return f, nil
}

func (ff *fakeFactory) Close() error { return nil }

func (ff *fakeFactory) filters() []*fakeFilter {
	ff.mu.Lock()
	defer ff.mu.Unlock()
	return append([]*fakeFilter(nil), ff.made...)
}

// env is one running proxy with its upstreams.
type env struct {
	t        *testing.T
	srv      *Server
	url      string
	rec      *recorder
	facs     []*fakeFactory
	clusters *Clusters
	stats    *stats.Store
	cfg      *config.Config
}

type setup struct {
	routes      string // YAML list under routes:, default: prefix "/" → cluster a
	extraVhosts string
	bufferLimit int
	filters     []func(f *fakeFilter) // one fake filter per entry, config order
	upstreams   map[string]string     // cluster name → address
	idleTimeout string
	workers     int
	clusters    string // extra YAML cluster entries
}

// start runs a proxy from YAML, so the tests exercise the real config path.
func start(t *testing.T, s setup) *env {
	t.Helper()
	if s.routes == "" {
		s.routes = `
              - match: { prefix: "/" }
                route: { cluster: a }`
	}
	if s.bufferLimit == 0 {
		s.bufferLimit = 1 << 20
	}
	if s.idleTimeout == "" {
		s.idleTimeout = "300s"
	}
	var filters strings.Builder
	for i := range s.filters {
		fmt.Fprintf(&filters, `
          - name: f%d
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                vm_config: { runtime: envoy.wasm.runtime.v8, code: { local: { inline_string: "x" } } }`, i)
	}
	var clusters strings.Builder
	for name, addr := range s.upstreams {
		host, port, _ := strings.Cut(addr, ":")
		fmt.Fprintf(&clusters, `
  - name: %s
    connect_timeout: 1s
    load_assignment:
      cluster_name: %s
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: %s, port_value: %s } } } }] }]`, name, name, host, port)
	}
	yaml := fmt.Sprintf(`
static_resources:
  listeners:
  - name: main
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    per_connection_buffer_limit_bytes: %d
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: main
          stream_idle_timeout: %s
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:%s
%s
          http_filters:%s
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:%s
`, s.bufferLimit, s.idleTimeout, s.routes, s.extraVhosts, filters.String(), clusters.String()+s.clusters)
	cfg, err := config.Parse([]byte(yaml), "test.yaml")
	if err != nil {
		t.Fatalf("config: %v\n%s", err, yaml)
	}
	e := &env{t: t, rec: &recorder{}, stats: stats.New(), cfg: cfg}
	var facs []httpfilter.Factory
	for i, script := range s.filters {
		ff := &fakeFactory{name: fmt.Sprintf("f%d", i), rec: e.rec, script: script}
		e.facs = append(e.facs, ff)
		facs = append(facs, ff)
	}
	e.clusters = NewClusters(cfg.Clusters, e.stats)
	srv, err := Listen(Options{Config: cfg, Clusters: e.clusters, Filters: map[string][]httpfilter.Factory{"main": facs},
		Workers: s.workers, Stats: e.stats, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.url = "http://" + srv.Addr("main")
	t.Cleanup(func() {
		srv.Close()
		e.clusters.Close()
		e.checkCompletedOnce()
	})
	return e
}

// checkCompletedOnce asserts every filter of every stream got exactly one
// OnStreamComplete and no calls after it.
func (e *env) checkCompletedOnce() {
	for _, ff := range e.facs {
		for _, f := range ff.filters() {
			select {
			case <-f.done:
			case <-time.After(5 * time.Second):
				e.t.Errorf("%s: OnStreamComplete never called", f.name)
				continue
			}
			if n := f.completed.Load(); n != 1 {
				e.t.Errorf("%s: OnStreamComplete called %d times", f.name, n)
			}
			if n := f.calls.Load(); n != 0 {
				e.t.Errorf("%s: %d filter calls after OnStreamComplete", f.name, n)
			}
		}
	}
}

// upstream is a recording test backend.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []recorded
	hits atomic.Int32
}

type recorded struct {
	method, path, host string
	header             http.Header
	body               []byte
	contentLength      int64
}

func newUpstream(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body []byte)) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.hits.Add(1)
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, recorded{r.Method, r.URL.RequestURI(), r.Host, r.Header.Clone(), body, r.ContentLength})
		u.mu.Unlock()
		if h != nil {
			h(w, r, body)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintf(w, "upstream %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *upstream) addr() string { return strings.TrimPrefix(u.URL, "http://") }

func (u *upstream) last(t *testing.T) recorded {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		t.Fatal("upstream got no request")
	}
	return u.reqs[len(u.reqs)-1]
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	return resp, string(b)
}

func get(t *testing.T, url string) (*http.Response, string) {
	req, _ := http.NewRequest("GET", url, nil)
	return do(t, req)
}

func post(t *testing.T, url, body string) (*http.Response, string) {
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	return do(t, req)
}
