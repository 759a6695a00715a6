//go:build wasip1

// Command conformance is the multi-purpose proxy-wasm test guest for
// wasmhost. Its plugin configuration picks a behaviour ("<mode> args...");
// it reports what it sees through proxy_log so tests can assert on it.
package main

import (
	"encoding/binary"
	"encoding/hex"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	g "github.com/chimehq/chime/envoy/internal/wasmhost/testdata/guestabi"
	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

func main() {}

var (
	mode    string
	args    []string
	rootID  uint32
	queueID uint32
	ticks   int
	// http call token -> stream context that made it
	callers = map[uint32]uint32{}
)

func itoa[T ~uint32 | ~int | ~uint64 | ~int64](v T) string { return strconv.FormatInt(int64(v), 10) }

func logf(parts ...string) {
	if mode != "bench" {
		g.Log(strings.Join(parts, " "))
	}
}

func arg(i int) string {
	if i < len(args) {
		return args[i]
	}
	return ""
}

func has(a string) bool {
	for _, x := range args {
		if x == a {
			return true
		}
	}
	return false
}

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onAlloc(size uint32) uint32 { return g.Alloc(size) }

//go:wasmexport proxy_on_context_create
func onContextCreate(id, parent uint32) {
	g.Reset()
	if parent == 0 {
		rootID = id
	}
	logf("create", itoa(id), itoa(parent))
}

//go:wasmexport proxy_on_vm_start
func onVMStart(id, size uint32) uint32 {
	g.Reset()
	cfg, st := g.GetBuffer(abi.BufferVMConfiguration)
	logf("vm_start", itoa(id), itoa(size), itoa(st), string(cfg))
	if string(cfg) == "fail-vm-start" {
		return 0
	}
	return 1
}

//go:wasmexport proxy_on_configure
func onConfigure(id, size uint32) uint32 {
	g.Reset()
	cfg, st := g.GetBuffer(abi.BufferPluginConfiguration)
	fields := strings.Fields(string(cfg))
	if len(fields) > 0 {
		mode, args = fields[0], fields[1:]
	}
	logf("configure", itoa(id), itoa(size), itoa(st), string(cfg))
	switch mode {
	case "fail-configure":
		return 0
	case "tick":
		ms, _ := strconv.Atoi(arg(0))
		logf("set_tick", itoa(g.ProxySetTickPeriod(uint32(ms))))
	case "queue":
		name := g.S("q")
		st := g.ProxyRegisterSharedQueue(name.A(), name.N(), g.Ptr(&queueID))
		runtime.KeepAlive(name.B)
		logf("registered", itoa(st), itoa(queueID))
	case "foreign":
		logf("f_declare", itoa(callForeign("declare_property", declareArgs("ro_prop", true, 1))))
		logf("f_declare_again", itoa(callForeign("declare_property", declareArgs("ro_prop", false, 1))))
		logf("f_declare_bad", itoa(callForeign("declare_property", []byte{0x0a, 0x7f})))
	case "trap":
		switch arg(0) {
		case "configure":
			trap(arg(1))
		case "tick":
			g.ProxySetTickPeriod(5)
		}
	}
	return 1
}

func trap(kind string) {
	switch kind {
	case "oob":
		*(*byte)(unsafe.Pointer(uintptr(0xfffffff0))) = 1
	case "exit":
		syscall.Exit(3)
	default:
		panic("conformance guest: requested panic")
	}
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n, eos uint32) uint32 {
	g.Reset()
	logf("req_headers", itoa(id), itoa(n), itoa(eos))
	switch mode {
	case "pause":
		if has("headers") {
			return 1
		}
	case "status":
		v, _ := strconv.Atoi(arg(0))
		return uint32(v)
	case "trap":
		// Only requests carrying x-trap fault, so one VM can serve both.
		if _, st := g.Header(abi.MapHttpRequestHeaders, "x-trap"); arg(0) == "req_headers" && st == 0 {
			trap(arg(1))
		}
	case "bench":
		g.Header(abi.MapHttpRequestHeaders, ":path")
	case "sleep":
		ms, _ := strconv.Atoi(arg(0))
		time.Sleep(time.Duration(ms) * time.Millisecond)
		logf("slept", itoa(ms))
	case "localreply":
		details, body := g.S("denied by wasm"), g.S("nope")
		hdrs := abi.EncodePairs([][2]string{{"x-wasm", "yes"}})
		st := g.ProxySendLocalResponse(403, details.A(), details.N(), body.A(), body.N(), g.Addr(hdrs), uint32(len(hdrs)), 0xffffffff)
		runtime.KeepAlive(details.B)
		runtime.KeepAlive(body.B)
		runtime.KeepAlive(hdrs)
		logf("local_reply", itoa(st))
		logf("after_local_reply")
		return 0
	case "closestream":
		logf("close_stream", itoa(g.ProxyCloseStream(uint32(abi.StreamHttpRequest))))
		logf("close_stream_bad", itoa(g.ProxyCloseStream(9)))
	case "httpcall":
		return httpCall(id)
	case "shared":
		sharedData()
	case "shared-read":
		v, cas, st := getShared("k")
		logf("shared_get", itoa(st), v, itoa(cas))
	case "queue":
		queue()
	case "metrics":
		metrics()
	case "props":
		props("req", reqProps)
	case "loglevel":
		logLevel()
	case "badptr":
		badPointers()
	case "headers":
		reqHeaderOps()
	case "routebody":
		// Hold the headers until the body names the route (docs/directives.md#routing).
		return 1
	case "foreign":
		foreign()
	case "stdio":
		println("to stderr")
		syscall.Write(1, []byte("to stdout\n"))
		syscall.Write(2, []byte("line one\nline two\n")) // one write, one entry
	case "env":
		v, _ := syscall.Getenv("CHIME_TEST")
		logf("env", v)
	}
	return 0
}

//go:wasmexport proxy_on_request_body
func onRequestBody(id, size, eos uint32) uint32 {
	g.Reset()
	logf("req_body", itoa(id), itoa(size), itoa(eos))
	switch mode {
	case "pause":
		if has("body") && eos == 0 {
			return 1
		}
	case "trap":
		if arg(0) == "req_body" {
			trap(arg(1))
		}
	case "setbuf":
		if arg(0) == "req" {
			return setBuffer(abi.BufferHttpRequestBody, eos)
		}
	case "bench":
		g.GetBuffer(abi.BufferHttpRequestBody)
	case "routebody":
		if eos == 0 {
			return 1
		}
		b, _ := g.GetBuffer(abi.BufferHttpRequestBody)
		if i := strings.Index(string(b), "route="); i >= 0 {
			name := strings.Fields(string(b[i+len("route="):]))[0]
			logf("route_header", itoa(g.EditHeader('r', abi.MapHttpRequestHeaders, "x-route", name)))
			logf("clear_route_cache", itoa(callForeign("clear_route_cache", nil)))
		}
		return 0
	case "abifuzz":
		if eos != 0 {
			script, _ := g.GetBuffer(abi.BufferHttpRequestBody)
			abiFuzz(script)
		}
	case "body":
		b, st := g.GetBuffer(abi.BufferHttpRequestBody)
		logf("body", itoa(st), string(b))
		part, st := g.Out1(func(d, s uint32) uint32 { return g.ProxyGetBufferBytes(uint32(abi.BufferHttpRequestBody), 1, 2, d, s) })
		logf("body_part", itoa(st), string(part))
		past, st := g.Out1(func(d, s uint32) uint32 {
			return g.ProxyGetBufferBytes(uint32(abi.BufferHttpRequestBody), 1000, 5, d, s)
		})
		logf("body_past", itoa(st), itoa(len(past)))
	}
	return 0
}

//go:wasmexport proxy_on_request_trailers
func onRequestTrailers(id, n uint32) uint32 {
	g.Reset()
	logf("req_trailers", itoa(id), itoa(n))
	if mode == "pause" && has("trailers") {
		return 1
	}
	return 0
}

//go:wasmexport proxy_on_response_headers
func onResponseHeaders(id, n, eos uint32) uint32 {
	g.Reset()
	logf("resp_headers", itoa(id), itoa(n), itoa(eos))
	switch mode {
	case "pause":
		if has("headers") {
			return 1
		}
	case "trap":
		if arg(0) == "resp_headers" {
			trap(arg(1))
		}
	case "bench":
		g.EditHeader('a', abi.MapHttpResponseHeaders, "x-wasm", "1")
	case "props":
		props("resp", respProps)
	case "headers":
		_, st := g.Header(abi.MapHttpRequestHeaders, ":path")
		logf("resp_phase_req_header", itoa(st))
		p := abi.EncodePairs([][2]string{{":status", "201"}, {"X-Set", "yes"}})
		logf("set_pairs", itoa(g.ProxySetHeaderMapPairs(uint32(abi.MapHttpResponseHeaders), g.Addr(p), uint32(len(p)))))
		runtime.KeepAlive(p)
		v, st := g.Header(abi.MapHttpResponseHeaders, "x-set")
		logf("resp_x_set", itoa(st), v)
	}
	return 0
}

//go:wasmexport proxy_on_response_body
func onResponseBody(id, size, eos uint32) uint32 {
	g.Reset()
	logf("resp_body", itoa(id), itoa(size), itoa(eos))
	switch mode {
	case "pause":
		if has("body") && eos == 0 {
			return 1
		}
	case "setbuf":
		if arg(0) == "resp" {
			return setBuffer(abi.BufferHttpResponseBody, eos)
		}
	}
	return 0
}

//go:wasmexport proxy_on_response_trailers
func onResponseTrailers(id, n uint32) uint32 {
	g.Reset()
	logf("resp_trailers", itoa(id), itoa(n))
	if mode == "pause" && has("trailers") {
		return 1
	}
	return 0
}

//go:wasmexport proxy_on_log
func onLog(id uint32) {
	g.Reset()
	logf("log", itoa(id))
	switch mode {
	case "props":
		props("log", logProps)
	case "headers":
		v, st := g.Header(abi.MapHttpRequestHeaders, ":path")
		logf("log_req_path", itoa(st), v)
		_, st = g.Header(abi.MapHttpRequestTrailers, "x")
		logf("log_req_trailer", itoa(st))
	}
}

//go:wasmexport proxy_on_done
func onDone(id uint32) uint32 {
	g.Reset()
	logf("done", itoa(id))
	return 1
}

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	g.Reset()
	logf("delete", itoa(id))
}

