package wasmhost

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

var (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// hostFunc is one host function. fn reads its parameters from stack and
// writes its result to stack[0].
type hostFunc struct {
	name    string
	params  []api.ValueType
	results []api.ValueType
	fn      func(vm *vmInstance, ctx context.Context, stack []uint64)
	// allowedInStart: callable during _initialize/_start. Anything else
	// traps there ("restricted_callback"), as Envoy's V8 runtime does.
	allowedInStart bool
}

func i32s(n int) []api.ValueType {
	out := make([]api.ValueType, n)
	for i := range out {
		out[i] = i32
	}
	return out
}

// proxyFn declares an env.proxy_* function of n i32 parameters returning a status.
func proxyFn(name string, n int, fn func(vm *vmInstance, ctx context.Context, a []uint32) status) hostFunc {
	return hostFunc{name: name, params: i32s(n), results: i32s(1), fn: func(vm *vmInstance, ctx context.Context, stack []uint64) {
		a := make([]uint32, n)
		for i := range a {
			a[i] = uint32(stack[i])
		}
		stack[0] = uint64(fn(vm, ctx, a))
	}}
}

// instantiateHost registers the env and WASI host modules in vm's runtime.
func (vm *vmInstance) instantiateHost(ctx context.Context) error {
	mods := map[string][]hostFunc{
		"env":                    envFunctions(vm.f.abi),
		"wasi_snapshot_preview1": wasiFunctions(vm.f.profile),
		"wasi_unstable":          wasiFunctions(vm.f.profile),
	}
	for modName, fns := range mods {
		b := vm.rt.NewHostModuleBuilder(modName)
		for _, h := range fns {
			h, qualified := h, modName+"."+h.name
			b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
				if vm.restricted && !h.allowedInStart {
					panic(fmt.Errorf("restricted_callback: %s called during VM start", qualified))
				}
				h.fn(vm, ctx, stack)
			}), h.params, h.results).Export(h.name)
		}
		if _, err := b.Instantiate(ctx); err != nil {
			return fmt.Errorf("wasm: host module %s: %w", modName, err)
		}
	}
	return nil
}

// --- guest memory -------------------------------------------------------

func (vm *vmInstance) read(ptr, size uint32) ([]byte, bool) {
	return vm.mod.Memory().Read(ptr, size)
}

func (vm *vmInstance) readString(ptr, size uint32) (string, bool) {
	b, ok := vm.read(ptr, size)
	return string(b), ok
}

func (vm *vmInstance) putU32(ptr, v uint32) bool { return vm.mod.Memory().WriteUint32Le(ptr, v) }
func (vm *vmInstance) putU64(ptr uint32, v uint64) bool {
	return vm.mod.Memory().WriteUint64Le(ptr, v)
}

// alloc asks the guest for size bytes (malloc, else proxy_on_memory_allocate).
// A trap inside the allocator aborts the whole outer call.
func (vm *vmInstance) alloc(ctx context.Context, size uint32) (uint32, bool) {
	if vm.fnMalloc == nil {
		return 0, false
	}
	res, err := vm.fnMalloc.Call(ctx, uint64(size))
	if err != nil {
		panic(err)
	}
	if len(res) == 0 || uint32(res[0]) == 0 {
		return 0, false
	}
	return uint32(res[0]), true
}

// copyOut is cpp-host copyToPointerSize: allocate a guest copy of data and
// store its address and size; empty data stores (0, 0).
func (vm *vmInstance) copyOut(ctx context.Context, data []byte, ptrPtr, sizePtr uint32) bool {
	var p uint32
	if len(data) > 0 {
		var ok bool
		if p, ok = vm.alloc(ctx, uint32(len(data))); !ok {
			return false
		}
		if !vm.mod.Memory().Write(p, data) {
			return false
		}
	}
	return vm.putU32(ptrPtr, p) && vm.putU32(sizePtr, uint32(len(data)))
}

