package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the native side of the comparison must know the zones too

	"github.com/chimehq/chime/plugin/internal/wasmcheck"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// chimeWasm is chime.wasm, built once for the whole test binary.
var (
	chimeWasm []byte
	cache     = wazero.NewCompilationCache()
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "chime-wasm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	out := filepath.Join(dir, "chime.wasm")
	if err := wasmcheck.Build(".", ".", out); err == nil {
		chimeWasm, err = os.ReadFile(out)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestImportsAreEnvoy138Subset: every WASI import is one Envoy 1.38
// provides and every env import is an ABI v0.2.1 proxy_* function with the
// right signature, so the module loads in released Envoy.
func TestImportsAreEnvoy138Subset(t *testing.T) {
	ctx := context.Background()
	imports, err := wasmcheck.Imports(ctx, chimeWasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmcheck.CheckImports(imports); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, im := range imports {
		if im.Module == "env" {
			env = append(env, im.Name)
		}
	}
	for _, want := range []string{"proxy_http_call", "proxy_continue_stream", "proxy_get_buffer_bytes", "proxy_define_metric"} {
		if !slices.Contains(env, want) {
			t.Errorf("chime.wasm does not import %s; imports %q", want, env)
		}
	}

	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	mod, err := r.CompileModule(ctx, chimeWasm)
	if err != nil {
		t.Fatal(err)
	}
	exports := mod.ExportedFunctions()
	if _, ok := exports["_start"]; ok {
		t.Error("module exports _start; it must be a reactor")
	}
	for _, name := range []string{"_initialize", "proxy_abi_version_0_2_1", "proxy_on_memory_allocate",
		"proxy_on_vm_start", "proxy_on_configure", "proxy_on_context_create", "proxy_on_request_headers",
		"proxy_on_request_body", "proxy_on_request_trailers", "proxy_on_response_headers",
		"proxy_on_response_body", "proxy_on_response_trailers", "proxy_on_http_call_response",
		"proxy_on_tick", "proxy_on_queue_ready", "proxy_on_log", "proxy_on_done", "proxy_on_delete",
		"proxy_on_foreign_function"} {
		if _, ok := exports[name]; !ok {
			t.Errorf("missing export %s", name)
		}
	}
}

// harness is a minimal proxy-wasm host on wazero: just the env functions
// chime.wasm imports, and WASI with poll_oneoff answering ENOSYS as
// Envoy 1.33–1.38 do.
type harness struct {
	t         testing.TB
	ctx       context.Context
	mod       api.Module
	config    []byte
	effective uint32
	polls     int
	stderr    bytes.Buffer
	logs      []string
	unknown   []string // host functions called that the harness lacks

	reqHeaders map[uint32][][2]string
	reqBody    map[uint32][]byte
	setBody    map[uint32][]byte // bodies the guest replaced
	continued  map[uint32]int    // request resumes

	props         map[string][]byte // property path joined with "." → value
	respHeaders   map[uint32][][2]string
	respBody      map[uint32][]byte // the response chunk buffer the guest sees
	respPaused    map[uint32]bool   // the guest paused the response body: it buffers
	respSent      map[uint32][]byte // response bytes forwarded to the client
	respContinued map[uint32]int
	calls         []harnessCall
	callResp      [][2]string
	callBody      []byte
	metrics       []uint64
	tickMs        uint32
}

type harnessCall struct {
	id, context uint32
	cluster     string
	headers     [][2]string
	body        []byte
	timeout     uint32
}

// ABI v0.2.1 constants, spelled out independently of package proxywasm.
const (
	statusOK                   = 0
	statusNotFound             = 1
	wasiENOSYS                 = 52
	bufferHttpRequestBody      = 0
	bufferHttpResponseBody     = 1
	bufferHttpCallResponseBody = 4
	bufferPluginConfiguration  = 7
	mapHttpRequestHeaders      = 0
	mapHttpResponseHeaders     = 2
	streamHttpResponse         = 1
	mapHttpCallResponseHeaders = 6
)

// encodePairs and decodePairs are the harness's own v0.2.1 header-map
// codec, so the guest's codec is checked against a second implementation.
func encodePairs(pairs [][2]string) []byte {
	if len(pairs) == 0 {
		return nil
	}
	head := binary.LittleEndian.AppendUint32(nil, uint32(len(pairs)))
	var data []byte
	for _, kv := range pairs {
		head = binary.LittleEndian.AppendUint32(head, uint32(len(kv[0])))
		head = binary.LittleEndian.AppendUint32(head, uint32(len(kv[1])))
		data = append(append(append(append(data, kv[0]...), 0), kv[1]...), 0)
	}
	return append(head, data...)
}

func decodePairs(b []byte) ([][2]string, error) {
	if len(b) == 0 {
		return nil, nil
	}
	if len(b) < 4 {
		return nil, errors.New("short pairs")
	}
	n := int(binary.LittleEndian.Uint32(b))
	if 4+8*n > len(b) {
		return nil, errors.New("bad pair count")
	}
	out := make([][2]string, n)
	off := 4 + 8*n
	for i := range n {
		for j := range 2 {
			size := int(binary.LittleEndian.Uint32(b[4+8*i+4*j:]))
			if off+size >= len(b) || b[off+size] != 0 {
				return nil, errors.New("bad pair data")
			}
			out[i][j] = string(b[off : off+size])
			off += size + 1
		}
	}
	return out, nil
}

func newHarness(t testing.TB, config string) *harness {
	t.Helper()
	ctx := context.Background()
	h := &harness{t: t, ctx: ctx, config: []byte(config), reqHeaders: map[uint32][][2]string{},
		reqBody: map[uint32][]byte{}, setBody: map[uint32][]byte{}, continued: map[uint32]int{},
		props: map[string][]byte{}, respHeaders: map[uint32][][2]string{}, respBody: map[uint32][]byte{},
		respPaused: map[uint32]bool{}, respSent: map[uint32][]byte{}, respContinued: map[uint32]int{}}
	r := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCompilationCache(cache))
	t.Cleanup(func() { r.Close(ctx) })

	wasi := r.NewHostModuleBuilder("wasi_snapshot_preview1")
	wasi_snapshot_preview1.NewFunctionExporter().ExportFunctions(wasi)
	wasi.NewFunctionBuilder().WithFunc(func(_ context.Context, _, _, _, _ uint32) uint32 {
		h.polls++
		return wasiENOSYS
	}).Export("poll_oneoff")
	if _, err := wasi.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}

	compiled, err := r.CompileModule(ctx, chimeWasm)
	if err != nil {
		t.Fatal(err)
	}
	env := r.NewHostModuleBuilder("env")
	impl := h.envFunctions()
	for _, f := range compiled.ImportedFunctions() {
		module, name, _ := f.Import()
		if module != "env" {
			continue
		}
		if fn, ok := impl[name]; ok {
			env.NewFunctionBuilder().WithFunc(fn).Export(name)
			continue
		}
		env.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(_ context.Context, _ api.Module, stack []uint64) {
			h.unknown = append(h.unknown, name)
			stack[0] = 12 // UNIMPLEMENTED
		}), f.ParamTypes(), f.ResultTypes()).Export(name)
	}
	if _, err := env.Instantiate(ctx); err != nil {
		t.Fatal(err)
	}
	h.mod, err = r.InstantiateModule(ctx, compiled, wazero.NewModuleConfig().WithStartFunctions().
		WithStderr(&h.stderr).WithStdout(&h.stderr).WithSysWalltime().WithSysNanotime())
	if err != nil {
		t.Fatal(err)
	}
	h.call("_initialize")
	return h
}

