package envoy_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy"
	"github.com/chimehq/chime/internal/testport"
)

// Network filters: a wasm network filter (the tcpfilter guest, written as
// a third-party filter is) before tcp_proxy. Each test asserts what a TCP
// client sees and the callbacks the guest logged, in Envoy's order.

// tcpUpstream is an origin server. In echo mode it writes back what it
// reads and half-closes when the client did; with a banner it sends the
// banner and closes at once (a server-speaks-first protocol).
type tcpUpstream struct {
	ln       net.Listener
	banner   string
	mu       sync.Mutex
	received strings.Builder
	accepted int
}

func newTCPUpstream(t *testing.T, banner string) *tcpUpstream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &tcpUpstream{ln: ln, banner: banner}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u.mu.Lock()
			u.accepted++
			u.mu.Unlock()
			go u.serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return u
}

func (u *tcpUpstream) serve(c net.Conn) {
	defer c.Close()
	if u.banner != "" {
		io.WriteString(c, u.banner)
		return
	}
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			u.mu.Lock()
			u.received.Write(buf[:n])
			u.mu.Unlock()
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			c.(*net.TCPConn).CloseWrite()
			return
		}
	}
}

func (u *tcpUpstream) got() (string, int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.received.String(), u.accepted
}

type tcpSpec struct {
	mode     string // the guest's plugin configuration
	failOpen bool
	upstream string // cluster address
}

// startTCPProxy runs a listener "tcp": the tcpfilter guest, then tcp_proxy
// to cluster "origin".
func startTCPProxy(t *testing.T, spec tcpSpec, profile string) *runningProxy {
	t.Helper()
	host, port, err := net.SplitHostPort(spec.upstream)
	if err != nil {
		t.Fatal(err)
	}
	y := fmt.Sprintf(`admin: { address: { socket_address: { address: 127.0.0.1, port_value: 0 } } }
static_resources:
  listeners:
  - name: tcp
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.wasm
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm
          config:
            name: tcpfilter
            root_id: tcpfilter
            fail_open: %t
            vm_config: { vm_id: tcpfilter, runtime: envoy.wasm.runtime.v8, code: { local: { filename: %q } } }
            configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: %q }
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: origin_tcp
          cluster: origin
  clusters:
  - name: origin
    connect_timeout: 1s
    load_assignment:
      cluster_name: origin
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: %s, port_value: %s } } } }] }]
`, spec.failOpen, guest(t, "tcpfilter"), spec.mode, host, port)
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug - 4, ReplaceAttr: envoy.LevelName}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := envoy.Start(ctx, envoy.Options{ConfigPath: path, WASIProfile: profile, CacheDir: filepath.Join(guestBuild.dir, "cache"), Workers: 2, Logger: logger})
	if err != nil {
		t.Fatalf("start: %v\nconfig:\n%s", err, y)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return &runningProxy{srv: srv, logs: logs}
}

func dialTCP(t *testing.T, p *runningProxy) *net.TCPConn {
	t.Helper()
	c, err := net.Dial("tcp", p.srv.Addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	return c.(*net.TCPConn)
}

// readN reads exactly n bytes.
func readN(t *testing.T, c net.Conn, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v (got %q)", n, err, b)
	}
	return string(b)
}

// expectEOF asserts the proxy closed (or half-closed) the connection.
func expectEOF(t *testing.T, c net.Conn) {
	t.Helper()
	b, err := io.ReadAll(c)
	if err != nil || len(b) != 0 {
		t.Fatalf("want end of stream, got %q, %v", b, err)
	}
}

// connLines returns, in order, the guest's lines about one connection
// (with the connection id replaced by "C"), waiting until last appears.
func connLines(t *testing.T, logs *logBuffer, last string) []string {
	t.Helper()
	m := logs.waitMatch(t, "tcpfilter", `new connection (\d+)`)
	id := m[1]
	rx := regexp.MustCompile(`^(\D+) ` + id + `\b(.*)$`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		var out []string
		for _, l := range logs.guestLines("tcpfilter") {
			if m := rx.FindStringSubmatch(l); m != nil {
				out = append(out, m[1]+" C"+m[2])
			}
		}
		if len(out) > 0 && out[len(out)-1] == last {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest never logged %q last; it logged:\n%s", last, strings.Join(out, "\n"))
		}
		time.Sleep(5 * time.Millisecond) // poll: guest logs come from the connection's goroutine
	}
}

