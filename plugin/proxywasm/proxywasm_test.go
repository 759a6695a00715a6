package proxywasm_test

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/internal/bridge"
	"github.com/chimehq/chime/plugin/proxywasm/internal/hostcall"
	"github.com/chimehq/chime/plugin/proxywasm/proxytest"
)

// recorder is a test plugin whose behaviour each test configures.
type recorder struct {
	proxywasm.DefaultVMContext
	vmStart    bool
	configured []byte
	newStream  func(id uint32) proxywasm.HttpContext
	ticks      int
	queueReady []uint32
	pluginDone bool
}

func (r *recorder) OnVMStart(int) bool { return r.vmStart }

func (r *recorder) NewPluginContext(uint32) proxywasm.PluginContext { return &recorderPlugin{r: r} }

type recorderPlugin struct {
	proxywasm.DefaultPluginContext
	r *recorder
}

func (p *recorderPlugin) OnPluginStart(int) bool {
	cfg, err := proxywasm.GetPluginConfiguration()
	if err != nil {
		return false
	}
	p.r.configured = cfg
	return !bytes.Equal(cfg, []byte("reject"))
}

func (p *recorderPlugin) OnTick()                { p.r.ticks++ }
func (p *recorderPlugin) OnQueueReady(id uint32) { p.r.queueReady = append(p.r.queueReady, id) }
func (p *recorderPlugin) OnPluginDone() bool     { return p.r.pluginDone }
func (p *recorderPlugin) NewHttpContext(id uint32) proxywasm.HttpContext {
	if p.r.newStream == nil {
		return nil
	}
	return p.r.newStream(id)
}

// stream runs per-test hooks; unset hooks continue.
type stream struct {
	proxywasm.DefaultHttpContext
	id         uint32
	reqHeaders func(n int, eos bool) proxywasm.Action
	reqBody    func(size int, eos bool) proxywasm.Action
	done       int
}

func (s *stream) OnHttpRequestHeaders(n int, eos bool) proxywasm.Action {
	if s.reqHeaders == nil {
		return proxywasm.ActionContinue
	}
	return s.reqHeaders(n, eos)
}

func (s *stream) OnHttpRequestBody(size int, eos bool) proxywasm.Action {
	if s.reqBody == nil {
		return proxywasm.ActionContinue
	}
	return s.reqBody(size, eos)
}

func (s *stream) OnHttpStreamDone() { s.done++ }

func start(t *testing.T, r *recorder, config string) *proxytest.Host {
	t.Helper()
	h := proxytest.NewHost(proxytest.Options{VMContext: r, PluginConfiguration: []byte(config)})
	if !h.StartPlugin() {
		t.Fatalf("StartPlugin failed; logs %q", h.GetLogs(proxywasm.LogLevelTrace))
	}
	return h
}

func TestStartSequence(t *testing.T) {
	r := &recorder{vmStart: true}
	start(t, r, `{"a":1}`)
	if string(r.configured) != `{"a":1}` {
		t.Fatalf("configuration = %q", r.configured)
	}

	h := proxytest.NewHost(proxytest.Options{VMContext: &recorder{vmStart: true}, PluginConfiguration: []byte("reject")})
	if h.StartPlugin() {
		t.Fatal("StartPlugin succeeded although OnPluginStart returned false")
	}
	h = proxytest.NewHost(proxytest.Options{VMContext: &recorder{vmStart: false}})
	if h.StartPlugin() {
		t.Fatal("StartPlugin succeeded although OnVMStart returned false")
	}
	h = proxytest.NewHost(proxytest.Options{})
	if h.StartPlugin() {
		t.Fatal("StartPlugin succeeded without a VM context")
	}
}