// call invokes a guest export; a trap fails the test with the guest's stderr.
func (h *harness) call(name string, args ...uint32) uint32 {
	h.t.Helper()
	params := make([]uint64, len(args))
	for i, a := range args {
		params[i] = uint64(a)
	}
	res, err := h.mod.ExportedFunction(name).Call(h.ctx, params...)
	if err != nil {
		h.t.Fatalf("%s%v trapped: %v\nstderr: %s", name, args, err, h.stderr.String())
	}
	if len(res) == 0 {
		return 0
	}
	return uint32(res[0])
}

func (h *harness) read(m api.Module, ptr, size uint32) []byte {
	b, ok := m.Memory().Read(ptr, size)
	if !ok {
		h.t.Fatalf("guest passed out-of-range memory %d+%d", ptr, size)
	}
	return bytes.Clone(b)
}

// give copies data into guest memory obtained from proxy_on_memory_allocate
// and stores its address and size at ptrPtr and sizePtr.
func (h *harness) give(ctx context.Context, m api.Module, data []byte, ptrPtr, sizePtr uint32) uint32 {
	var addr uint32
	if len(data) > 0 {
		res, err := m.ExportedFunction("proxy_on_memory_allocate").Call(ctx, uint64(len(data)))
		if err != nil || res[0] == 0 {
			h.t.Errorf("proxy_on_memory_allocate(%d) = %v, %v", len(data), res, err)
			return 10
		}
		addr = uint32(res[0])
		m.Memory().Write(addr, data)
	}
	m.Memory().WriteUint32Le(ptrPtr, addr)
	m.Memory().WriteUint32Le(sizePtr, uint32(len(data)))
	return statusOK
}

