package envoy_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy"
)

// The wasmhost test guests, built once per test binary on first use and
// removed by TestMain.
var guestBuild struct {
	once sync.Once
	dir  string
	wasm map[string]string // name -> .wasm path
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if guestBuild.dir != "" {
		os.RemoveAll(guestBuild.dir)
	}
	os.Exit(code)
}

// guest returns the path of the named guest from internal/wasmhost/testdata.
func guest(t *testing.T, name string) string {
	t.Helper()
	guestBuild.once.Do(func() {
		guestBuild.dir, guestBuild.err = os.MkdirTemp("", "envoy-conformance-")
		if guestBuild.err != nil {
			return
		}
		guestBuild.wasm = map[string]string{}
		for _, g := range []string{"conformance", "vmshare", "tcpfilter"} {
			out := filepath.Join(guestBuild.dir, g+".wasm")
			cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./internal/wasmhost/testdata/"+g)
			cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
			if b, err := cmd.CombinedOutput(); err != nil {
				guestBuild.err = fmt.Errorf("build guest %s: %v\n%s", g, err, b)
				return
			}
			guestBuild.wasm[g] = out
		}
	})
	if guestBuild.err != nil {
		t.Fatal(guestBuild.err)
	}
	p, ok := guestBuild.wasm[name]
	if !ok {
		t.Fatalf("no guest %q", name)
	}
	return p
}

// --- log capture ---------------------------------------------------------

// logBuffer is the io.Writer behind the runtime's JSON slog handler; tests
// assert on the records it collected.
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
	Level  string `json:"level"`
	Msg    string `json:"msg"`
	Source string `json:"source"`
	Plugin string `json:"plugin"`
	Worker *int   `json:"worker"`
	Err    string `json:"err"`
}