// TestLogLevelChangeAppliesAtTheNextTick: the host's level is asked once
// per tick, not once per message; a runtime change applies from the tick.
func TestLogLevelChangeAppliesAtTheNextTick(t *testing.T) {
	r := &recorder{vmStart: true}
	h := start(t, r, "")
	h.SetLogLevel(proxywasm.LogLevelInfo)
	h.Tick()
	proxywasm.LogDebugf("dropped %d", 1)
	h.SetLogLevel(proxywasm.LogLevelDebug)
	proxywasm.LogDebugf("dropped %d", 2) // the level known since the tick
	if logs := h.GetLogs(proxywasm.LogLevelDebug); len(logs) != 0 {
		t.Fatalf("debug logs before the tick: %q", logs)
	}
	h.Tick()
	proxywasm.LogDebugf("kept %d", 3)
	if logs := h.GetLogs(proxywasm.LogLevelDebug); len(logs) != 1 || logs[0] != "kept 3" || !proxywasm.LogDebugEnabled() {
		t.Fatalf("debug logs after the tick: %q", logs)
	}
	// Another host (a new VM) is asked afresh.
	h2 := start(t, &recorder{vmStart: true}, "")
	h2.SetLogLevel(proxywasm.LogLevelWarn)
	if proxywasm.LogDebugEnabled() {
		t.Fatal("a new host answered with the previous host's level")
	}
}

func TestCallbacksRouteToTheirStream(t *testing.T) {
	streams := map[uint32]*stream{}
	var seen []string
	r := &recorder{vmStart: true, newStream: func(id uint32) proxywasm.HttpContext {
		s := &stream{id: id}
		s.reqHeaders = func(n int, eos bool) proxywasm.Action {
			p, err := proxywasm.GetHttpRequestHeader(":path")
			if err != nil {
				t.Errorf("stream %d: %v", id, err)
			}
			seen = append(seen, p)
			if n != 2 || !eos {
				t.Errorf("stream %d: n=%d eos=%v", id, n, eos)
			}
			return proxywasm.ActionPause
		}
		streams[id] = s
		return s
	}}
	h := start(t, r, "")
	a, b := h.InitializeHttpContext(), h.InitializeHttpContext()
	if got := h.CallOnRequestHeaders(b, [][2]string{{":path", "/b"}, {"x", "1"}}, true); got != proxywasm.ActionPause {
		t.Fatalf("action = %v", got)
	}
	h.CallOnRequestHeaders(a, [][2]string{{":path", "/a"}, {"x", "1"}}, true)
	if !reflect.DeepEqual(seen, []string{"/b", "/a"}) || streams[a].id != a {
		t.Fatalf("paths seen = %q", seen)
	}
	h.CompleteHttpContext(a)
	if streams[a].done != 1 || streams[b].done != 0 {
		t.Fatalf("done counts a=%d b=%d", streams[a].done, streams[b].done)
	}
	// The host may still deliver a late callback for a deleted context id.
	if got := h.CallOnRequestHeaders(b, [][2]string{{":path", "/late"}, {"x", "2"}}, true); got != proxywasm.ActionPause {
		t.Fatalf("live stream action = %v", got)
	}
	h.CompleteHttpContext(b)
	if streams[b].done != 1 {
		t.Fatalf("OnHttpStreamDone calls for b = %d, want exactly 1", streams[b].done)
	}
}

func TestNilHttpContextPassesThrough(t *testing.T) {
	h := start(t, &recorder{vmStart: true}, "")
	id := h.InitializeHttpContext()
	if got := h.CallOnRequestHeaders(id, [][2]string{{":path", "/"}}, false); got != proxywasm.ActionContinue {
		t.Fatalf("action = %v", got)
	}
	if got := h.CallOnRequestBody(id, []byte("x"), true); got != proxywasm.ActionContinue {
		t.Fatalf("action = %v", got)
	}
	if string(h.GetSentRequestBody(id)) != "x" {
		t.Fatalf("sent body = %q", h.GetSentRequestBody(id))
	}
}

func TestHeaderWrappers(t *testing.T) {
	var got [][2]string
	r := &recorder{vmStart: true, newStream: func(id uint32) proxywasm.HttpContext {
		return &stream{reqHeaders: func(int, bool) proxywasm.Action {
			must(t, proxywasm.RemoveHttpRequestHeader("content-length"))
			must(t, proxywasm.ReplaceHttpRequestHeader("x-a", "2"))
			must(t, proxywasm.AddHttpRequestHeader("x-b", "3"))
			if _, err := proxywasm.GetHttpRequestHeader("content-length"); !errors.Is(err, proxywasm.ErrNotFound) {
				t.Errorf("removed header lookup err = %v", err)
			}
			var err error
			got, err = proxywasm.GetHttpRequestHeaders()
			must(t, err)
			return proxywasm.ActionContinue
		}}
	}}
	h := start(t, r, "")
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, [][2]string{{":path", "/"}, {"content-length", "5"}, {"x-a", "1"}, {"x-a", "1b"}}, false)
	want := [][2]string{{":path", "/"}, {"x-a", "2"}, {"x-b", "3"}}
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(h.GetRequestHeaders(id), want) {
		t.Fatalf("headers = %q (host %q), want %q", got, h.GetRequestHeaders(id), want)
	}
}