func (h *harness) headerMap(mapType uint32) [][2]string {
	if mapType == mapHttpCallResponseHeaders {
		return h.callResp
	}
	switch mapType {
	case mapHttpRequestHeaders:
		return h.reqHeaders[h.effective]
	case mapHttpResponseHeaders:
		return h.respHeaders[h.effective]
	}
	return nil
}

// flushResponse forwards the response chunk buffer to the client.
func (h *harness) flushResponse(id uint32) {
	h.respSent[id] = append(h.respSent[id], h.respBody[id]...)
	h.respBody[id], h.respPaused[id] = nil, false
}

// responseBody delivers a response chunk as Envoy does: while the guest
// pauses, chunks accumulate and body_size is the whole buffer; on Continue
// the buffer, as the guest left it, goes to the client.
func (h *harness) responseBody(id uint32, chunk []byte, eos bool) uint32 {
	h.t.Helper()
	h.effective = id
	h.respBody[id] = append(h.respBody[id], chunk...)
	end := uint32(0)
	if eos {
		end = 1
	}
	action := h.call("proxy_on_response_body", id, uint32(len(h.respBody[id])), end)
	if action == 0 {
		h.flushResponse(id)
	} else {
		h.respPaused[id] = true
	}
	return action
}

func (h *harness) envFunctions() map[string]any {
	return map[string]any{
		"proxy_log": func(_ context.Context, m api.Module, level, ptr, size uint32) uint32 {
			h.logs = append(h.logs, fmt.Sprintf("%d %s", level, h.read(m, ptr, size)))
			return statusOK
		},
		"proxy_set_effective_context": func(id uint32) uint32 {
			h.effective = id
			return statusOK
		},
		"proxy_get_buffer_bytes": func(ctx context.Context, m api.Module, buf, start, max, ptrPtr, sizePtr uint32) uint32 {
			var b []byte
			switch buf {
			case bufferPluginConfiguration:
				b = h.config
			case bufferHttpRequestBody:
				b = h.reqBody[h.effective]
			case bufferHttpResponseBody:
				b = h.respBody[h.effective]
			case bufferHttpCallResponseBody:
				b = h.callBody
			default:
				return statusNotFound
			}
			lo, hi := min(uint64(start), uint64(len(b))), min(uint64(start)+uint64(max), uint64(len(b)))
			return h.give(ctx, m, b[lo:hi], ptrPtr, sizePtr)
		},
		"proxy_set_buffer_bytes": func(_ context.Context, m api.Module, buf, start, size, ptr, n uint32) uint32 {
			bodies := h.reqBody
			if buf == bufferHttpResponseBody {
				bodies = h.respBody
			}
			if (buf != bufferHttpRequestBody && buf != bufferHttpResponseBody) || start != 0 || int(size) < len(bodies[h.effective]) {
				h.t.Errorf("set_buffer_bytes(%d, %d, %d): only whole body replacement is expected", buf, start, size)
				return 2
			}
			bodies[h.effective] = h.read(m, ptr, n)
			if buf == bufferHttpRequestBody {
				h.setBody[h.effective] = h.reqBody[h.effective]
			}
			return statusOK
		},
		"proxy_set_tick_period_milliseconds": func(ms uint32) uint32 {
			h.tickMs = ms
			return statusOK
		},
		"proxy_get_header_map_pairs": func(ctx context.Context, m api.Module, mapType, ptrPtr, sizePtr uint32) uint32 {
			return h.give(ctx, m, encodePairs(h.headerMap(mapType)), ptrPtr, sizePtr)
		},
		"proxy_get_header_map_value": func(ctx context.Context, m api.Module, mapType, kp, ks, ptrPtr, sizePtr uint32) uint32 {
			key := string(h.read(m, kp, ks))
			for _, kv := range h.headerMap(mapType) {
				if kv[0] == key {
					return h.give(ctx, m, []byte(kv[1]), ptrPtr, sizePtr)
				}
			}
			return statusNotFound
		},
		"proxy_remove_header_map_value": func(_ context.Context, m api.Module, mapType, kp, ks uint32) uint32 {
			key := string(h.read(m, kp, ks))
			maps := h.reqHeaders
			if mapType == mapHttpResponseHeaders {
				maps = h.respHeaders
			}
			maps[h.effective] = slices.DeleteFunc(maps[h.effective], func(kv [2]string) bool { return kv[0] == key })
			return statusOK
		},
		"proxy_continue_stream": func(stream uint32) uint32 {
			if stream == streamHttpResponse {
				h.respContinued[h.effective]++
				h.flushResponse(h.effective)
				return statusOK
			}
			h.continued[h.effective]++
			return statusOK
		},
		"proxy_get_property": func(ctx context.Context, m api.Module, pp, ps, ptrPtr, sizePtr uint32) uint32 {
			path := strings.ReplaceAll(strings.TrimRight(string(h.read(m, pp, ps)), "\x00"), "\x00", ".")
			v, ok := h.props[path]
			if !ok {
				return statusNotFound
			}
			return h.give(ctx, m, v, ptrPtr, sizePtr)
		},
		"proxy_http_call": func(_ context.Context, m api.Module, up, ups, hp, hs, bp, bs, tp, ts, timeout, idPtr uint32) uint32 {
			headers, err := decodePairs(h.read(m, hp, hs))
			if err != nil {
				h.t.Errorf("http_call headers: %v", err)
				return 2
			}
			id := uint32(len(h.calls) + 1)
			h.calls = append(h.calls, harnessCall{id, h.effective, string(h.read(m, up, ups)), headers, h.read(m, bp, bs), timeout})
			m.Memory().WriteUint32Le(idPtr, id)
			return statusOK
		},
		"proxy_define_metric": func(_ context.Context, m api.Module, kind, np, ns, idPtr uint32) uint32 {
			h.metrics = append(h.metrics, 0)
			m.Memory().WriteUint32Le(idPtr, uint32(len(h.metrics)-1))
			return statusOK
		},
		"proxy_increment_metric": func(id uint32, delta int64) uint32 {
			h.metrics[id] += uint64(delta)
			return statusOK
		},
	}
}