func (b *logBuffer) records() []logRecord {
	b.mu.Lock()
	data := append([]byte(nil), b.buf.Bytes()...)
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

// guestLines returns what the guests of plugin (any plugin if "") logged
// through proxy_log, in order.
func (b *logBuffer) guestLines(plugin string) []string {
	var out []string
	for _, r := range b.records() {
		if r.Source == "wasm" && (plugin == "" || r.Plugin == plugin) {
			out = append(out, guestMessage(r.Msg))
		}
	}
	return out
}

// guestMessage strips Envoy's "wasm log <name> <root_id> <vm_id>: " from a
// guest line (TestHTTPLogFormat checks the prefix itself).
func guestMessage(m string) string {
	if rest, ok := strings.CutPrefix(m, "wasm log"); ok {
		if _, msg, ok := strings.Cut(rest, ": "); ok {
			return msg
		}
	}
	return m
}

func (b *logBuffer) find(plugin, prefix string) []string {
	var out []string
	for _, l := range b.guestLines(plugin) {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return out
}

func (b *logBuffer) dump(plugin string) string {
	return strings.Join(b.guestLines(plugin), "\n")
}

// expect asserts plugin logged exactly line.
func (b *logBuffer) expect(t *testing.T, plugin, line string) {
	t.Helper()
	for _, l := range b.guestLines(plugin) {
		if l == line {
			return
		}
	}
	t.Errorf("plugin %q did not log %q; it logged:\n%s", plugin, line, b.dump(plugin))
}

// vmFailures returns the runtime's "VM failed" records for plugin.
func (b *logBuffer) vmFailures(plugin string) []logRecord {
	var out []logRecord
	for _, r := range b.records() {
		if r.Plugin == plugin && r.Level == "ERROR" && strings.Contains(r.Msg, "VM failed") {
			out = append(out, r)
		}
	}
	return out
}

// --- runtime under test ----------------------------------------------------

// filterSpec is one wasm http filter running the conformance guest; mode
// is its plugin configuration (the guest's behaviour), name its plugin
// name (logs carry it as "plugin").
type filterSpec struct {
	name, mode string
	failOpen   bool
	// allowStopIteration sets allow_on_headers_stop_iteration.
	allowStopIteration bool
	// vmID is vm_config.vm_id (default: name); guest is the test guest
	// (default "conformance"); rootID is root_id (default "conformance").
	vmID, guest, rootID string
}

type listenerSpec struct {
	name        string
	bufferLimit int // per_connection_buffer_limit_bytes; 0 = Envoy's default
	filters     []filterSpec
}

type runtimeSpec struct {
	listeners []listenerSpec
	clusters  map[string]string // name -> host:port; routes go to "app"
	profile   string            // default envoy-1.38
	// routes replaces the default route list (prefix "/" → app), as a
	// YAML flow sequence.
	routes string
	// bootstrap is appended to the file at the top level (e.g. stats_config).
	bootstrap string
}

type runningProxy struct {
	srv  *envoy.Server
	logs *logBuffer
}

func (p *runningProxy) url(listener, path string) string {
	return "http://" + p.srv.Addr(listener) + path
}

func (p *runningProxy) adminURL(path string) string { return "http://" + p.srv.AdminAddr() + path }

// startProxy writes an envoy.yaml for spec and starts it with two workers
// and a JSON logger into a buffer.
func startProxy(t *testing.T, spec runtimeSpec) *runningProxy {
	t.Helper()
	var y strings.Builder
	y.WriteString("admin: { address: { socket_address: { address: 127.0.0.1, port_value: 0 } } }\n")
	y.WriteString("static_resources:\n  listeners:\n")
	routes := spec.routes
	if routes == "" {
		routes = `[{ match: { prefix: "/" }, route: { cluster: app } }]`
	}
	for _, l := range spec.listeners {
		fmt.Fprintf(&y, "  - name: %s\n", l.name)
		y.WriteString("    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }\n")
		if l.bufferLimit > 0 {
			fmt.Fprintf(&y, "    per_connection_buffer_limit_bytes: %d\n", l.bufferLimit)
		}
		fmt.Fprintf(&y, `    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: %s
          route_config:
            virtual_hosts:
            - { name: all, domains: ["*"], routes: %s }
          http_filters:
`, l.name, routes)
		for _, f := range l.filters {
			code := guest(t, cmp.Or(f.guest, "conformance"))
			fmt.Fprintf(&y, `          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                name: %s
                root_id: %s
                fail_open: %t
                allow_on_headers_stop_iteration: %t
                vm_config: { vm_id: %s, runtime: envoy.wasm.runtime.v8, code: { local: { filename: %q } } }
                configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: %q }
`, f.name, cmp.Or(f.rootID, "conformance"), f.failOpen, f.allowStopIteration, cmp.Or(f.vmID, f.name), code, f.mode)
		}
		y.WriteString(`          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
`)
	}
	y.WriteString("  clusters:\n")
	for name, addr := range spec.clusters {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&y, `  - name: %s
    connect_timeout: 1s
    load_assignment:
      cluster_name: %s
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: %s, port_value: %s } } } }] }]
`, name, name, host, port)
	}
	y.WriteString(spec.bootstrap)
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(y.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	profile := spec.profile
	if profile == "" {
		profile = envoy.ProfileEnvoy138
	}
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug - 4, ReplaceAttr: envoy.LevelName}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One cache dir for the whole binary: the guest compiles once.
	cache := filepath.Join(guestBuild.dir, "cache")
	srv, err := envoy.Start(ctx, envoy.Options{ConfigPath: path, WASIProfile: profile, CacheDir: cache, Workers: 2, Logger: logger})
	if err != nil {
		t.Fatalf("start: %v\nconfig:\n%s", err, y.String())
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &runningProxy{srv: srv, logs: logs}
}

// --- clients -----------------------------------------------------------------

// conn is a client bound to one keep-alive connection. The runtime spreads
// connections over its workers round-robin (first connection: worker 0),
// so a conn pins its requests to one worker VM; dials counts reconnects,
// which would move it.
type conn struct {
	c     *http.Client
	dials atomic.Int32
}

func newConn(t *testing.T) *conn {
	c := &conn{}
	tr := &http.Transport{
		MaxConnsPerHost:    1,
		DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c.dials.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}
	c.c = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	return c
}

type reply struct {
	status int
	header http.Header
	body   string
}

// do sends a request and reads the whole response.
func (c *conn) do(t *testing.T, method, url string, body io.Reader, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func (c *conn) get(t *testing.T, url string, hdr ...string) reply {
	t.Helper()
	return c.do(t, http.MethodGet, url, nil, hdr...)
}

// chunkedBody is a request body of unknown length (sent chunked).
func chunkedBody(s string) io.Reader { return io.MultiReader(strings.NewReader(s)) }

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// waitMatch returns the first guest line of plugin matching re, waiting for it.
func (b *logBuffer) waitMatch(t *testing.T, plugin, re string) []string {
	t.Helper()
	rx := regexp.MustCompile("^" + re + "$")
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, l := range b.guestLines(plugin) {
			if m := rx.FindStringSubmatch(l); m != nil {
				return m
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("plugin %q never logged a line matching %q; it logged:\n%s", plugin, re, b.dump(plugin))
		}
		time.Sleep(5 * time.Millisecond) // poll: guest logs come from the runtime's own goroutines; no clock to drive
	}
}

// --- upstream --------------------------------------------------------------------

type upstreamRequest struct {
	method, path, host string
	header             http.Header
	body               string
}

// upstream is a recording origin server. GET /slow streams "part1", then
// waits for release before "part2".
type upstream struct {
	srv       *httptest.Server
	release   chan struct{}
	bodyBytes atomic.Int64 // request body bytes read so far, all requests
	mu        sync.Mutex
	reqs      []upstreamRequest
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{release: make(chan struct{})}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body bytes.Buffer
		buf := make([]byte, 512)
		for {
			n, err := r.Body.Read(buf)
			body.Write(buf[:n])
			u.bodyBytes.Add(int64(n))
			if err == io.EOF {
				break
			}
			if err != nil {
				return // not a complete request: not recorded
			}
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, upstreamRequest{r.Method, r.URL.Path, r.Host, r.Header.Clone(), body.String()})
		u.mu.Unlock()
		if r.URL.Path == "/slow" {
			io.WriteString(w, "part1")
			w.(http.Flusher).Flush()
			select {
			case <-u.release:
			case <-r.Context().Done():
				return
			}
			io.WriteString(w, "part2")
			return
		}
		w.Header().Set("x-upstream", "yes")
		io.WriteString(w, "upstream:"+r.URL.Path)
	}))
	t.Cleanup(u.srv.Close)
	return u
}

func (u *upstream) addr() string { return u.srv.Listener.Addr().String() }

// request returns the recorded request for path.
func (u *upstream) request(path string) (upstreamRequest, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, r := range u.reqs {
		if r.path == path {
			return r, true
		}
	}
	return upstreamRequest{}, false
}

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}