// TestTCPProxyEchoCallbackOrder: bytes flow both ways through the network
// filter, and the callbacks come in Envoy's order: new connection; data
// each way; the client's half-close as empty end-of-stream data; the
// upstream's end of stream, then proxy_on_upstream_connection_close with
// PeerType Unknown (Envoy reports it from the end of stream); then, as
// tcp_proxy closes the client connection once the upstream closed, the
// downstream close with PeerType Local, and proxy_on_done, proxy_on_log,
// proxy_on_delete in that order (Envoy's onCloseTCP).
func TestTCPProxyEchoCallbackOrder(t *testing.T) {
	up := newTCPUpstream(t, "")
	p := startTCPProxy(t, tcpSpec{upstream: up.ln.Addr().String()}, "")
	c := dialTCP(t, p)
	io.WriteString(c, "hello")
	if got := readN(t, c, 5); got != "hello" {
		t.Fatalf("echo %q", got)
	}
	c.CloseWrite()
	expectEOF(t, c)
	got := connLines(t, p.logs, "delete C")
	want := []string{
		"new connection C",
		`downstream data C len=5 end=false data="hello"`,
		"upstream data C len=5 end=false",
		`downstream data C len=0 end=true data=""`,
		"upstream data C len=0 end=true",
		"upstream close C peer=0",
		"downstream close C peer=1",
		"done C",
		"log C in=5 out=5",
		"delete C",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("callbacks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if recv, n := up.got(); recv != "hello" || n != 1 {
		t.Fatalf("upstream got %q over %d connections", recv, n)
	}
	stats := fetchStats(t, p)
	for _, line := range []string{
		`envoy_tcp_downstream_cx_total{envoy_tcp_prefix="origin_tcp"} 1`,
		`envoy_tcp_downstream_cx_rx_bytes_total{envoy_tcp_prefix="origin_tcp"} 5`,
		`envoy_tcp_downstream_cx_tx_bytes_total{envoy_tcp_prefix="origin_tcp"} 5`,
		`tcpfilter_bytes_in{} 5`,
		`tcpfilter_bytes_out{} 5`,
	} {
		if !strings.Contains(stats, line+"\n") {
			t.Errorf("stats lack %q:\n%s", line, stats)
		}
	}
}

func fetchStats(t *testing.T, p *runningProxy) string {
	t.Helper()
	resp, err := newConn(t).c.Get(p.adminURL("/stats/prometheus"))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestTCPProxyRewritesData: proxy_set_buffer_bytes on DownstreamData
// changes what the upstream receives, and on UpstreamData what the client
// receives (a prepended banner).
func TestTCPProxyRewritesData(t *testing.T) {
	up := newTCPUpstream(t, "")
	p := startTCPProxy(t, tcpSpec{mode: "upper banner=>>", upstream: up.ln.Addr().String()}, "")
	c := dialTCP(t, p)
	io.WriteString(c, "hello\n")
	if got := readN(t, c, 8); got != ">>HELLO\n" {
		t.Fatalf("client got %q, want the upper-cased echo after the banner", got)
	}
	io.WriteString(c, "again\n")
	if got := readN(t, c, 6); got != "AGAIN\n" {
		t.Fatalf("client got %q (the banner goes once)", got)
	}
	c.CloseWrite()
	expectEOF(t, c)
	if recv, _ := up.got(); recv != "HELLO\nAGAIN\n" {
		t.Fatalf("upstream got %q", recv)
	}
	connLines(t, p.logs, "delete C")
	p.logs.expect(t, "tcpfilter", "log "+p.logs.waitMatch(t, "tcpfilter", `new connection (\d+)`)[1]+" in=12 out=14")
}

// TestTCPProxyPausedDataAccumulates: data a filter pauses on stays in the
// connection's read buffer; the next read presents all of it (len grows)
// and, once the filter continues, the upstream gets it once, in order.
func TestTCPProxyPausedDataAccumulates(t *testing.T) {
	up := newTCPUpstream(t, "")
	p := startTCPProxy(t, tcpSpec{mode: "line", upstream: up.ln.Addr().String()}, "")
	c := dialTCP(t, p)
	io.WriteString(c, "ab")
	p.logs.waitMatch(t, "tcpfilter", `downstream data \d+ len=2 end=false data="ab"`)
	io.WriteString(c, "c\n")
	if got := readN(t, c, 4); got != "abc\n" {
		t.Fatalf("echo %q", got)
	}
	p.logs.waitMatch(t, "tcpfilter", `downstream data \d+ len=4 end=false data="abc\\n"`)
	if recv, _ := up.got(); recv != "abc\n" {
		t.Fatalf("upstream got %q", recv)
	}
}

// TestTCPProxyGateContinuesFromTick: proxy_on_new_connection returning
// Pause keeps tcp_proxy from connecting; the filter also holds the first
// bytes. A tick continues the connection (set_effective_context +
// proxy_continue_stream(Downstream)): tcp_proxy connects, and the bytes
// held in the read buffer are read again from the start of the chain, as
// Envoy's readDisable(false) does, so the guest sees them a second time
// and the upstream gets them once.
func TestTCPProxyGateContinuesFromTick(t *testing.T) {
	up := newTCPUpstream(t, "")
	p := startTCPProxy(t, tcpSpec{mode: "gate", upstream: up.ln.Addr().String()}, "")
	c := dialTCP(t, p)
	io.WriteString(c, "hi")
	if got := readN(t, c, 2); got != "hi" {
		t.Fatalf("echo %q", got)
	}
	c.CloseWrite()
	expectEOF(t, c)
	got := connLines(t, p.logs, "delete C")
	want := []string{
		"new connection C",
		`downstream data C len=2 end=false data="hi"`,
		"gate C opened",
		`downstream data C len=2 end=false data="hi"`,
	}
	if strings.Join(got[:4], "\n") != strings.Join(want, "\n") {
		t.Fatalf("callbacks:\n%s\nwant them to start with:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if recv, n := up.got(); recv != "hi" || n != 1 {
		t.Fatalf("upstream got %q over %d connections", recv, n)
	}
}

// TestTCPProxyCloseStream: proxy_close_stream(Downstream) closes the
// client connection once the callback returns; the bytes it was called on
// never reach the upstream, and the close is reported as Local.
func TestTCPProxyCloseStream(t *testing.T) {
	up := newTCPUpstream(t, "")
	p := startTCPProxy(t, tcpSpec{mode: "close-on=QUIT", upstream: up.ln.Addr().String()}, "")
	c := dialTCP(t, p)
	io.WriteString(c, "one\n")
	if got := readN(t, c, 4); got != "one\n" {
		t.Fatalf("echo %q", got)
	}
	io.WriteString(c, "QUIT\n")
	expectEOF(t, c)
	got := connLines(t, p.logs, "delete C")
	tail := strings.Join(got[len(got)-5:], "\n")
	if tail != "closing C\ndownstream close C peer=1\ndone C\nlog C in=4 out=4\ndelete C" {
		t.Fatalf("callbacks end with:\n%s", tail)
	}
	if recv, _ := up.got(); recv != "one\n" {
		t.Fatalf("upstream got %q", recv)
	}
}

// TestTCPProxyServerClosesFirst: a server that speaks first and closes:
// the client gets the bytes and an end of stream; the filter sees the
// upstream's end of stream and proxy_on_upstream_connection_close, and
// only when the client closes its side too is the connection closed, by
// the remote peer.
func TestTCPProxyServerClosesFirst(t *testing.T) {
	up := newTCPUpstream(t, "220 ready\n")
	p := startTCPProxy(t, tcpSpec{upstream: up.ln.Addr().String()}, "")
	c := dialTCP(t, p)
	if got := readN(t, c, 10); got != "220 ready\n" {
		t.Fatalf("banner %q", got)
	}
	expectEOF(t, c)
	p.logs.waitMatch(t, "tcpfilter", `upstream close \d+ peer=0`)
	c.CloseWrite()
	got := connLines(t, p.logs, "delete C")
	if i := indexOf(got, "downstream close C peer=2"); i < 0 || indexOf(got, "upstream close C peer=0") > i ||
		indexOf(got, `downstream data C len=0 end=true data=""`) > i {
		t.Fatalf("callbacks:\n%s", strings.Join(got, "\n"))
	}
}

func indexOf(list []string, s string) int {
	for i, l := range list {
		if l == s {
			return i
		}
	}
	return -1
}

// TestTCPProxyConnectFailure: with the upstream down, tcp_proxy closes the
// client connection (reads stay disabled while connecting, so the filter
// never sees the client's bytes); the close is Local.
func TestTCPProxyConnectFailure(t *testing.T) {
	port, err := testport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	p := startTCPProxy(t, tcpSpec{upstream: "127.0.0.1:" + strconv.Itoa(port)}, "")
	c := dialTCP(t, p)
	io.WriteString(c, "lost")
	io.ReadAll(c) // closed by the proxy (a reset is possible: unread bytes)
	got := connLines(t, p.logs, "delete C")
	want := "new connection C\ndownstream close C peer=1\ndone C\nlog C in=0 out=0\ndelete C"
	if strings.Join(got, "\n") != want {
		t.Fatalf("callbacks:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
	if stats := fetchStats(t, p); !strings.Contains(stats, `envoy_cluster_upstream_cx_connect_fail{envoy_cluster_name="origin"} 1`+"\n") {
		t.Fatalf("stats:\n%s", stats)
	}
}

// TestTCPProxyVMFailure: a trap in proxy_on_downstream_data fails the VM.
// Fail closed (the default), the connection is closed (Envoy's
// failStream(Downstream)); fail open, the bytes go on without the filter.
func TestTCPProxyVMFailure(t *testing.T) {
	for _, failOpen := range []bool{false, true} {
		t.Run(fmt.Sprintf("fail_open=%t", failOpen), func(t *testing.T) {
			up := newTCPUpstream(t, "")
			p := startTCPProxy(t, tcpSpec{mode: "trap-on=BOOM", failOpen: failOpen, upstream: up.ln.Addr().String()}, "")
			c := dialTCP(t, p)
			io.WriteString(c, "BOOM\n")
			if !failOpen {
				expectEOF(t, c)
				if recv, _ := up.got(); recv != "" {
					t.Fatalf("upstream got %q", recv)
				}
			} else if got := readN(t, c, 5); got != "BOOM\n" {
				t.Fatalf("echo %q", got)
			}
			if f := p.logs.vmFailures("tcpfilter"); len(f) != 1 {
				t.Fatalf("VM failures logged: %+v", f)
			}
		})
	}
}

// TestTCPProxyManyConnections: connections spread over the workers each
// get their own context and their own bytes.
func TestTCPProxyManyConnections(t *testing.T) {
	up := newTCPUpstream(t, "")
	p := startTCPProxy(t, tcpSpec{mode: "upper", upstream: up.ln.Addr().String()}, "")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := net.Dial("tcp", p.srv.Addr("tcp"))
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			msg := fmt.Sprintf("conn-%d\n", i)
			io.WriteString(c, msg)
			line, err := bufio.NewReader(c).ReadString('\n')
			if err != nil || line != strings.ToUpper(msg) {
				errs <- fmt.Errorf("conn %d: got %q, %v", i, line, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestTCPProxyWithoutFilters: tcp_proxy alone pipes bytes; a tcp_proxy
// whose cluster is not in the config is accepted at load, as in Envoy, and
// closes each connection (downstream_cx_no_route). Both listeners show in
// the admin's /listeners.
func TestTCPProxyWithoutFilters(t *testing.T) {
	up := newTCPUpstream(t, "")
	host, port, _ := net.SplitHostPort(up.ln.Addr().String())
	y := fmt.Sprintf(`admin: { address: { socket_address: { address: 127.0.0.1, port_value: 0 } } }
static_resources:
  listeners:
  - name: plain
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: plain, cluster: origin } }] }]
  - name: noroute
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    filter_chains: [{ filters: [{ name: envoy.filters.network.tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: lost, cluster: nowhere } }] }]
  clusters:
  - name: origin
    load_assignment:
      cluster_name: origin
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: %s, port_value: %s } } } }] }]
`, host, port)
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := envoy.Start(context.Background(), envoy.Options{ConfigPath: path, Workers: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	p := &runningProxy{srv: srv, logs: &logBuffer{}}

	c, err := net.Dial("tcp", srv.Addr("plain"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "plain bytes")
	if got := readN(t, c, 11); got != "plain bytes" {
		t.Fatalf("echo %q", got)
	}
	c.(*net.TCPConn).CloseWrite()
	expectEOF(t, c)

	lost, err := net.Dial("tcp", srv.Addr("noroute"))
	if err != nil {
		t.Fatal(err)
	}
	defer lost.Close()
	lost.SetDeadline(time.Now().Add(10 * time.Second))
	expectEOF(t, lost)
	if stats := fetchStats(t, p); !strings.Contains(stats, `envoy_tcp_downstream_cx_no_route{envoy_tcp_prefix="lost"} 1`+"\n") {
		t.Fatalf("stats:\n%s", stats)
	}
	resp, err := newConn(t).c.Get(p.adminURL("/listeners"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, l := range []string{"plain::" + srv.Addr("plain"), "noroute::" + srv.Addr("noroute")} {
		if !strings.Contains(string(b), l) {
			t.Errorf("/listeners lacks %q:\n%s", l, b)
		}
	}
}