func (h *harness) start() {
	h.t.Helper()
	h.effective = 1
	h.call("proxy_on_context_create", 1, 0)
	if h.call("proxy_on_vm_start", 1, 0) != 1 {
		h.t.Fatalf("proxy_on_vm_start failed; logs %q", h.logs)
	}
	if h.call("proxy_on_configure", 1, uint32(len(h.config))) != 1 {
		h.t.Fatalf("proxy_on_configure failed; logs %q", h.logs)
	}
}

// TestModuleRunsRequestsUnderWazero drives chime.wasm through many full
// request lifecycles: headers, a paused and buffered body, the prepare
// http_call and its answer, resume, a streamed response, teardown. The
// bodies add up to far more than the heap, so the Go GC must run inside
// callbacks without ever calling poll_oneoff.
func TestModuleRunsRequestsUnderWazero(t *testing.T) {
	h := newHarness(t, `{"token":"t0k","prepareTimeoutMs":300}`)
	h.start()

	const requests, chunk = 200, 128 << 10
	full := llmBody(2 * chunk)
	for i := range requests {
		id := uint32(2 + i)
		h.effective = id
		h.call("proxy_on_context_create", id, 1)
		h.reqHeaders[id] = [][2]string{{":method", "POST"}, {":path", "/v1/responses"}, {":authority", "api"},
			{"content-length", fmt.Sprint(2 * chunk)}, {"x-request-id", fmt.Sprintf("r%d", i)}}
		if a := h.call("proxy_on_request_headers", id, 5, 0); a != 0 {
			t.Fatalf("request %d: headers action %d", i, a)
		}
		if slices.ContainsFunc(h.reqHeaders[id], func(kv [2]string) bool { return kv[0] == "content-length" }) {
			t.Fatalf("request %d: content-length kept", i)
		}
		h.reqBody[id] = full[:chunk]
		if a := h.call("proxy_on_request_body", id, chunk, 0); a != 1 {
			t.Fatalf("request %d: partial body action %d, want Pause", i, a)
		}
		h.reqBody[id] = full
		if a := h.call("proxy_on_request_body", id, 2*chunk, 1); a != 1 {
			t.Fatalf("request %d: final body action %d, want Pause", i, a)
		}
		if len(h.calls) != i+1 {
			t.Fatalf("request %d: %d http calls", i, len(h.calls))
		}
		c := h.calls[i]
		var body struct {
			RequestID, Protocol string
			Directives          []struct{ Kind, Route string }
		}
		if err := json.Unmarshal(c.body, &body); err != nil || body.Protocol != "responses" || body.RequestID != fmt.Sprintf("r%d", i) ||
			len(body.Directives) != 1 || body.Directives[0].Route != "fast" {
			t.Fatalf("request %d: prepare body %s (%v)", i, c.body, err)
		}
		if c.cluster != "chime_host" || c.timeout != 300 || !slices.Contains(c.headers, [2]string{"authorization", "Bearer t0k"}) {
			t.Fatalf("request %d: call %+v", i, c)
		}

		h.answer(c.id, [][2]string{{":status", "200"}}, `{"ntp":{"status":"ok","offsetMs":-12}}`)
		if h.continued[id] != 1 {
			t.Fatalf("request %d: continued %d times", i, h.continued[id])
		}
		sent := string(h.setBody[id])
		if !strings.HasSuffix(sent, "ntpOffsetMs=`-12`\"}]}]}") || strings.Contains(sent, "<**") ||
			len(sent) < 2*chunk-100 {
			t.Fatalf("request %d: forwarded body ends %q", i, sent[max(0, len(sent)-200):])
		}

		h.effective = id
		if a := h.call("proxy_on_response_headers", id, 2, 0); a != 0 {
			t.Fatalf("request %d: response headers action %d", i, a)
		}
		if a := h.call("proxy_on_response_body", id, 64, 1); a != 0 {
			t.Fatalf("request %d: response body action %d", i, a)
		}
		h.call("proxy_on_log", id)
		if h.call("proxy_on_done", id) != 1 {
			t.Fatalf("request %d: proxy_on_done returned false", i)
		}
		h.call("proxy_on_delete", id)
		delete(h.reqBody, id)
		delete(h.setBody, id)
	}

	if h.polls != 0 {
		t.Errorf("guest called poll_oneoff %d times", h.polls)
	}
	if len(h.unknown) != 0 {
		t.Errorf("guest called unimplemented host functions %q", h.unknown)
	}
	if h.metrics[0] != requests {
		t.Errorf("chime_requests_total = %d, want %d", h.metrics[0], requests)
	}
	// 200 × 256 KiB went through guest memory; a heap that never collected
	// would be over 50 MiB.
	if size := h.mod.Memory().Size(); size > 32<<20 {
		t.Errorf("guest memory grew to %d MiB: garbage is not being collected", size>>20)
	}
	for _, l := range h.logs {
		if strings.HasPrefix(l, "4 ") || strings.HasPrefix(l, "5 ") {
			t.Errorf("error log: %s", l)
		}
	}
}