func TestBodyBufferingAndReplace(t *testing.T) {
	var sizes []int
	r := &recorder{vmStart: true, newStream: func(id uint32) proxywasm.HttpContext {
		return &stream{reqBody: func(size int, eos bool) proxywasm.Action {
			sizes = append(sizes, size)
			if !eos {
				return proxywasm.ActionPause
			}
			body, err := proxywasm.GetHttpRequestBody(0, size)
			must(t, err)
			must(t, proxywasm.ReplaceHttpRequestBody(bytes.ToUpper(body)))
			must(t, hostcall.AppendBuffer(abi.BufferHttpRequestBody, []byte("!")))
			must(t, hostcall.PrependBuffer(abi.BufferHttpRequestBody, []byte(">")))
			return proxywasm.ActionContinue
		}}
	}}
	h := start(t, r, "")
	id := h.InitializeHttpContext()
	h.CallOnRequestBody(id, []byte("hel"), false)
	h.CallOnRequestBody(id, []byte("lo"), true)
	if !reflect.DeepEqual(sizes, []int{3, 5}) {
		t.Fatalf("body sizes = %v, want whole buffered size each time", sizes)
	}
	if got := string(h.GetSentRequestBody(id)); got != ">HELLO!" {
		t.Fatalf("forwarded body = %q", got)
	}
	if _, err := proxywasm.GetHttpRequestBody(-1, 3); !errors.Is(err, proxywasm.ErrBadArgument) {
		t.Fatalf("negative start err = %v", err)
	}
}

func TestDispatchHttpCallResumesItsStream(t *testing.T) {
	var got struct {
		headers, body string
		n             int
	}
	r := &recorder{vmStart: true}
	r.newStream = func(id uint32) proxywasm.HttpContext {
		return &stream{reqHeaders: func(int, bool) proxywasm.Action {
			_, err := proxywasm.DispatchHttpCall("host", [][2]string{{":method", "POST"}, {":path", "/p"}, {":authority", "h"}},
				[]byte("req"), nil, 250, func(n, size, _ int) {
					got.n = n
					if n == 0 {
						return
					}
					hs, err := proxywasm.GetHttpCallResponseHeaders()
					must(t, err)
					got.headers = hs[0][1]
					b, err := proxywasm.GetHttpCallResponseBody(0, size)
					must(t, err)
					got.body = string(b)
					must(t, proxywasm.ResumeHttpRequest())
				})
			must(t, err)
			return proxywasm.ActionPause
		}}
	}
	h := start(t, r, "")
	a, b := h.InitializeHttpContext(), h.InitializeHttpContext()
	h.CallOnRequestHeaders(a, [][2]string{{":path", "/"}}, true)
	h.CallOnRequestHeaders(b, [][2]string{{":path", "/"}}, true)
	calls := h.GetHttpCalls()
	if len(calls) != 2 || calls[0].Upstream != "host" || string(calls[0].Body) != "req" || calls[0].TimeoutMs != 250 || calls[0].ContextID != a {
		t.Fatalf("calls = %+v", calls)
	}
	h.CallOnHttpCallResponse(calls[0].ID, [][2]string{{":status", "200"}}, []byte("resp"), nil)
	if got.n != 1 || got.headers != "200" || got.body != "resp" {
		t.Fatalf("callback saw %+v", got)
	}
	if h.ResumedRequest(a) != 1 || h.ResumedRequest(b) != 0 {
		t.Fatalf("resumed a=%d b=%d; the callback must act on its own stream", h.ResumedRequest(a), h.ResumedRequest(b))
	}
	// An unknown or already-answered call id is ignored.
	h.CallOnHttpCallResponse(calls[0].ID, [][2]string{{":status", "200"}}, nil, nil)
	if h.ResumedRequest(a) != 1 {
		t.Fatal("a callback ran twice")
	}
	// A call whose stream is gone still reaches its callback (failure: no headers).
	h.CompleteHttpContext(b)
	got.n = -1
	h.CallOnHttpCallResponse(calls[1].ID, nil, nil, nil)
	if got.n != 0 {
		t.Fatalf("orphaned callback numHeaders = %d, want 0", got.n)
	}
}

