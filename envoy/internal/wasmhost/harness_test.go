package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// Test guests are built once per test binary.
var guests = map[string]string{} // name -> .wasm path

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "wasmhost-guests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, name := range []string{"conformance", "noabi", "wasiextra", "initcall", "badsig", "vmshare"} {
		out := filepath.Join(dir, name+".wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./testdata/"+name)
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build guest %s: %v\n%s", name, err, b)
			os.Exit(1)
		}
		guests[name] = out
	}
	reloadBackoff = 0
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// --- log capture --------------------------------------------------------

type logRecord struct {
	level slog.Level
	msg   string
}

type logSink struct {
	mu      sync.Mutex
	min     slog.Level
	records []logRecord // guest messages, Envoy's "wasm log …: " prefix removed
	raw     []string    // the log messages as written
	events  *eventLog
}

type sinkHandler struct{ s *logSink }

func (h sinkHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= h.s.min }
func (h sinkHandler) Handle(_ context.Context, r slog.Record) error {
	src := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "source" {
			src = a.Value.String()
		}
		return true
	})
	if src != "wasm" {
		return nil
	}
	msg := guestMessage(r.Message)
	h.s.mu.Lock()
	h.s.records = append(h.s.records, logRecord{r.Level, msg})
	h.s.raw = append(h.s.raw, r.Message)
	h.s.mu.Unlock()
	if h.s.events != nil {
		h.s.events.add("log:" + msg)
	}
	return nil
}
func (h sinkHandler) WithAttrs([]slog.Attr) slog.Handler { return h }

// guestMessage strips Envoy's "wasm log <prefix>: " from a guest line.
func guestMessage(m string) string {
	if rest, ok := strings.CutPrefix(m, "wasm log"); ok {
		if _, msg, ok := strings.Cut(rest, ": "); ok {
			return msg
		}
	}
	return m
}
func (h sinkHandler) WithGroup(string) slog.Handler { return h }

func (s *logSink) lines() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, len(s.records))
	for i, r := range s.records {
		out[i] = r.msg
	}
	return out
}

// find returns the first line starting with prefix.
func (s *logSink) find(prefix string) (string, bool) {
	for _, l := range s.lines() {
		if strings.HasPrefix(l, prefix) {
			return l, true
		}
	}
	return "", false
}

func (s *logSink) count(prefix string) int {
	n := 0
	for _, l := range s.lines() {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}

func (s *logSink) wait(t *testing.T, prefix string) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if l, ok := s.find(prefix); ok {
			return l
		}
		time.Sleep(2 * time.Millisecond) // poll: the guest logs from the VM's goroutine; no clock to drive
	}
	t.Fatalf("no log line %q; got:\n%s", prefix, strings.Join(s.lines(), "\n"))
	return ""
}

// expect asserts an exact log line exists.
func (s *logSink) expect(t *testing.T, line string) {
	t.Helper()
	for _, l := range s.lines() {
		if l == line {
			return
		}
	}
	t.Errorf("missing log line %q; got:\n%s", line, strings.Join(s.lines(), "\n"))
}

// --- ordered event log ---------------------------------------------------

type eventLog struct {
	mu sync.Mutex
	ev []string
}

func (e *eventLog) add(s string) {
	e.mu.Lock()
	e.ev = append(e.ev, s)
	e.mu.Unlock()
}

func (e *eventLog) all() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.ev...)
}

func (e *eventLog) index(s string) int {
	for i, x := range e.all() {
		if x == s {
			return i
		}
	}
	return -1
}

// --- fake stream --------------------------------------------------------

type localReply struct {
	status  int
	body    string
	headers httpfilter.Headers
	details string
}

type fakeStream struct {
	mu          sync.Mutex
	events      *eventLog
	req, resp   httpfilter.Headers
	reqTr, rTr  httpfilter.Headers
	info        httpfilter.StreamInfo
	ctx         context.Context
	cancel      context.CancelFunc
	replies     []localReply
	continuesD  int
	continuesE  int
	resets      int
	routeClears int
	onReply     func()
}

func newFakeStream(events *eventLog, worker int, headers ...string) *fakeStream {
	fs := &fakeStream{events: events}
	fs.ctx, fs.cancel = context.WithCancel(context.Background())
	fs.info = httpfilter.StreamInfo{Worker: worker, StartTime: time.Now(), Protocol: "HTTP/1.1"}
	fs.req = httpfilter.Headers{{Key: ":method", Value: "GET"}, {Key: ":path", Value: "/v1"}, {Key: ":authority", Value: "a.example"}}
	for i := 0; i+1 < len(headers); i += 2 {
		fs.req.Add(headers[i], headers[i+1])
	}
	return fs
}

func (f *fakeStream) record(s string) {
	if f.events != nil {
		f.events.add(s)
	}
}

func (f *fakeStream) ContinueDecoding() {
	f.mu.Lock()
	f.continuesD++
	f.mu.Unlock()
	f.record("continue_decoding")
}

func (f *fakeStream) ContinueEncoding() {
	f.mu.Lock()
	f.continuesE++
	f.mu.Unlock()
	f.record("continue_encoding")
}

func (f *fakeStream) SendLocalReply(status int, body []byte, headers httpfilter.Headers, details string) {
	if f.onReply != nil {
		f.onReply()
	}
	f.mu.Lock()
	f.replies = append(f.replies, localReply{status, string(body), headers, details})
	f.mu.Unlock()
	f.record(fmt.Sprintf("local_reply %d", status))
}

func (f *fakeStream) ResetStream() {
	f.mu.Lock()
	f.resets++
	f.mu.Unlock()
	f.record("reset")
}