// TestModuleFailsOpenAndRejectsBadConfig: a failed http_call (no headers)
// still resumes the request; an invalid configuration fails on_configure
// with a clear log line.
func TestModuleFailsOpenAndRejectsBadConfig(t *testing.T) {
	h := newHarness(t, "")
	h.start()
	h.effective = 2
	h.call("proxy_on_context_create", 2, 1)
	h.reqHeaders[2] = [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}}
	h.call("proxy_on_request_headers", 2, 2, 0)
	h.reqBody[2] = []byte(`{"messages":[]}`)
	if a := h.call("proxy_on_request_body", 2, uint32(len(h.reqBody[2])), 1); a != 1 {
		t.Fatalf("body action %d, want Pause while preparing", a)
	}
	h.answer(h.calls[0].id, nil, "")
	if h.continued[2] != 1 || h.metrics[1] != 1 {
		t.Fatalf("after failed call: continued %d, failures %d", h.continued[2], h.metrics[1])
	}

	bad := newHarness(t, `{"prepareTimeoutMs":"fast"}`)
	bad.effective = 1
	bad.call("proxy_on_context_create", 1, 0)
	bad.call("proxy_on_vm_start", 1, 0)
	if bad.call("proxy_on_configure", 1, uint32(len(bad.config))) != 0 {
		t.Fatal("invalid configuration accepted")
	}
	if !slices.ContainsFunc(bad.logs, func(l string) bool { return strings.Contains(l, "prepareTimeoutMs") }) {
		t.Fatalf("no log names the bad field: %q", bad.logs)
	}
}