func TestDispatchHttpCallErrors(t *testing.T) {
	var err1, err2 error
	r := &recorder{vmStart: true, newStream: func(uint32) proxywasm.HttpContext {
		return &stream{reqHeaders: func(int, bool) proxywasm.Action {
			_, err1 = proxywasm.DispatchHttpCall("host", [][2]string{{":method", "POST"}}, nil, nil, 1, func(int, int, int) {})
			_, err2 = proxywasm.DispatchHttpCall("host", [][2]string{{":method", "POST"}, {":path", "/"}, {":authority", "a"}}, nil, nil, 1, nil)
			return proxywasm.ActionContinue
		}}
	}}
	h := start(t, r, "")
	h.CallOnRequestHeaders(h.InitializeHttpContext(), nil, true)
	if !errors.Is(err1, proxywasm.ErrBadArgument) || !errors.Is(err2, proxywasm.ErrBadArgument) {
		t.Fatalf("errors = %v, %v", err1, err2)
	}
}

func TestPanicIsContainedAndFailsOpen(t *testing.T) {
	r := &recorder{vmStart: true, newStream: func(uint32) proxywasm.HttpContext {
		return &stream{reqHeaders: func(int, bool) proxywasm.Action {
			var m map[string]int
			//lint:ignore SA5000 the panic is the point: the guest must contain it
			m["boom"]++
			return proxywasm.ActionPause
		}}
	}}
	h := start(t, r, "")
	if got := h.CallOnRequestHeaders(h.InitializeHttpContext(), nil, true); got != proxywasm.ActionContinue {
		t.Fatalf("action after panic = %v, want Continue", got)
	}
	logs := h.GetLogs(proxywasm.LogLevelCritical)
	if len(logs) != 1 || !strings.Contains(logs[0], "proxy_on_request_headers") {
		t.Fatalf("critical logs = %q", logs)
	}
}

func TestTickQueueSharedDataMetricsProperties(t *testing.T) {
	r := &recorder{vmStart: true}
	h := proxytest.NewHost(proxytest.Options{VMContext: r, Properties: map[string][]byte{"plugin_name": []byte("chime")}, LogLevel: proxywasm.LogLevelWarn})
	if !h.StartPlugin() {
		t.Fatal("start failed")
	}
	must(t, proxywasm.SetTickPeriodMilliSeconds(500))
	h.Tick()
	if h.TickPeriod() != 500 || r.ticks != 1 {
		t.Fatalf("tick period %d, ticks %d", h.TickPeriod(), r.ticks)
	}

	// Shared queues, shared data and gauges are bound internally only.
	q, err := hostcall.RegisterSharedQueue("q")
	must(t, err)
	if q2, err := hostcall.ResolveSharedQueue("", "q"); err != nil || q2 != q {
		t.Fatalf("resolve = %d, %v", q2, err)
	}
	must(t, hostcall.EnqueueSharedQueue(q, []byte("item")))
	bridge.CurrentGuest().OnQueueReady(h.RootContextID(), q)
	if v, err := hostcall.DequeueSharedQueue(q); err != nil || string(v) != "item" || !reflect.DeepEqual(r.queueReady, []uint32{q}) {
		t.Fatalf("dequeue = %q, %v; ready %v", v, err, r.queueReady)
	}
	if _, err := hostcall.DequeueSharedQueue(q); !errors.Is(err, proxywasm.ErrEmpty) {
		t.Fatalf("empty dequeue err = %v", err)
	}

	must(t, hostcall.SetSharedData("k", []byte("v1"), 0))
	v, cas, err := hostcall.GetSharedData("k")
	if err != nil || string(v) != "v1" {
		t.Fatalf("get = %q, %v", v, err)
	}
	must(t, hostcall.SetSharedData("k", []byte("v2"), cas))
	if err := hostcall.SetSharedData("k", []byte("v3"), cas); !errors.Is(err, proxywasm.ErrCasMismatch) {
		t.Fatalf("stale CAS err = %v", err)
	}

	c, err := proxywasm.DefineCounterMetric("requests")
	must(t, err)
	must(t, c.Increment(2))
	must(t, c.Increment(3))
	if v, err := hostcall.GetMetric(uint32(c)); err != nil || v != 5 {
		t.Fatalf("counter = %d, %v", v, err)
	}
	if v, ok := h.GetCounterValue("requests"); !ok || v != 5 {
		t.Fatalf("host counter = %d, %v", v, ok)
	}
	g, err := hostcall.DefineMetric(abi.MetricGauge, "inflight")
	must(t, err)
	must(t, hostcall.RecordMetric(g, 4))
	must(t, hostcall.IncrementMetric(g, -1))
	if v, _ := hostcall.GetMetric(g); v != 3 {
		t.Fatalf("gauge = %d", v)
	}

	if v, err := proxywasm.GetProperty([]string{"plugin_name"}); err != nil || string(v) != "chime" {
		t.Fatalf("property = %q, %v", v, err)
	}
	if _, err := proxywasm.GetProperty([]string{"nope"}); !errors.Is(err, proxywasm.ErrNotFound) {
		t.Fatalf("missing property err = %v", err)
	}
	if l, err := hostcall.GetLogLevel(); err != nil || l != abi.LogLevelWarn {
		t.Fatalf("log level = %v, %v", l, err)
	}
	// Below the host's level a message is neither formatted nor sent.
	proxywasm.LogInfof("n=%d", 7)
	proxywasm.LogWarnf("n=%d", 8)
	if logs := h.GetLogs(proxywasm.LogLevelTrace); len(logs) != 1 || logs[0] != "n=8" {
		t.Fatalf("logs = %q, want only the warning", logs)
	}
}

