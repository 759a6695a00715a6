package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy"
	"github.com/chimehq/chime/hostapi"
)

// The tests in this package run chime.wasm inside the real local runtime
// (envoy.Start with the envoy-1.38 WASI profile, as released Envoy) between
// a scripted upstream (cluster llm) and a scripted chime host (cluster
// chime_host), and assert what a client, the upstream, the host, the admin
// endpoint and the runtime's log see.

// stackOptions configure startStack.
type stackOptions struct {
	pluginConfig string
	// gctrace sets GODEBUG=gctrace=1 in the VM, so the guest's Go runtime
	// reports every GC cycle on stderr (which the runtime logs).
	gctrace bool
	// upstream answers the proxied requests; nil answers 200 "ok".
	upstream http.HandlerFunc
}

type stack struct {
	t        testing.TB
	srv      *envoy.Server
	url      string // http://<listener chime>
	adminURL string
	logs     *logBuffer
	host     *fakeHost
}

// startStack starts the runtime with one worker (so one VM serves every
// request) and returns once it accepts connections. A configuration the
// plugin rejects fails here with the runtime's error.
func startStack(t testing.TB, opts stackOptions) (*stack, error) {
	t.Helper()
	up := opts.upstream
	if up == nil {
		up = func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }
	}
	upstream := httptest.NewServer(up)
	t.Cleanup(upstream.Close)
	host := newFakeHost(t)

	env := ""
	if opts.gctrace {
		env = `, environment_variables: { key_values: { GODEBUG: "gctrace=1" } }`
	}
	cfg := fmt.Sprintf(`admin: { address: { socket_address: { address: 127.0.0.1, port_value: 0 } } }
static_resources:
  listeners:
  - name: chime
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    per_connection_buffer_limit_bytes: 16777216
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: chime
          stream_idle_timeout: 0s
          route_config:
            virtual_hosts:
            - { name: llm, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: llm, timeout: 0s } }] }
          http_filters:
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: chime
                root_id: chime
                vm_config: { vm_id: chime, runtime: envoy.wasm.runtime.v8, code: { local: { filename: %q } }%s }
                configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: %q }
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
%s%s`, chimeWasmPath, env, opts.pluginConfig, cluster(t, "llm", upstream.Listener.Addr()), cluster(t, "chime_host", host.srv.Listener.Addr()))
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := envoy.Start(ctx, envoy.Options{
		ConfigPath:  path,
		WASIProfile: envoy.ProfileEnvoy138,
		CacheDir:    compileCache,
		Workers:     1,
		Logger:      slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug - 4})),
	})
	if err != nil {
		return &stack{t: t, logs: logs, host: host}, err
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &stack{t: t, srv: srv, url: "http://" + srv.Addr("chime"), adminURL: "http://" + srv.AdminAddr(), logs: logs, host: host}, nil
}

func cluster(t testing.TB, name string, addr net.Addr) string {
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf(`  - name: %s
    connect_timeout: 2s
    load_assignment:
      cluster_name: %s
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: %s, port_value: %s } } } }] }]
`, name, name, host, port)
}

func mustStart(t testing.TB, opts stackOptions) *stack {
	t.Helper()
	s, err := startStack(t, opts)
	if err != nil {
		t.Fatalf("start: %v\nlog:\n%s", err, s.logs.dump())
	}
	return s
}

// post sends a request through the proxy and reads the whole response.
func (s *stack) post(c *http.Client, path string, body []byte, hdr ...string) (*http.Response, []byte) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		s.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("POST %s: reading the response: %v", path, err)
	}
	return resp, b
}