func (f *fakeStream) ClearRouteCache() {
	f.mu.Lock()
	f.routeClears++
	f.mu.Unlock()
}

func (f *fakeStream) RequestHeaders() *httpfilter.Headers   { return &f.req }
func (f *fakeStream) RequestTrailers() *httpfilter.Headers  { return &f.reqTr }
func (f *fakeStream) ResponseHeaders() *httpfilter.Headers  { return &f.resp }
func (f *fakeStream) ResponseTrailers() *httpfilter.Headers { return &f.rTr }
func (f *fakeStream) Info() *httpfilter.StreamInfo          { return &f.info }
func (f *fakeStream) Context() context.Context              { return f.ctx }

func (f *fakeStream) snapshot() (replies []localReply, contD, contE, resets int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]localReply(nil), f.replies...), f.continuesD, f.continuesE, f.resets
}

// --- fake cluster manager -----------------------------------------------

type recordedCall struct {
	cluster  string
	headers  httpfilter.Headers
	body     string
	trailers httpfilter.Headers
	timeout  time.Duration
}

// fakeClusters knows "upstream" (answers), "down" (fails), "slow" (waits
// for the timeout) and "gated" (waits for release).
type fakeClusters struct {
	mu    sync.Mutex
	calls []recordedCall
	gate  chan struct{}
}

func (c *fakeClusters) HasCluster(name string) bool {
	switch name {
	case "upstream", "down", "slow", "gated":
		return true
	}
	return false
}

func (c *fakeClusters) Call(ctx context.Context, cluster string, headers httpfilter.Headers, body []byte, trailers httpfilter.Headers, timeout time.Duration) (*httpfilter.CallResponse, error) {
	c.mu.Lock()
	c.calls = append(c.calls, recordedCall{cluster, headers, string(body), trailers, timeout})
	gate := c.gate
	c.mu.Unlock()
	switch cluster {
	case "upstream":
		return &httpfilter.CallResponse{
			Headers:  httpfilter.Headers{{Key: ":status", Value: "200"}, {Key: "x-h", Value: "1"}},
			Body:     []byte("hello"),
			Trailers: httpfilter.Headers{{Key: "x-trailer", Value: "tv"}},
		}, nil
	case "down":
		return nil, errors.New("connection refused")
	case "slow":
		<-ctx.Done()
		return nil, ctx.Err()
	case "gated":
		select {
		case <-gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return &httpfilter.CallResponse{Headers: httpfilter.Headers{{Key: ":status", Value: "204"}}}, nil
	}
	return nil, httpfilter.ErrUnknownCluster
}

func (c *fakeClusters) recorded() []recordedCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]recordedCall(nil), c.calls...)
}

// --- harness ------------------------------------------------------------

type harness struct {
	t        testing.TB
	f        *Factory
	logs     *logSink
	events   *eventLog
	clusters *fakeClusters
	stats    *memStats
}

type option func(*httpfilter.WasmConfig, *httpfilter.Env)

func withWorkers(n int) option {
	return func(_ *httpfilter.WasmConfig, e *httpfilter.Env) { e.Workers = n }
}
func withProfile(p string) option {
	return func(_ *httpfilter.WasmConfig, e *httpfilter.Env) { e.WASIProfile = p }
}
func withFailOpen() option {
	return func(c *httpfilter.WasmConfig, _ *httpfilter.Env) { c.FailOpen = true }
}
func withVMID(id string) option {
	return func(c *httpfilter.WasmConfig, _ *httpfilter.Env) { c.VMID = id }
}
func withCode(name string) option {
	return func(c *httpfilter.WasmConfig, _ *httpfilter.Env) { c.CodePath = guests[name] }
}

func testConfig(t testing.TB, pluginConfig string, opts ...option) (httpfilter.WasmConfig, httpfilter.Env, *logSink, *eventLog, *fakeClusters, *memStats) {
	events := &eventLog{}
	logs := &logSink{min: slog.LevelDebug - 4, events: events}
	clusters := &fakeClusters{gate: make(chan struct{})}
	stats := &memStats{m: map[string]*memMetric{}}
	cfg := httpfilter.WasmConfig{
		FilterName:          "envoy.filters.http.wasm",
		PluginName:          "conformance-plugin",
		RootID:              "conformance-root",
		VMID:                "vm-" + strings.ReplaceAll(t.Name(), "/", "-"),
		CodePath:            guests["conformance"],
		VMConfiguration:     []byte("vm-config"),
		PluginConfiguration: []byte(pluginConfig),
	}
	env := httpfilter.Env{
		Clusters:    clusters,
		Stats:       stats,
		Logger:      slog.New(sinkHandler{logs}),
		Workers:     1,
		NodeID:      "node-1",
		NodeCluster: "node-cluster",
	}
	for _, o := range opts {
		o(&cfg, &env)
	}
	return cfg, env, logs, events, clusters, stats
}

func newHarness(t testing.TB, pluginConfig string, opts ...option) *harness {
	t.Helper()
	cfg, env, logs, events, clusters, stats := testConfig(t, pluginConfig, opts...)
	f, err := newFactory(cfg, env)
	if err != nil {
		t.Fatalf("NewFactory: %v", err)
	}
	t.Cleanup(func() { f.Close() })
	return &harness{t: t, f: f, logs: logs, events: events, clusters: clusters, stats: stats}
}

// stream opens a filter on a fresh fake stream.
func (h *harness) stream(worker int, headers ...string) (*stream, *fakeStream) {
	h.t.Helper()
	fs := newFakeStream(h.events, worker, headers...)
	flt, err := h.f.NewFilter(fs)
	if err != nil {
		h.t.Fatalf("NewFilter: %v", err)
	}
	return flt.(*stream), fs
}
