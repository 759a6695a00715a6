package proxy

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/netfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// recordingNet is a network filter that records its calls into a shared
// journal; holdFirst pauses the first downstream data and hands its
// callbacks to the test, which continues from another goroutine.
type recordingNet struct {
	name      string
	j         *journal
	cb        netfilter.Callbacks
	holdFirst bool
	held      chan netfilter.Callbacks
	seenData  bool
}

type journal struct {
	mu    sync.Mutex
	lines []string
	done  chan struct{}
	n     int // closes expected before done
}

func (j *journal) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
	if strings.Contains(j.lines[len(j.lines)-1], " close ") {
		if j.n--; j.n == 0 {
			close(j.done)
		}
	}
}

// wait returns once line was recorded.
func (j *journal) wait(t *testing.T, line string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j.mu.Lock()
		for _, l := range j.lines {
			if l == line {
				j.mu.Unlock()
				return
			}
		}
		j.mu.Unlock()
		if time.Now().After(deadline) {
			t.Fatalf("%q never recorded", line)
		}
		time.Sleep(time.Millisecond) // poll: the connection goroutine records it
	}
}

func (f *recordingNet) OnNewConnection() netfilter.Status {
	f.j.add("%s new", f.name)
	return netfilter.Continue
}

func (f *recordingNet) OnDownstreamData(buf *httpfilter.Buffer, end bool) netfilter.Status {
	f.j.add("%s down %q end=%t", f.name, buf.Bytes, end)
	if f.holdFirst && !f.seenData {
		f.seenData = true
		f.held <- f.cb
		return netfilter.StopIteration
	}
	return netfilter.Continue
}

func (f *recordingNet) OnUpstreamData(buf *httpfilter.Buffer, end bool) netfilter.Status {
	f.j.add("%s up %q end=%t", f.name, buf.Bytes, end)
	if len(buf.Bytes) > 0 {
		buf.Bytes = append([]byte(f.name+":"), buf.Bytes...)
	}
	return netfilter.Continue
}

func (f *recordingNet) OnDownstreamClose(peer netfilter.CloseType) {
	f.j.add("%s close peer=%d", f.name, peer)
}

type recordingNetFactory struct{ f *recordingNet }

func (r recordingNetFactory) NewNetworkFilter(cb netfilter.Callbacks) (netfilter.Filter, error) {
	r.f.cb = cb
	return r.f, nil
}
func (r recordingNetFactory) Close() error { return nil }

// TestTCPFilterManagerOrder: read filters run in config order and a
// paused one holds the bytes until ContinueReading (called from another
// goroutine) resumes after it; write filters run in reverse order, each
// seeing the previous one's edit; the close event reaches every filter.
func TestTCPFilterManagerOrder(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		c, err := up.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		b, _ := io.ReadAll(c) // until the client's half-close arrives
		c.Write([]byte(strings.ToUpper(string(b))))
	}()
	host, port, _ := net.SplitHostPort(up.Addr().String())
	cfg, err := config.Parse([]byte(fmt.Sprintf(`
static_resources:
  listeners:
  - name: tcp
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    filter_chains:
    - filters:
      - { name: a, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm, config: { vm_config: { code: { local: { filename: a.wasm } } } } } }
      - { name: b, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm, config: { vm_config: { code: { local: { filename: b.wasm } } } } } }
      - { name: tcp_proxy, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy, stat_prefix: t, cluster: up } }
  clusters:
  - name: up
    load_assignment: { cluster_name: up, endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: %s, port_value: %s } } } }] }] }
`, host, port)), "tcp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	j := &journal{done: make(chan struct{}), n: 2}
	a := &recordingNet{name: "a", j: j, holdFirst: true, held: make(chan netfilter.Callbacks, 1)}
	b := &recordingNet{name: "b", j: j}
	st := stats.New()
	clusters := NewClusters(cfg.Clusters, st)
	srv, err := Listen(Options{Config: cfg, Clusters: clusters, Stats: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		NetworkFilters: map[string][]netfilter.Factory{"tcp": {recordingNetFactory{a}, recordingNetFactory{b}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c, err := net.Dial("tcp", srv.Addr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "xy")
	cb := <-a.held // a paused on "xy"
	go cb.ContinueReading()
	j.wait(t, `b down "xy" end=false`)
	c.(*net.TCPConn).CloseWrite()
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "a:b:XY" {
		t.Fatalf("client got %q, %v; want the upstream's bytes edited by b, then a", got, err)
	}
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
		t.Fatal("close events did not arrive")
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	want1 := []string{"a new", "b new", `a down "xy" end=false`, `b down "xy" end=false`, `a down "" end=true`, `b down "" end=true`,
		`b up "XY" end=false`, `a up "b:XY" end=false`, `b up "" end=true`, `a up "" end=true`, "a close peer=1", "b close peer=1"}
	if s := strings.Join(j.lines, "\n"); s != strings.Join(want1, "\n") {
		t.Fatalf("calls:\n%s\nwant:\n%s", s, strings.Join(want1, "\n"))
	}
}