func (vm *vmInstance) copyOutStatus(ctx context.Context, data []byte, ptrPtr, sizePtr uint32) status {
	if !vm.copyOut(ctx, data, ptrPtr, sizePtr) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// --- contexts -----------------------------------------------------------

// effective is contextOrEffectiveContext: the stream the call is acting
// for, or nil for the root (or VM) context.
func (vm *vmInstance) effective() *stream {
	c := vm.cur
	if c == nil {
		return nil
	}
	if c.effective != 0 {
		if c.effective == rootContextID {
			return nil
		}
		if s := vm.streams[c.effective]; s != nil {
			return s
		}
	}
	return vm.streams[c.current]
}

// --- logging ------------------------------------------------------------

func slogLevel(level uint32) slog.Level {
	switch level {
	case 0:
		return slog.LevelDebug - 4
	case 1:
		return slog.LevelDebug
	case 2:
		return slog.LevelInfo
	case 3:
		return slog.LevelWarn
	case 4:
		return slog.LevelError
	default:
		return slog.LevelError + 4
	}
}

func (vm *vmInstance) log(ctx context.Context, level uint32, msg string) {
	vm.f.logger.Log(ctx, slogLevel(level), msg, "source", "wasm")
}

// logLevel is the lowest proxy-wasm level the host logger records.
func (vm *vmInstance) logLevel(ctx context.Context) uint32 {
	for lvl := uint32(0); lvl < 5; lvl++ {
		if vm.f.logger.Enabled(ctx, slogLevel(lvl)) {
			return lvl
		}
	}
	return 5
}

// --- the env module -----------------------------------------------------

func envFunctions(abi abiVersion) []hostFunc {
	fns := []hostFunc{
		{name: "pthread_equal", params: i32s(2), results: i32s(1), fn: func(_ *vmInstance, _ context.Context, st []uint64) {
			st[0] = b2u(uint32(st[0]) == uint32(st[1]))
		}},
		{name: "emscripten_notify_memory_growth", params: i32s(1), allowedInStart: true, fn: func(*vmInstance, context.Context, []uint64) {}},
		withStart(proxyFn("proxy_log", 3, hostLog)),
		proxyFn("proxy_get_status", 3, hostGetStatus),
		proxyFn("proxy_set_property", 4, hostSetProperty),
		proxyFn("proxy_get_property", 4, hostGetProperty),
		proxyFn("proxy_send_local_response", 8, hostSendLocalResponse),
		proxyFn("proxy_get_shared_data", 5, hostGetSharedData),
		proxyFn("proxy_set_shared_data", 5, hostSetSharedData),
		proxyFn("proxy_register_shared_queue", 3, hostRegisterQueue),
		proxyFn("proxy_resolve_shared_queue", 5, hostResolveQueue),
		proxyFn("proxy_dequeue_shared_queue", 3, hostDequeue),
		proxyFn("proxy_enqueue_shared_queue", 3, hostEnqueue),
		proxyFn("proxy_get_header_map_value", 5, hostGetHeaderValue),
		proxyFn("proxy_add_header_map_value", 5, hostAddHeaderValue),
		proxyFn("proxy_replace_header_map_value", 5, hostReplaceHeaderValue),
		proxyFn("proxy_remove_header_map_value", 3, hostRemoveHeaderValue),
		proxyFn("proxy_get_header_map_pairs", 3, hostGetHeaderPairs),
		proxyFn("proxy_set_header_map_pairs", 3, hostSetHeaderPairs),
		proxyFn("proxy_get_header_map_size", 2, hostGetHeaderSize),
		proxyFn("proxy_get_buffer_status", 3, hostGetBufferStatus),
		proxyFn("proxy_get_buffer_bytes", 5, hostGetBufferBytes),
		proxyFn("proxy_set_buffer_bytes", 5, hostSetBufferBytes),
		proxyFn("proxy_http_call", 10, hostHTTPCall),
		proxyFn("proxy_grpc_call", 12, hostGrpcOpen),
		proxyFn("proxy_grpc_stream", 9, hostGrpcOpen),
		proxyFn("proxy_grpc_close", 1, hostGrpcToken),
		proxyFn("proxy_grpc_cancel", 1, hostGrpcToken),
		proxyFn("proxy_grpc_send", 4, hostGrpcToken),
		proxyFn("proxy_set_tick_period_milliseconds", 1, hostSetTick),
		proxyFn("proxy_get_current_time_nanoseconds", 1, hostGetTime),
		proxyFn("proxy_define_metric", 4, hostDefineMetric),
		{name: "proxy_increment_metric", params: []api.ValueType{i32, i64}, results: i32s(1), fn: hostIncrementMetric},
		{name: "proxy_record_metric", params: []api.ValueType{i32, i64}, results: i32s(1), fn: hostRecordMetric},
		proxyFn("proxy_get_metric", 2, hostGetMetric),
		proxyFn("proxy_set_effective_context", 1, hostSetEffectiveContext),
		proxyFn("proxy_done", 0, func(*vmInstance, context.Context, []uint32) status { return statusNotFound }),
		proxyFn("proxy_call_foreign_function", 6, hostCallForeign),
		proxyFn("proxy_continue_stream", 1, hostContinueStream),
		proxyFn("proxy_close_stream", 1, hostCloseStream),
	}
	if abi == abi021 {
		fns = append(fns, proxyFn("proxy_get_log_level", 1, hostGetLogLevel))
	}
	return fns
}

func withStart(h hostFunc) hostFunc { h.allowedInStart = true; return h }

func hostLog(vm *vmInstance, ctx context.Context, a []uint32) status {
	if a[0] > 5 {
		return statusBadArgument
	}
	msg, ok := vm.readString(a[1], a[2])
	if !ok {
		return statusInvalidMemoryAccess
	}
	vm.log(ctx, a[0], msg)
	return statusOK
}

func hostGetLogLevel(vm *vmInstance, ctx context.Context, a []uint32) status {
	if !vm.putU32(a[0], vm.logLevel(ctx)) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func hostGetStatus(vm *vmInstance, ctx context.Context, a []uint32) status {
	if !vm.putU32(a[0], vm.callStatus) {
		return statusInvalidMemoryAccess
	}
	return vm.copyOutStatus(ctx, []byte(vm.callMessage), a[1], a[2])
}

func hostSetProperty(vm *vmInstance, _ context.Context, a []uint32) status {
	path, ok1 := vm.readString(a[0], a[1])
	value, ok2 := vm.read(a[2], a[3])
	if !ok1 || !ok2 {
		return statusInvalidMemoryAccess
	}
	s := vm.effective()
	if s == nil {
		return statusNotFound // no stream info on the root context
	}
	if s.props == nil {
		s.props = map[string][]byte{}
	}
	s.props[path] = append([]byte(nil), value...)
	return statusOK
}

func hostGetProperty(vm *vmInstance, ctx context.Context, a []uint32) status {
	path, ok := vm.readString(a[0], a[1])
	if !ok {
		return statusInvalidMemoryAccess
	}
	v, st := vm.property(vm.effective(), path)
	if st != statusOK {
		return st
	}
	return vm.copyOutStatus(ctx, v, a[2], a[3])
}

// hostSendLocalResponse defers the reply until the VM call returns
// (Envoy's addAfterVmCallAction) and makes the running callback stop.
func hostSendLocalResponse(vm *vmInstance, _ context.Context, a []uint32) status {
	details, ok1 := vm.readString(a[1], a[2])
	body, ok2 := vm.read(a[3], a[4])
	hdrs, ok3 := vm.read(a[5], a[6])
	if !ok1 || !ok2 || !ok3 {
		return statusInvalidMemoryAccess
	}
	headers := decodePairs(hdrs)
	for i := range headers {
		headers[i].Key = strings.ToLower(headers[i].Key)
	}
	code := int(a[0])
	bodyCopy := append([]byte(nil), body...)
	details = strings.Map(func(r rune) rune {
		if r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\f' || r == '\v' {
			return '_'
		}
		return r
	}, details)
	if s := vm.effective(); s != nil && !s.completed {
		cb := s.cb
		s.queue(func() { cb.SendLocalReply(code, bodyCopy, headers, details) })
	}
	vm.cur.stopIteration = true
	return statusOK
}

func hostGetSharedData(vm *vmInstance, ctx context.Context, a []uint32) status {
	key, ok := vm.readString(a[0], a[1])
	if !ok {
		return statusInvalidMemoryAccess
	}
	v, cas, found := shared.get(vm.f.cfg.VMID, key)
	if !found {
		return statusNotFound
	}
	if !vm.copyOut(ctx, v, a[2], a[3]) || !vm.putU32(a[4], cas) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func hostSetSharedData(vm *vmInstance, _ context.Context, a []uint32) status {
	key, ok1 := vm.readString(a[0], a[1])
	value, ok2 := vm.read(a[2], a[3])
	if !ok1 || !ok2 {
		return statusInvalidMemoryAccess
	}
	return shared.set(vm.f.cfg.VMID, key, value, a[4])
}

// hostRegisterQueue registers for the root context: on_queue_ready is
// always delivered to a root context (a stream registers its parent).
func hostRegisterQueue(vm *vmInstance, _ context.Context, a []uint32) status {
	name, ok := vm.readString(a[0], a[1])
	if !ok {
		return statusInvalidMemoryAccess
	}
	tok := shared.registerQueue(vm.f.cfg.VMID, name, vm, rootContextID)
	if !vm.putU32(a[2], tok) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func hostResolveQueue(vm *vmInstance, _ context.Context, a []uint32) status {
	vmID, ok1 := vm.readString(a[0], a[1])
	name, ok2 := vm.readString(a[2], a[3])
	if !ok1 || !ok2 {
		return statusInvalidMemoryAccess
	}
	if vmID == "" {
		vmID = vm.f.cfg.VMID
	}
	tok, found := shared.resolveQueue(vmID, name)
	if !found {
		return statusNotFound
	}
	if !vm.putU32(a[4], tok) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func hostDequeue(vm *vmInstance, ctx context.Context, a []uint32) status {
	v, st := shared.dequeue(a[0])
	if st != statusOK {
		return st
	}
	return vm.copyOutStatus(ctx, v, a[1], a[2])
}

func hostEnqueue(vm *vmInstance, _ context.Context, a []uint32) status {
	v, ok := vm.read(a[1], a[2])
	if !ok {
		return statusInvalidMemoryAccess
	}
	owner, ownerID, st := shared.enqueue(a[0], v)
	if st == statusOK && owner != nil {
		owner.queueReady(ownerID, a[0])
	}
	return st
}

// --- header maps --------------------------------------------------------

// constMap is Envoy's getConstMap: what the guest may read now.
func (vm *vmInstance) constMap(t uint32) *httpfilter.Headers {
	switch t {
	case mapHTTPCallHeaders:
		if vm.httpResp != nil {
			return &vm.httpResp.Headers
		}
		return nil
	case mapHTTPCallTrailers:
		if vm.httpResp != nil {
			return &vm.httpResp.Trailers
		}
		return nil
	}
	s := vm.effective()
	if s == nil {
		return nil
	}
	switch t {
	case mapRequestHeaders:
		if s.accessLogPhase {
			return s.cb.RequestHeaders()
		}
		return s.reqHeaders
	case mapRequestTrailers:
		if s.accessLogPhase {
			return nil
		}
		return s.reqTrailers
	case mapResponseHeaders:
		if s.accessLogPhase {
			return s.cb.ResponseHeaders()
		}
		return s.respHeaders
	case mapResponseTrailers:
		if s.accessLogPhase {
			return s.cb.ResponseTrailers()
		}
		return s.respTrailers
	}
	return nil
}

// mutableMap is Envoy's getMap: only a stream's own maps, while held.
func (vm *vmInstance) mutableMap(t uint32) (*httpfilter.Headers, *stream) {
	s := vm.effective()
	if s == nil {
		return nil, nil
	}
	switch t {
	case mapRequestHeaders:
		return s.reqHeaders, s
	case mapRequestTrailers:
		return s.reqTrailers, s
	case mapResponseHeaders:
		return s.respHeaders, s
	case mapResponseTrailers:
		return s.respTrailers, s
	}
	return nil, nil
}

// headersModified: editing request headers clears the route cache.
func headersModified(s *stream, t uint32) {
	if t == mapRequestHeaders {
		cb := s.cb
		s.queue(cb.ClearRouteCache)
	}
}

func isPseudo(k string) bool { return strings.HasPrefix(k, ":") }

// addHeader appends like Envoy's addCopy, keeping pseudo-headers first.
func addHeader(h *httpfilter.Headers, key, value string) {
	key = strings.ToLower(key)
	e := httpfilter.Header{Key: key, Value: value}
	if isPseudo(key) {
		for i, x := range *h {
			if !isPseudo(x.Key) {
				*h = append((*h)[:i], append(httpfilter.Headers{e}, (*h)[i:]...)...)
				return
			}
		}
	}
	*h = append(*h, e)
}

// replaceHeader is setCopy: the first entry keeps its position and takes
// the value, later duplicates go; absent keys are added.
func replaceHeader(h *httpfilter.Headers, key, value string) {
	key = strings.ToLower(key)
	out := (*h)[:0]
	found := false
	for _, x := range *h {
		if x.Key == key {
			if found {
				continue
			}
			found = true
			x.Value = value
		}
		out = append(out, x)
	}
	*h = out
	if !found {
		addHeader(h, key, value)
	}
}

func hostGetHeaderValue(vm *vmInstance, ctx context.Context, a []uint32) status {
	if a[0] > mapMax {
		return statusBadArgument
	}
	key, ok := vm.readString(a[1], a[2])
	if !ok {
		return statusInvalidMemoryAccess
	}
	h := vm.constMap(a[0])
	if h == nil {
		if s := vm.effective(); s != nil && s.accessLogPhase {
			return statusNotFound
		}
		return statusBadArgument
	}
	v, found := h.Get(key)
	if !found {
		return statusNotFound
	}
	return vm.copyOutStatus(ctx, []byte(v), a[3], a[4])
}

func editHeaders(vm *vmInstance, a []uint32, withValue bool, edit func(h *httpfilter.Headers, k, v string)) status {
	if a[0] > mapMax {
		return statusBadArgument
	}
	key, ok1 := vm.readString(a[1], a[2])
	value, ok2 := "", true
	if withValue {
		value, ok2 = vm.readString(a[3], a[4])
	}
	if !ok1 || !ok2 {
		return statusInvalidMemoryAccess
	}
	h, s := vm.mutableMap(a[0])
	if h == nil {
		return statusBadArgument
	}
	edit(h, key, value)
	headersModified(s, a[0])
	return statusOK
}

func hostAddHeaderValue(vm *vmInstance, _ context.Context, a []uint32) status {
	return editHeaders(vm, a, true, addHeader)
}

func hostReplaceHeaderValue(vm *vmInstance, _ context.Context, a []uint32) status {
	return editHeaders(vm, a, true, replaceHeader)
}

func hostRemoveHeaderValue(vm *vmInstance, _ context.Context, a []uint32) status {
	return editHeaders(vm, a, false, func(h *httpfilter.Headers, k, _ string) { h.Del(k) })
}

func hostGetHeaderPairs(vm *vmInstance, ctx context.Context, a []uint32) status {
	if a[0] > mapMax {
		return statusBadArgument
	}
	var data []byte
	if h := vm.constMap(a[0]); h != nil && len(*h) > 0 {
		data = encodePairs(*h)
	}
	return vm.copyOutStatus(ctx, data, a[1], a[2])
}

func hostSetHeaderPairs(vm *vmInstance, _ context.Context, a []uint32) status {
	if a[0] > mapMax {
		return statusBadArgument
	}
	b, ok := vm.read(a[1], a[2])
	if !ok {
		return statusInvalidMemoryAccess
	}
	h, s := vm.mutableMap(a[0])
	if h == nil {
		return statusBadArgument
	}
	*h = (*h)[:0]
	for _, e := range decodePairs(b) {
		addHeader(h, e.Key, e.Value)
	}
	headersModified(s, a[0])
	return statusOK
}

// hostGetHeaderSize reports Envoy's HeaderMap::byteSize (keys plus values).
func hostGetHeaderSize(vm *vmInstance, _ context.Context, a []uint32) status {
	if a[0] > mapMax {
		return statusBadArgument
	}
	h, _ := vm.mutableMap(a[0])
	if h == nil {
		return statusBadArgument
	}
	if !vm.putU32(a[1], uint32(headersByteSize(*h))) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func headersByteSize(h httpfilter.Headers) int {
	n := 0
	for _, e := range h {
		n += len(e.Key) + len(e.Value)
	}
	return n
}

// --- buffers ------------------------------------------------------------

// bufferRef is one buffer as the guest sees it: a live stream body (which
// set_buffer_bytes edits) or a read-only byte string.
type bufferRef struct {
	live *httpfilter.Buffer
	ro   []byte
}

func (b *bufferRef) bytes() []byte {
	if b.live != nil {
		return b.live.Bytes
	}
	return b.ro
}

// buffer is Envoy's Context::getBuffer; nil means NOT_FOUND.
func (vm *vmInstance) buffer(t uint32) *bufferRef {
	switch t {
	case bufHTTPRequestBody, bufHTTPResponseBody:
		s := vm.effective()
		if s == nil {
			return &bufferRef{}
		}
		if t == bufHTTPRequestBody {
			return &bufferRef{live: s.reqBody}
		}
		return &bufferRef{live: s.respBody}
	case bufDownstreamData, bufUpstreamData, bufGrpcReceive, bufCallData:
		return &bufferRef{}
	case bufHTTPCallResponse:
		if vm.httpResp == nil {
			return nil
		}
		return &bufferRef{ro: vm.httpResp.Body}
	case bufVMConfiguration:
		return &bufferRef{ro: vm.f.cfg.VMConfiguration}
	case bufPluginConfiguration:
		if !vm.pluginConfigVisible {
			return nil
		}
		return &bufferRef{ro: vm.f.cfg.PluginConfiguration}
	}
	return nil
}

func hostGetBufferStatus(vm *vmInstance, _ context.Context, a []uint32) status {
	if a[0] > bufMax {
		return statusBadArgument
	}
	b := vm.buffer(a[0])
	if b == nil {
		return statusNotFound
	}
	if !vm.putU32(a[1], uint32(len(b.bytes()))) || !vm.putU32(a[2], 0) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// hostGetBufferBytes clamps start/length to the buffer ("don't overread").
func hostGetBufferBytes(vm *vmInstance, ctx context.Context, a []uint32) status {
	if a[0] > bufMax {
		return statusBadArgument
	}
	b := vm.buffer(a[0])
	if b == nil {
		return statusNotFound
	}
	data := b.bytes()
	start, length := uint64(a[1]), uint64(a[2])
	size := uint64(len(data))
	if start > size {
		length = 0
	} else if start+length > size {
		length = size - start
	}
	if length == 0 {
		if !vm.putU32(a[3], 0) || !vm.putU32(a[4], 0) {
			return statusInvalidMemoryAccess
		}
		return statusOK
	}
	return vm.copyOutStatus(ctx, data[start:start+length], a[3], a[4])
}

// hostSetBufferBytes follows Envoy's Buffer::copyFrom: start=0 drains
// min(length, size) bytes then prepends (so 0,0 prepends and 0,>=size
// replaces everything); start>=size appends; anything else, or a
// read-only buffer, is BAD_ARGUMENT.
func hostSetBufferBytes(vm *vmInstance, _ context.Context, a []uint32) status {
	if a[0] > bufMax {
		return statusBadArgument
	}
	b := vm.buffer(a[0])
	if b == nil {
		return statusNotFound
	}
	data, ok := vm.read(a[3], a[4])
	if !ok {
		return statusInvalidMemoryAccess
	}
	if b.live == nil {
		return statusBadArgument
	}
	cur := b.live.Bytes
	start, length := a[1], a[2]
	switch {
	case start == 0:
		drop := min(int(length), len(cur))
		nb := make([]byte, 0, len(data)+len(cur)-drop)
		nb = append(nb, data...)
		b.live.Bytes = append(nb, cur[drop:]...)
	case uint64(start) >= uint64(len(cur)):
		b.live.Bytes = append(cur, data...)
	default:
		return statusBadArgument
	}
	return statusOK
}

// --- http calls ---------------------------------------------------------

func hostHTTPCall(vm *vmInstance, _ context.Context, a []uint32) status {
	cluster, ok1 := vm.readString(a[0], a[1])
	hdrs, ok2 := vm.read(a[2], a[3])
	body, ok3 := vm.read(a[4], a[5])
	trl, ok4 := vm.read(a[6], a[7])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return statusInvalidMemoryAccess
	}
	if !vm.putU32(a[9], 0) {
		return statusInvalidMemoryAccess
	}
	timeoutMS := int32(a[8])
	if timeoutMS < 0 {
		return statusBadArgument
	}
	if cc, ok := vm.f.env.Clusters.(httpfilter.ClusterChecker); ok && !cc.HasCluster(cluster) {
		return statusBadArgument
	}
	var headers httpfilter.Headers
	for _, e := range decodePairs(hdrs) {
		addHeader(&headers, e.Key, e.Value)
	}
	for _, required := range []string{":path", ":method", ":authority"} {
		if _, ok := headers.Get(required); !ok {
			return statusBadArgument
		}
	}
	if len(body) > 0 {
		replaceHeader(&headers, "content-length", strconv.Itoa(len(body)))
	}
	var trailers httpfilter.Headers
	for _, e := range decodePairs(trl) {
		addHeader(&trailers, e.Key, e.Value)
	}
	vm.nextCallID += calloutIncrement
	token := vm.nextCallID
	vm.dispatchHTTPCall(token, cluster, headers, append([]byte(nil), body...), trailers, time.Duration(timeoutMS)*time.Millisecond)
	vm.putU32(a[9], token)
	return statusOK
}

// hostGrpcOpen: gRPC callouts are not supported; an unknown cluster gets
// Envoy's PARSE_FAILURE, a known one INTERNAL_FAILURE (failed to send).
func hostGrpcOpen(vm *vmInstance, _ context.Context, a []uint32) status {
	cluster, ok := vm.readString(a[0], a[1])
	if !ok {
		return statusInvalidMemoryAccess
	}
	if cc, ok := vm.f.env.Clusters.(httpfilter.ClusterChecker); ok && !cc.HasCluster(cluster) {
		return statusParseFailure
	}
	return statusInternalFailure
}

func hostGrpcToken(_ *vmInstance, _ context.Context, a []uint32) status {
	if t := a[0] & 3; t == 1 || t == 2 {
		return statusNotFound
	}
	return statusBadArgument
}

// --- timers, time, metrics ----------------------------------------------

func hostSetTick(vm *vmInstance, _ context.Context, a []uint32) status {
	vm.setTick(time.Duration(a[0]) * time.Millisecond)
	return statusOK
}

func hostGetTime(vm *vmInstance, _ context.Context, a []uint32) status {
	if !vm.putU64(a[0], uint64(time.Now().UnixNano())) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func hostDefineMetric(vm *vmInstance, _ context.Context, a []uint32) status {
	name, ok := vm.readString(a[1], a[2])
	if !ok {
		return statusInvalidMemoryAccess
	}
	var id uint32
	switch httpfilter.MetricKind(a[0]) {
	case httpfilter.MetricCounter:
		vm.nextCounter += metricIDIncrement
		id = vm.nextCounter
	case httpfilter.MetricGauge:
		vm.nextGauge += metricIDIncrement
		id = vm.nextGauge
	case httpfilter.MetricHistogram:
		vm.nextHistogram += metricIDIncrement
		id = vm.nextHistogram
	default:
		return statusBadArgument
	}
	vm.metrics[id] = vm.f.stats().Define(httpfilter.MetricKind(a[0]), name)
	if !vm.putU32(a[3], id) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

func hostIncrementMetric(vm *vmInstance, _ context.Context, st []uint64) {
	id, delta := uint32(st[0]), int64(st[1])
	m, kind := vm.metrics[id], httpfilter.MetricKind(id&metricTypeMask)
	switch {
	case kind != httpfilter.MetricCounter && kind != httpfilter.MetricGauge:
		st[0] = uint64(statusBadArgument)
	case m == nil:
		st[0] = uint64(statusNotFound)
	case kind == httpfilter.MetricCounter && delta <= 0:
		st[0] = uint64(statusBadArgument)
	default:
		m.Add(delta)
		st[0] = uint64(statusOK)
	}
}

// hostRecordMetric: a counter adds the value, a gauge is set, a histogram
// records it (Envoy recordMetric).
func hostRecordMetric(vm *vmInstance, _ context.Context, st []uint64) {
	id, v := uint32(st[0]), st[1]
	m := vm.metrics[id]
	if m == nil {
		st[0] = uint64(statusNotFound)
		return
	}
	if httpfilter.MetricKind(id&metricTypeMask) == httpfilter.MetricCounter {
		m.Add(int64(v))
	} else {
		m.Set(int64(v))
	}
	st[0] = uint64(statusOK)
}

func hostGetMetric(vm *vmInstance, _ context.Context, a []uint32) status {
	kind := httpfilter.MetricKind(a[0] & metricTypeMask)
	if kind != httpfilter.MetricCounter && kind != httpfilter.MetricGauge {
		return statusBadArgument
	}
	m := vm.metrics[a[0]]
	if m == nil {
		return statusNotFound
	}
	if !vm.putU64(a[1], uint64(m.Value())) {
		return statusInvalidMemoryAccess
	}
	return statusOK
}

// --- contexts and streams -----------------------------------------------

func hostSetEffectiveContext(vm *vmInstance, _ context.Context, a []uint32) status {
	if a[0] != rootContextID && vm.streams[a[0]] == nil {
		return statusBadArgument
	}
	vm.cur.effective = a[0]
	return statusOK
}

func hostCallForeign(vm *vmInstance, _ context.Context, a []uint32) status {
	_, ok1 := vm.read(a[0], a[1])
	_, ok2 := vm.read(a[2], a[3])
	if !ok1 || !ok2 {
		return statusInvalidMemoryAccess
	}
	return statusNotFound
}

// hostContinueStream defers Continue{De,En}coding until the VM call
// returns and, like Envoy, forgets the request-side maps.
func hostContinueStream(vm *vmInstance, _ context.Context, a []uint32) status {
	s := vm.effective()
	switch a[0] {
	case streamRequest, streamResponse:
		if s == nil {
			return statusOK
		}
		if !s.completed {
			cb := s.cb
			if a[0] == streamRequest {
				s.queue(cb.ContinueDecoding)
			} else {
				s.queue(cb.ContinueEncoding)
			}
		}
		s.reqHeaders, s.reqTrailers = nil, nil
		if !s.bufferingReq {
			s.reqBody = nil
		}
		return statusOK
	case streamDownstream:
		return statusOK
	case streamUpstream:
		return statusUnimplemented
	}
	return statusBadArgument
}

func hostCloseStream(vm *vmInstance, _ context.Context, a []uint32) status {
	if a[0] > streamUpstream {
		return statusBadArgument
	}
	s := vm.effective()
	if s != nil && !s.completed && (a[0] == streamRequest || a[0] == streamResponse) {
		cb := s.cb
		s.queue(func() {
			if info := cb.Info(); info != nil && info.ResponseDetails == "" {
				info.ResponseDetails = closeStreamDetails
			}
			cb.ResetStream()
		})
	}
	return statusOK
}