// BenchmarkRequestLifecycle measures one full handled request through
// chime.wasm under wazero (12 guest callbacks): buffer, parse, strip a
// directive, prepare, append the time tag, replace the body, commit path.
func BenchmarkRequestLifecycle(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			h := newHarness(b, "")
			h.start()
			body := llmBody(size)
			b.SetBytes(int64(size))
			id := uint32(1)
			for b.Loop() {
				id++
				h.effective = id
				h.call("proxy_on_context_create", id, 1)
				h.reqHeaders[id] = [][2]string{{":method", "POST"}, {":path", "/v1/responses"}, {"x-request-id", "r"}}
				h.call("proxy_on_request_headers", id, 3, 0)
				h.reqBody[id] = body
				h.call("proxy_on_request_body", id, uint32(len(body)), 1)
				h.answer(h.calls[len(h.calls)-1].id, [][2]string{{":status", "200"}}, `{"ntp":{"status":"ok","offsetMs":3}}`)
				h.effective = id
				h.call("proxy_on_response_headers", id, 1, 0)
				h.call("proxy_on_response_body", id, 10, 1)
				h.call("proxy_on_log", id)
				h.call("proxy_on_done", id)
				h.call("proxy_on_delete", id)
				delete(h.reqHeaders, id)
				delete(h.reqBody, id)
				delete(h.setBody, id)
			}
			if h.polls != 0 || h.continued[id] != 1 || len(h.calls) == 0 {
				b.Fatalf("polls %d, continued %d, calls %d", h.polls, h.continued[id], len(h.calls))
			}
		})
	}
}

// llmBody is a Responses request of size bytes whose user text carries a
// directive.
func llmBody(size int) []byte {
	head, tail := `{"model":"m","input":[{"role":"user","content":"<**route:fast**>`, `"}]}`
	b := append([]byte(head), bytes.Repeat([]byte("x"), size-len(head)-len(tail))...)
	return append(b, tail...)
}

// answer delivers the response of http call id on the plugin context; nil
// headers report a failed call.
func (h *harness) answer(id uint32, headers [][2]string, body string) {
	h.t.Helper()
	h.effective, h.callResp, h.callBody = 1, headers, []byte(body)
	h.call("proxy_on_http_call_response", 1, id, uint32(len(headers)), uint32(len(body)), 0)
	h.callResp, h.callBody = nil, nil
}

var tagRE = regexp.MustCompile("utc=`([^`]+)` local=`([^`]+)` tz=`([^`]+)` nowMs=`(-?\\d+)` ntpOffsetMs=`(-?\\d+)`")

// TestModuleRendersZones: chime.wasm carries its own zone database (there
// is no file system in the guest), so a zone from the configuration or the
// request header renders with its real offset, DST included.
func TestModuleRendersZones(t *testing.T) {
	h := newHarness(t, `{"defaultTimezone":"America/Los_Angeles"}`)
	h.start()
	if h.tickMs != 30_000 {
		t.Errorf("tick period %d ms", h.tickMs)
	}
	for i, zone := range []string{"Asia/Kathmandu", "", "Australia/Lord_Howe", "Not/AZone"} {
		id := uint32(10 + i)
		h.effective = id
		h.call("proxy_on_context_create", id, 1)
		h.reqHeaders[id] = [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"x-chime-timezone", zone}}
		h.call("proxy_on_request_headers", id, 3, 0)
		h.reqBody[id] = []byte(`{"messages":[{"role":"user","content":"hi"}]}`)
		h.call("proxy_on_request_body", id, uint32(len(h.reqBody[id])), 1)
		h.answer(h.calls[len(h.calls)-1].id, nil, "") // fail open: the filter's own clock
		m := tagRE.FindStringSubmatch(string(h.setBody[id]))
		if m == nil {
			t.Fatalf("%q: no time tag in %s", zone, h.setBody[id])
		}
		want := zone
		if zone == "" || zone == "Not/AZone" {
			want = "America/Los_Angeles"
		}
		loc, err := time.LoadLocation(want)
		if err != nil {
			t.Fatal(err)
		}
		utc, err := time.Parse("2006-01-02T15:04:05.000Z", m[1])
		if err != nil {
			t.Fatal(err)
		}
		if local := utc.In(loc).Format("2006-01-02 15:04:05.000 -07:00"); m[2] != local || m[3] != want {
			t.Errorf("%q: tag local=%s tz=%s, want %s %s", zone, m[2], m[3], local, want)
		}
		if now := time.Now(); utc.Before(now.Add(-time.Minute)) || utc.After(now.Add(time.Minute)) {
			t.Errorf("%q: tag time %s is not now", zone, utc)
		}
	}
}