//go:wasmexport proxy_on_tick
func onTick(id uint32) {
	g.Reset()
	ticks++
	logf("tick", itoa(id), itoa(ticks))
	if ticks == 3 {
		logf("tick_off", itoa(g.ProxySetTickPeriod(0)))
	}
	if mode == "trap" && arg(0) == "tick" {
		trap(arg(1))
	}
}

//go:wasmexport proxy_on_queue_ready
func onQueueReady(id, token uint32) {
	g.Reset()
	logf("queue_ready", itoa(id), itoa(token))
	v, st := g.Out1(func(d, s uint32) uint32 { return g.ProxyDequeueSharedQueue(token, d, s) })
	logf("dequeue", itoa(st), string(v))
	_, st = g.Out1(func(d, s uint32) uint32 { return g.ProxyDequeueSharedQueue(token, d, s) })
	logf("dequeue_again", itoa(st))
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(id, token, nh, bodySize, nt uint32) {
	g.Reset()
	logf("http_response", itoa(id), itoa(token), itoa(nh), itoa(bodySize), itoa(nt))
	if nh > 0 {
		status, st := g.Header(abi.MapHttpCallResponseHeaders, ":status")
		body, bst := g.GetBuffer(abi.BufferHttpCallResponseBody)
		tr, tst := g.Header(abi.MapHttpCallResponseTrailers, "x-trailer")
		logf("http_response_data", itoa(st), status, itoa(bst), string(body), itoa(tst), tr)
		_, sst := g.Out1(func(d, s uint32) uint32 { return g.ProxyGetHeaderMapSize(uint32(abi.MapHttpCallResponseHeaders), d) })
		logf("http_response_size_status", itoa(sst))
	}
	stream := callers[token]
	delete(callers, token)
	st := g.ProxySetEffectiveContext(stream)
	logf("effective", itoa(stream), itoa(st))
	if st != 0 {
		return
	}
	status, _ := g.Header(abi.MapHttpCallResponseHeaders, ":status")
	if status == "" {
		status = "failed"
	}
	logf("add_header", itoa(g.EditHeader('a', abi.MapHttpRequestHeaders, "x-call-status", status)))
	logf("continue", itoa(g.ProxyContinueStream(uint32(abi.StreamHttpRequest))))
}

func httpCall(id uint32) uint32 {
	hdrs := [][2]string{{":method", "GET"}, {":path", "/call"}, {":authority", "host.example"}}
	switch arg(2) {
	case "nopath":
		hdrs = hdrs[:1]
	case "nomethod":
		hdrs = hdrs[1:]
	case "noauthority":
		hdrs = hdrs[:2]
	}
	timeout, _ := strconv.Atoi(arg(1))
	up := g.S(arg(0))
	h := abi.EncodePairs(hdrs)
	body := []byte("call-body")
	tr := abi.EncodePairs([][2]string{{"x-req-trailer", "t"}})
	var token uint32
	st := g.ProxyHTTPCall(up.A(), up.N(), g.Addr(h), uint32(len(h)), g.Addr(body), uint32(len(body)), g.Addr(tr), uint32(len(tr)), uint32(int32(timeout)), g.Ptr(&token))
	runtime.KeepAlive(up.B)
	runtime.KeepAlive(h)
	runtime.KeepAlive(body)
	runtime.KeepAlive(tr)
	logf("http_call", itoa(st), itoa(token))
	if st != 0 {
		return 0
	}
	callers[token] = id
	return 1
}

func setBuffer(typ abi.BufferType, eos uint32) uint32 {
	if eos == 0 {
		return 1
	}
	for _, op := range args[1:] {
		f := strings.SplitN(op, ",", 3)
		start, _ := strconv.ParseUint(f[0], 10, 32)
		size, _ := strconv.ParseUint(f[1], 10, 32)
		logf("set_buffer", op, itoa(g.SetBuffer(typ, uint32(start), uint32(size), f[2])))
	}
	b, _ := g.GetBuffer(typ)
	logf("buffer_now", string(b))
	return 0
}

func getShared(key string) (string, uint32, uint32) {
	k := g.S(key)
	var cas uint32
	v, st := g.Out1(func(d, s uint32) uint32 { return g.ProxyGetSharedData(k.A(), k.N(), d, s, g.Ptr(&cas)) })
	runtime.KeepAlive(k.B)
	return string(v), cas, st
}

func setShared(key, value string, cas uint32) uint32 {
	k, v := g.S(key), g.S(value)
	st := g.ProxySetSharedData(k.A(), k.N(), v.A(), v.N(), cas)
	runtime.KeepAlive(k.B)
	runtime.KeepAlive(v.B)
	return st
}

func sharedData() {
	v, cas, st := getShared("k")
	logf("shared_get0", itoa(st), v)
	logf("shared_set1", itoa(setShared("k", "v1", 0)))
	v, cas, st = getShared("k")
	logf("shared_get1", itoa(st), v, itoa(cas))
	logf("shared_set2", itoa(setShared("k", "v2", cas)))
	logf("shared_set3", itoa(setShared("k", "v3", cas)))
	v, _, st = getShared("k")
	logf("shared_get2", itoa(st), v)
}

func queue() {
	vm, name := g.S(""), g.S("q")
	var tok uint32
	st := g.ProxyResolveSharedQueue(vm.A(), vm.N(), name.A(), name.N(), g.Ptr(&tok))
	logf("resolve", itoa(st), itoa(tok))
	other := g.S("other-vm")
	var tok2 uint32
	logf("resolve_other", itoa(g.ProxyResolveSharedQueue(other.A(), other.N(), name.A(), name.N(), g.Ptr(&tok2))))
	data := g.S("hello")
	logf("enqueue", itoa(g.ProxyEnqueueSharedQueue(tok, data.A(), data.N())))
	logf("enqueue_bad", itoa(g.ProxyEnqueueSharedQueue(0xdead0, data.A(), data.N())))
	runtime.KeepAlive(vm.B)
	runtime.KeepAlive(name.B)
	runtime.KeepAlive(other.B)
	runtime.KeepAlive(data.B)
}

func define(typ abi.MetricType, name string) (uint32, uint32) {
	n := g.S(name)
	var id uint32
	st := g.ProxyDefineMetric(uint32(typ), n.A(), n.N(), g.Ptr(&id))
	runtime.KeepAlive(n.B)
	return id, st
}

func getMetric(id uint32) (uint64, uint32) {
	var v uint64
	st := g.ProxyGetMetric(id, g.Ptr(&v))
	return v, st
}

func metrics() {
	c, st := define(abi.MetricCounter, "wasm_requests")
	logf("define_counter", itoa(st), itoa(c))
	logf("inc_counter", itoa(g.ProxyIncrementMetric(c, 5)))
	logf("dec_counter", itoa(g.ProxyIncrementMetric(c, -1)))
	logf("record_counter", itoa(g.ProxyRecordMetric(c, 2)))
	v, st := getMetric(c)
	logf("get_counter", itoa(st), itoa(v))
	gg, st := define(abi.MetricGauge, "wasm_inflight")
	logf("define_gauge", itoa(st), itoa(gg))
	g.ProxyIncrementMetric(gg, 10)
	g.ProxyIncrementMetric(gg, -3)
	v, st = getMetric(gg)
	logf("get_gauge", itoa(st), itoa(v))
	logf("record_gauge", itoa(g.ProxyRecordMetric(gg, 100)))
	v, _ = getMetric(gg)
	logf("get_gauge2", itoa(v))
	h, st := define(abi.MetricHistogram, "wasm_latency")
	logf("define_hist", itoa(st), itoa(h))
	logf("record_hist", itoa(g.ProxyRecordMetric(h, 42)))
	_, st = getMetric(h)
	logf("get_hist", itoa(st))
	logf("inc_hist", itoa(g.ProxyIncrementMetric(h, 1)))
	_, st = define(7, "bad")
	logf("define_bad", itoa(st))
	_, st = getMetric(4000)
	logf("get_unknown", itoa(st))
}

var reqProps = [][]string{
	{"request", "path"}, {"request", "url_path"}, {"request", "query"}, {"request", "host"}, {"request", "scheme"},
	{"request", "method"}, {"request", "headers"}, {"request", "headers", "x-foo"}, {"request", "id"},
	{"request", "protocol"}, {"request", "time"}, {"request", "size"}, {"request", "total_size"},
	{"request", "referer"}, {"request", "useragent"}, {"response", "code"}, {"source", "address"},
	{"source", "port"}, {"destination", "address"}, {"destination", "port"}, {"connection", "id"},
	{"plugin_name"}, {"plugin_root_id"}, {"plugin_vm_id"}, {"xds", "node", "id"}, {"xds", "node", "cluster"},
	{"node"}, {"xds", "cluster_name"}, {"xds", "route_name"}, {"route_name"}, {"cluster_name"},
	{"xds", "route_metadata"}, {"route_metadata"}, {"metadata"}, {"metadata", "filter_metadata"},
	{"listener_direction"}, {"no", "such"}, {"my_key"},
	{"request"}, {"upstream"}, {"xds"}, {"connection_id"}, {"request", "path", "x"}, {"connection", "nope"},
	{"upstream", "address"}, {"plugin_name", "x"}, {"connection", "mtls"}, {"xds", "nope"},
}

var respProps = [][]string{
	{"response", "code"}, {"response", "headers", "content-type"}, {"request", "path"}, {"my_key"},
}

var logProps = [][]string{
	{"request", "path"}, {"response", "code"}, {"response", "code_details"}, {"response", "size"},
}

func props(phase string, paths [][]string) {
	if phase == "req" {
		k, v := g.S("my_key"), g.S("my-value")
		logf("set_property", itoa(g.ProxySetProperty(k.A(), k.N(), v.A(), v.N())))
		runtime.KeepAlive(k.B)
		runtime.KeepAlive(v.B)
	}
	for _, p := range paths {
		v, st := g.Property(p...)
		logf("prop", phase, strings.Join(p, "."), itoa(st), hex.EncodeToString(v))
	}
}

func logLevel() {
	var lvl uint32
	st := g.ProxyGetLogLevel(g.Ptr(&lvl))
	logf("log_level", itoa(st), itoa(lvl))
	logf("log_bad_level", itoa(g.LogAt(9, "x")))
	for l := abi.LogLevelTrace; l <= abi.LogLevelCritical; l++ {
		g.LogAt(l, "level-"+itoa(l))
	}
}

func reqHeaderOps() {
	v, st := g.Header(abi.MapHttpRequestHeaders, ":path")
	logf("get_path", itoa(st), v)
	_, st = g.Header(abi.MapHttpRequestHeaders, "missing")
	logf("get_missing", itoa(st))
	logf("add", itoa(g.EditHeader('a', abi.MapHttpRequestHeaders, "X-Added", "1")))
	logf("replace_path", itoa(g.EditHeader('r', abi.MapHttpRequestHeaders, ":path", "/rewritten")))
	logf("replace_new", itoa(g.EditHeader('r', abi.MapHttpRequestHeaders, "x-new", "n")))
	logf("remove", itoa(g.EditHeader('d', abi.MapHttpRequestHeaders, "x-remove", "")))
	var size uint32
	logf("size", itoa(g.ProxyGetHeaderMapSize(uint32(abi.MapHttpRequestHeaders), g.Ptr(&size))), itoa(size))
	pairs, st := g.Out1(func(d, s uint32) uint32 { return g.ProxyGetHeaderMapPairs(uint32(abi.MapHttpRequestHeaders), d, s) })
	var keys []string
	decoded, _ := abi.DecodePairs(pairs)
	for _, kv := range decoded {
		keys = append(keys, kv[0]+"="+kv[1])
	}
	logf("pairs", itoa(st), strings.Join(keys, ","))
	_, st = g.Header(abi.MapHttpCallResponseHeaders, ":status")
	logf("call_headers_outside", itoa(st))
	var n, flags uint32
	logf("call_body_outside", itoa(g.ProxyGetBufferStatus(uint32(abi.BufferHttpCallResponseBody), g.Ptr(&n), g.Ptr(&flags))))
	logf("plugin_config_outside", itoa(g.ProxyGetBufferStatus(uint32(abi.BufferPluginConfiguration), g.Ptr(&n), g.Ptr(&flags))))
	logf("vm_config", itoa(g.ProxyGetBufferStatus(uint32(abi.BufferVMConfiguration), g.Ptr(&n), g.Ptr(&flags))), itoa(n))
	logf("set_vm_config", itoa(g.SetBuffer(abi.BufferVMConfiguration, 0, 0, "x")))
	logf("set_body_outside", itoa(g.SetBuffer(abi.BufferHttpRequestBody, 0, 0, "x")))
	_, st = g.Header(99, "x")
	logf("bad_map_type", itoa(st))
	logf("bad_buffer_type", itoa(g.ProxyGetBufferStatus(99, g.Ptr(&n), g.Ptr(&flags))))
	logf("bad_stream_type", itoa(g.ProxyContinueStream(9)))
	logf("upstream_continue", itoa(g.ProxyContinueStream(uint32(abi.StreamUpstream))))
	logf("effective_bad", itoa(g.ProxySetEffectiveContext(9999)))
	logf("done", itoa(g.ProxyDone()))
	name := g.S("nope")
	var rp, rs uint32
	logf("foreign", itoa(g.ProxyCallForeignFunction(name.A(), name.N(), 0, 0, g.Ptr(&rp), g.Ptr(&rs))))
	runtime.KeepAlive(name.B)
}

func callForeign(name string, args []byte) uint32 {
	_, st := callForeignOut(name, args)
	return st
}

func callForeignOut(name string, args []byte) ([]byte, uint32) {
	n := g.S(name)
	var a uint32
	if len(args) > 0 {
		a = g.Addr(args)
	}
	out, st := g.Out1(func(d, s uint32) uint32 {
		return g.ProxyCallForeignFunction(n.A(), n.N(), a, uint32(len(args)), d, s)
	})
	runtime.KeepAlive(n.B)
	runtime.KeepAlive(args)
	return out, st
}

// declareArgs encodes DeclarePropertyArguments{name: 1, readonly: 2, type: 3}.
func declareArgs(name string, readonly bool, typ byte) []byte {
	b := append([]byte{0x0a, byte(len(name))}, name...)
	if readonly {
		b = append(b, 0x10, 1)
	}
	return append(b, 0x18, typ)
}

func setProp(name, value string) uint32 {
	k, v := g.S(name), g.S(value)
	st := g.ProxySetProperty(k.A(), k.N(), v.A(), v.N())
	runtime.KeepAlive(k.B)
	runtime.KeepAlive(v.B)
	return st
}

// foreign exercises Envoy's foreign functions (docs/local-runtime.md).
func foreign() {
	logf("f_clear_route_cache", itoa(callForeign("clear_route_cache", nil)))
	z, st := callForeignOut("compress", []byte("hello hello hello hello"))
	logf("f_compress", itoa(st), hex.EncodeToString(z[:2]))
	plain, st := callForeignOut("uncompress", z)
	logf("f_uncompress", itoa(st), string(plain))
	_, st = callForeignOut("uncompress", []byte("not zlib"))
	logf("f_uncompress_bad", itoa(st))
	// Declared on a stream context, a prototype is not the root's: no effect.
	logf("f_declare_stream", itoa(callForeign("declare_property", declareArgs("stream_prop", true, 1))))
	logf("f_set_stream_prop", itoa(setProp("stream_prop", "a")), itoa(setProp("stream_prop", "b")))
	logf("f_set_ro", itoa(setProp("ro_prop", "first")))
	logf("f_set_ro_again", itoa(setProp("ro_prop", "second")))
	v, st := g.Property("ro_prop")
	logf("f_get_ro", itoa(st), string(v))
	logf("f_set_rw", itoa(setProp("rw_prop", "a")), itoa(setProp("rw_prop", "b")))
	logf("f_unknown", itoa(callForeign("no_such_function", nil)))
}

// badPointers hands the host out-of-range addresses; every call must come
// back INVALID_MEMORY_ACCESS (6) and the guest must keep running.
func badPointers() {
	const bad = 0xfffffff0
	ok := g.S("plugin_name")
	var out uint32
	var res []string
	add := func(name string, st uint32) { res = append(res, name+"="+itoa(st)) }
	add("log", g.ProxyLog(2, bad, 100))
	add("get_property_path", g.ProxyGetProperty(bad, 100, g.Ptr(&out), g.Ptr(&out)))
	add("get_property_ret", g.ProxyGetProperty(ok.A(), ok.N(), bad, bad))
	add("set_property", g.ProxySetProperty(bad, 10, bad, 10))
	add("get_buffer_ret", g.ProxyGetBufferBytes(6, 0, 100, bad, bad))
	add("get_buffer_status", g.ProxyGetBufferStatus(6, bad, bad))
	add("set_buffer", g.ProxySetBufferBytes(0, 0, 0, bad, 10))
	add("get_pairs", g.ProxyGetHeaderMapPairs(0, bad, bad))
	add("set_pairs", g.ProxySetHeaderMapPairs(0, bad, 100))
	add("get_value", g.ProxyGetHeaderMapValue(0, bad, 10, g.Ptr(&out), g.Ptr(&out)))
	add("add_value", g.ProxyAddHeaderMapValue(0, ok.A(), ok.N(), bad, 10))
	add("map_size", g.ProxyGetHeaderMapSize(0, bad))
	add("http_call", g.ProxyHTTPCall(bad, 10, 0, 0, 0, 0, 0, 0, 100, g.Ptr(&out)))
	add("http_call_token", g.ProxyHTTPCall(ok.A(), ok.N(), 0, 0, 0, 0, 0, 0, 100, bad))
	add("set_shared", g.ProxySetSharedData(bad, 10, 0, 0, 0))
	add("get_shared", g.ProxyGetSharedData(bad, 10, bad, bad, bad))
	add("register_queue", g.ProxyRegisterSharedQueue(bad, 10, g.Ptr(&out)))
	add("enqueue", g.ProxyEnqueueSharedQueue(1, bad, 10))
	add("define_metric", g.ProxyDefineMetric(0, bad, 10, g.Ptr(&out)))
	id, _ := define(abi.MetricCounter, "badptr_counter")
	add("get_metric", g.ProxyGetMetric(id, bad))
	add("local_response", g.ProxySendLocalResponse(500, 0, 0, bad, 10, 0, 0, 0))
	add("log_level", g.ProxyGetLogLevel(bad))
	add("effective_foreign", g.ProxyCallForeignFunction(bad, 10, 0, 0, bad, bad))
	runtime.KeepAlive(ok.B)
	logf("badptr", strings.Join(res, " "))
	logf("badptr_survived")
}

// scratch is where abifuzz points the host: in-range arguments land in it.
var scratch [4096]byte

// abiFuzz (FuzzHostABI) runs the request body as a script of host calls
// with guest-chosen pointers and sizes: per call one op byte and five
// little-endian uint32 arguments. An argument with bit 31 clear is an
// offset into scratch, so reads and writes hit real guest memory; one with
// it set is passed raw (out of bounds). The host must answer every call
// with a status, never crash.
func abiFuzz(script []byte) {
	copy(scratch[:], script)
	base := uint32(uintptr(unsafe.Pointer(&scratch[0])))
	arg := func(b []byte) uint32 {
		v := binary.LittleEndian.Uint32(b)
		if v&0x80000000 != 0 {
			return v
		}
		return base + v%uint32(len(scratch))
	}
	size := func(v uint32) uint32 { return v % 512 } // sizes stay small but may overrun scratch's end
	for len(script) >= 21 {
		op := script[0] % 16
		a := [5]uint32{arg(script[1:]), arg(script[5:]), arg(script[9:]), arg(script[13:]), arg(script[17:])}
		cur := script
		raw := func(i int) uint32 { return binary.LittleEndian.Uint32(cur[1+4*i:]) }
		script = script[21:]
		switch op {
		case 0:
			g.ProxyGetProperty(a[0], size(raw(1)), a[2], a[3])
		case 1:
			g.ProxySetProperty(a[0], size(raw(1)), a[2], size(raw(3)))
		case 2:
			g.ProxyGetBufferBytes(raw(0)%9, raw(1), raw(2), a[3], a[4])
		case 3:
			g.ProxySetBufferBytes(raw(0)%9, raw(1)%64, raw(2)%64, a[3], size(raw(4)))
		case 4:
			g.ProxyGetHeaderMapPairs(raw(0)%8, a[1], a[2])
		case 5:
			g.ProxySetHeaderMapPairs(raw(0)%8, a[1], size(raw(2)))
		case 6:
			g.ProxyGetHeaderMapValue(raw(0)%8, a[1], size(raw(2)), a[3], a[4])
		case 7:
			g.ProxyAddHeaderMapValue(raw(0)%8, a[1], size(raw(2)), a[3], size(raw(4)))
		case 8:
			g.ProxyReplaceHeaderMapValue(raw(0)%8, a[1], size(raw(2)), a[3], size(raw(4)))
		case 9:
			g.ProxyRemoveHeaderMapValue(raw(0)%8, a[1], size(raw(2)))
		case 10:
			g.ProxyHTTPCall(a[0], size(raw(1)), a[2], size(raw(3)), a[4], size(raw(0)), a[1], size(raw(2)), raw(3)%50, a[4])
		case 11:
			g.ProxyGetSharedData(a[0], size(raw(1)), a[2], a[3], a[4])
		case 12:
			g.ProxySetSharedData(a[0], size(raw(1)), a[2], size(raw(3)), raw(4))
		case 13:
			g.ProxyLog(raw(0)%8, a[1], size(raw(2)))
		case 14:
			g.ProxyGetBufferStatus(raw(0)%9, a[1], a[2])
		case 15:
			g.ProxyGetHeaderMapSize(raw(0)%8, a[1])
		}
	}
	logf("abifuzz_done")
}