func TestStatusErrors(t *testing.T) {
	var err error = proxywasm.ErrCasMismatch
	if !errors.Is(err, proxywasm.ErrCasMismatch) || err.Error() != "proxy-wasm: CAS mismatch" {
		t.Fatalf("err = %v", err)
	}
	if proxywasm.Status(99).Error() != "proxy-wasm: status 99" {
		t.Fatal(proxywasm.Status(99).Error())
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// lifetimes probes which maps and buffers the host lends in each phase.
type lifetimes struct {
	proxywasm.DefaultHttpContext
	seen map[string]error
}

func (l *lifetimes) probe(phase string) {
	_, err := proxywasm.GetHttpRequestHeader(":path")
	l.seen[phase+" request header"] = err
	_, err = proxywasm.GetHttpRequestBody(0, 10)
	l.seen[phase+" request body"] = err
}

func (l *lifetimes) OnHttpRequestHeaders(int, bool) proxywasm.Action {
	l.probe("headers")
	return proxywasm.ActionContinue
}

func (l *lifetimes) OnHttpRequestBody(int, bool) proxywasm.Action {
	l.probe("body")
	return proxywasm.ActionContinue
}

func (l *lifetimes) OnHttpResponseHeaders(int, bool) proxywasm.Action {
	l.probe("response")
	return proxywasm.ActionContinue
}

func (l *lifetimes) OnHttpStreamDone() { l.probe("log") }

// TestProxytestLendsMapsLikeEnvoy: request headers are readable only in
// their own callback (and in the access-log phase), the body only in its
// callback, as in Envoy and the local runtime.
func TestProxytestLendsMapsLikeEnvoy(t *testing.T) {
	l := &lifetimes{seen: map[string]error{}}
	r := &recorder{vmStart: true, newStream: func(uint32) proxywasm.HttpContext { return l }}
	h := start(t, r, "")
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, [][2]string{{":path", "/"}}, false)
	h.CallOnRequestBody(id, []byte("b"), true)
	h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	h.CompleteHttpContext(id)
	want := map[string]error{
		"headers request header": nil, "headers request body": proxywasm.ErrNotFound,
		"body request header": proxywasm.ErrBadArgument, "body request body": nil,
		"response request header": proxywasm.ErrBadArgument, "response request body": proxywasm.ErrNotFound,
		"log request header": nil, "log request body": proxywasm.ErrNotFound,
	}
	for k, w := range want {
		if got := l.seen[k]; !errors.Is(got, w) {
			t.Errorf("%s: err %v, want %v", k, got, w)
		}
	}
}