// metric reads a wasm metric from the admin's /stats.
func (s *stack) metric(name string) int64 {
	s.t.Helper()
	resp, err := http.Get(s.adminURL + "/stats")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^wasmcustom\.` + regexp.QuoteMeta(name) + `: (\d+)$`).FindSubmatch(b)
	if m == nil {
		s.t.Fatalf("/stats has no %s:\n%s", name, b)
	}
	n, _ := strconv.ParseInt(string(m[1]), 10, 64)
	return n
}

// checkHealthy fails the test on a VM failure (a trap, or the Go runtime
// crashing on poll_oneoff's ENOSYS under envoy-1.38).
func (s *stack) checkHealthy() {
	s.t.Helper()
	for _, r := range s.logs.records() {
		if strings.Contains(r.Msg, "VM failed") {
			s.t.Errorf("VM failure: %+v", r)
		}
	}
}

// --- the runtime's log ---------------------------------------------------

// logBuffer is the io.Writer behind the runtime's JSON slog handler.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

type logRecord struct {
	Level    string `json:"level"`
	Msg      string `json:"msg"`
	Source   string `json:"source"`
	Err      string `json:"err"`
	PeriodMs *int64 `json:"period_ms"`
}

func (b *logBuffer) records() []logRecord {
	b.mu.Lock()
	data := bytes.Clone(b.buf.Bytes())
	b.mu.Unlock()
	var out []logRecord
	for _, line := range bytes.Split(data, []byte("\n")) {
		var r logRecord
		if len(line) > 0 && json.Unmarshal(line, &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// guest returns what chime.wasm logged (proxy_log, stdout, stderr) at
// level or above, in order.
func (b *logBuffer) guest(level slog.Level) []logRecord {
	var out []logRecord
	for _, r := range b.records() {
		var l slog.Level
		if r.Source == "wasm" && l.UnmarshalText([]byte(r.Level)) == nil && l >= level {
			r.Msg = guestMessage(r.Msg)
			out = append(out, r)
		}
	}
	return out
}

// guestMessage strips the runtime's Envoy-style "wasm log <name> <root_id>
// <vm_id>: " from a guest record.
func guestMessage(m string) string {
	if rest, ok := strings.CutPrefix(m, "wasm log"); ok {
		if _, msg, ok := strings.Cut(rest, ": "); ok {
			return msg
		}
	}
	return m
}

func (b *logBuffer) dump() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// --- the scripted chime host -----------------------------------------------

type hostCall struct {
	path   string
	header http.Header
	body   []byte
}

// fakeHost is the chime host service as the filter sees it (llm/hostapi.go):
// every call is recorded; answers come from handlers keyed by path, with
// defaults for the ones a test does not script.
type fakeHost struct {
	srv      *httptest.Server
	mu       sync.Mutex
	calls    []hostCall
	handlers map[string]func(w http.ResponseWriter, r *http.Request, body []byte)
}

func newFakeHost(t testing.TB) *fakeHost {
	h := &fakeHost{handlers: map[string]func(http.ResponseWriter, *http.Request, []byte){}}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		h.mu.Lock()
		h.calls = append(h.calls, hostCall{r.URL.Path, r.Header.Clone(), body})
		fn := h.handlers[r.URL.Path]
		h.mu.Unlock()
		switch {
		case fn != nil:
			fn(w, r, body)
		case r.URL.Path == hostapi.PathPrepare || r.URL.Path == hostapi.PathState:
			io.WriteString(w, `{"ntp":{"status":"ok","offsetMs":0}}`)
		case r.URL.Path == hostapi.PathResolve:
			io.WriteString(w, `{"continued":false}`)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// handle scripts the answers to path.
func (h *fakeHost) handle(path string, fn func(w http.ResponseWriter, r *http.Request, body []byte)) {
	h.mu.Lock()
	h.handlers[path] = fn
	h.mu.Unlock()
}

// callsTo returns the recorded calls to path.
func (h *fakeHost) callsTo(path string) []hostCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hostCall
	for _, c := range h.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

// reset forgets the recorded calls (long runs would keep every body).
func (h *fakeHost) reset() {
	h.mu.Lock()
	h.calls = nil
	h.mu.Unlock()
}
