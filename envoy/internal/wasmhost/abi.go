package wasmhost

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/tetratelabs/wazero/api"

	abi "github.com/chimehq/chime/internal/proxywasmabi"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// hostFunc is one host function bound to its signature in the ABI
// catalogue. fn reads its parameters from stack and writes its result to
// stack[0].
type hostFunc struct {
	sig abi.Func
	fn  func(vm *vmInstance, ctx context.Context, stack []uint64)
	// allowedInStart: callable during _initialize/_start. Anything else
	// traps there ("restricted_callback"), as Envoy's V8 runtime does.
	allowedInStart bool
}

// handler implements one host function: words for all-i32 parameters
// (the result is a status or an errno), raw for anything else.
type handler struct {
	words          func(vm *vmInstance, ctx context.Context, a []uint32) uint32
	raw            func(vm *vmInstance, ctx context.Context, stack []uint64)
	allowedInStart bool
}

func proxy(fn func(vm *vmInstance, ctx context.Context, a []uint32) abi.Status) handler {
	return handler{words: func(vm *vmInstance, ctx context.Context, a []uint32) uint32 { return uint32(fn(vm, ctx, a)) }}
}

func (h handler) inStart() handler { h.allowedInStart = true; return h }

// bind gives h the catalogue signature sig. A words handler for a
// signature with other parameter types is a programming error.
func (h handler) bind(sig abi.Func) hostFunc {
	hf := hostFunc{sig: sig, fn: h.raw, allowedInStart: h.allowedInStart}
	if h.words == nil {
		return hf
	}
	for _, t := range sig.Params {
		if t != abi.I32 {
			panic(fmt.Sprintf("wasmhost: %s has non-i32 parameters; give it a raw handler", sig))
		}
	}
	n, words := len(sig.Params), h.words
	hf.fn = func(vm *vmInstance, ctx context.Context, stack []uint64) {
		var a []uint32
		if d := vm.argDepth; d < scratchDepth && n <= len(vm.scratch[d].args) {
			a = vm.scratch[d].args[:n]
		} else {
			a = make([]uint32, n)
		}
		for i := range a {
			a[i] = uint32(stack[i])
		}
		vm.argDepth++
		r := words(vm, ctx, a)
		vm.argDepth--
		stack[0] = uint64(r)
	}
	return hf
}

// bindAll binds every function of sigs to its handler in hs.
func bindAll(sigs []abi.Func, hs map[string]handler) []hostFunc {
	out := make([]hostFunc, 0, len(sigs))
	for _, sig := range sigs {
		h, ok := hs[sig.Name]
		if !ok {
			panic("wasmhost: no handler for " + sig.String())
		}
		out = append(out, h.bind(sig))
	}
	return out
}

func valueTypes(ts []abi.ValueType) []api.ValueType {
	out := make([]api.ValueType, len(ts))
	for i, t := range ts {
		out[i] = api.ValueType(t) // the same wasm binary encoding
	}
	return out
}

// instantiateHost registers the env and WASI host modules in vm's runtime.
func (vm *vmInstance) instantiateHost(ctx context.Context) error {
	mods := map[string][]hostFunc{
		abi.ModuleEnv:          envFunctions(vm.g.abi),
		abi.ModuleWASI:         wasiFunctions(vm.g.profile),
		abi.ModuleWASIUnstable: wasiFunctions(vm.g.profile),
	}
	vm.host = make(map[string]api.Module, len(mods))
	for modName, fns := range mods {
		// Instance names are unique within the group's runtime; the guest
		// finds its VM's instances through the import resolver (newVM).
		b := vm.eng.rt.NewHostModuleBuilder(fmt.Sprintf("%s#%d", modName, vm.eng.hostSeq.Add(1)))
		for _, h := range fns {
			h, qualified := h, modName+"."+h.sig.Name
			b.NewFunctionBuilder().WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, _ api.Module, stack []uint64) {
				if vm.restricted && !h.allowedInStart {
					panic(fmt.Errorf("restricted_callback: %s called during VM start", qualified))
				}
				h.fn(vm, ctx, stack)
			}), valueTypes(h.sig.Params), valueTypes(h.sig.Results)).Export(h.sig.Name)
		}
		m, err := b.Instantiate(ctx)
		if err != nil {
			return fmt.Errorf("wasm: host module %s: %w", modName, err)
		}
		vm.host[modName] = resolvable(m)
	}
	return nil
}

// resolvable returns the module instance a host module builder's
// Instantiate wraps: wazero's import resolver takes only the instance
// itself (wazero v1.12 panics on the wrapper, which only hides
// ExportedFunction). The conformance suite instantiates every guest
// through the resolver, so a wazero that changes this shape fails it.
func resolvable(m api.Module) api.Module {
	v := reflect.ValueOf(m)
	if v.Kind() == reflect.Struct && v.NumField() == 1 && v.Type().Field(0).Anonymous {
		if inner, ok := v.Field(0).Interface().(api.Module); ok && inner != nil {
			return inner
		}
	}
	return m
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
	// A nested allocation (none is expected: the guest's allocator calls
	// no host function that allocates) would leave this call's result
	// intact: the result is written when the call returns.
	stack := vm.mallocStack[:]
	stack[0] = uint64(size)
	if err := vm.fnMalloc.CallWithStack(ctx, stack); err != nil {
		panic(err)
	}
	if len(vm.fnMalloc.Definition().ResultTypes()) == 0 || uint32(stack[0]) == 0 {
		return 0, false
	}
	return uint32(stack[0]), true
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

func (vm *vmInstance) copyOutStatus(ctx context.Context, data []byte, ptrPtr, sizePtr uint32) abi.Status {
	if !vm.copyOut(ctx, data, ptrPtr, sizePtr) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
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
		if vm.roots[c.effective] != nil {
			return nil
		}
		if s := vm.streams[c.effective]; s != nil {
			return s
		}
	}
	return vm.streams[c.current]
}

// --- logging ------------------------------------------------------------

// The slog levels of Envoy's trace and critical, which slog lacks;
// LevelName renders them with Envoy's names.
const (
	LevelTrace    = slog.LevelDebug - 4
	LevelCritical = slog.LevelError + 4
)

// LevelName is a slog.HandlerOptions.ReplaceAttr that names LevelTrace
// and LevelCritical as Envoy does ("TRACE", "CRITICAL") instead of
// "DEBUG-4" and "ERROR+4".
func LevelName(_ []string, a slog.Attr) slog.Attr {
	if a.Key != slog.LevelKey {
		return a
	}
	switch l, _ := a.Value.Any().(slog.Level); l {
	case LevelTrace:
		a.Value = slog.StringValue("TRACE")
	case LevelCritical:
		a.Value = slog.StringValue("CRITICAL")
	}
	return a
}

func slogLevel(level abi.LogLevel) slog.Level {
	switch level {
	case abi.LogLevelTrace:
		return LevelTrace
	case abi.LogLevelDebug:
		return slog.LevelDebug
	case abi.LogLevelInfo:
		return slog.LevelInfo
	case abi.LogLevelWarn:
		return slog.LevelWarn
	case abi.LogLevelError:
		return slog.LevelError
	default:
		return LevelCritical
	}
}

// log writes a guest line the way Envoy's Context::log does: "wasm log",
// the plugin's log prefix (name, root_id, vm_id, each when set), ": " and
// the message as the guest gave it.
func (vm *vmInstance) log(ctx context.Context, level abi.LogLevel, msg string) {
	logger, prefix := vm.g.logger, envoyLogPrefix(vm.g.cfg)
	if f := vm.plugin(); f != nil {
		logger, prefix = f.logger, f.logPrefix
	}
	logger.Log(ctx, slogLevel(level), "wasm log"+prefix+": "+msg, "source", "wasm")
}

// envoyLogPrefix is PluginBase::makeLogPrefix.
func envoyLogPrefix(cfg httpfilter.WasmConfig) string {
	var b strings.Builder
	for _, s := range []string{cfg.PluginName, cfg.RootID, cfg.VMID} {
		if s != "" {
			b.WriteString(" " + s)
		}
	}
	return b.String()
}

// logLevel is the lowest proxy-wasm level the host logger records.
func (vm *vmInstance) logLevel(ctx context.Context) abi.LogLevel {
	for lvl := abi.LogLevelTrace; lvl < abi.LogLevelCritical; lvl++ {
		if vm.logger().Enabled(ctx, slogLevel(lvl)) {
			return lvl
		}
	}
	return abi.LogLevelCritical
}

// --- the env module -----------------------------------------------------

// emscriptenFunctions are the non-ABI env functions Envoy also registers
// for emscripten-built modules.
var emscriptenFunctions = []hostFunc{
	{sig: abi.Func{Module: abi.ModuleEnv, Name: "pthread_equal", Params: []abi.ValueType{abi.I32, abi.I32}, Results: []abi.ValueType{abi.I32}},
		fn: func(_ *vmInstance, _ context.Context, st []uint64) { st[0] = b2u(uint32(st[0]) == uint32(st[1])) }},
	{sig: abi.Func{Module: abi.ModuleEnv, Name: "emscripten_notify_memory_growth", Params: []abi.ValueType{abi.I32}},
		fn: func(*vmInstance, context.Context, []uint64) {}, allowedInStart: true},
}

// proxyHandlers implements every function of abi.HostFunctions.
var proxyHandlers = map[string]handler{
	"proxy_log":                          proxy(hostLog).inStart(),
	"proxy_get_log_level":                proxy(hostGetLogLevel),
	"proxy_get_status":                   proxy(hostGetStatus),
	"proxy_set_property":                 proxy(hostSetProperty),
	"proxy_get_property":                 proxy(hostGetProperty),
	"proxy_send_local_response":          proxy(hostSendLocalResponse),
	"proxy_get_shared_data":              proxy(hostGetSharedData),
	"proxy_set_shared_data":              proxy(hostSetSharedData),
	"proxy_register_shared_queue":        proxy(hostRegisterQueue),
	"proxy_resolve_shared_queue":         proxy(hostResolveQueue),
	"proxy_dequeue_shared_queue":         proxy(hostDequeue),
	"proxy_enqueue_shared_queue":         proxy(hostEnqueue),
	"proxy_get_header_map_value":         proxy(hostGetHeaderValue),
	"proxy_add_header_map_value":         proxy(hostAddHeaderValue),
	"proxy_replace_header_map_value":     proxy(hostReplaceHeaderValue),
	"proxy_remove_header_map_value":      proxy(hostRemoveHeaderValue),
	"proxy_get_header_map_pairs":         proxy(hostGetHeaderPairs),
	"proxy_set_header_map_pairs":         proxy(hostSetHeaderPairs),
	"proxy_get_header_map_size":          proxy(hostGetHeaderSize),
	"proxy_get_buffer_status":            proxy(hostGetBufferStatus),
	"proxy_get_buffer_bytes":             proxy(hostGetBufferBytes),
	"proxy_set_buffer_bytes":             proxy(hostSetBufferBytes),
	"proxy_http_call":                    proxy(hostHTTPCall),
	"proxy_grpc_call":                    proxy(hostGrpcOpen),
	"proxy_grpc_stream":                  proxy(hostGrpcOpen),
	"proxy_grpc_close":                   proxy(hostGrpcToken),
	"proxy_grpc_cancel":                  proxy(hostGrpcToken),
	"proxy_grpc_send":                    proxy(hostGrpcToken),
	"proxy_set_tick_period_milliseconds": proxy(hostSetTick),
	"proxy_get_current_time_nanoseconds": proxy(hostGetTime),
	"proxy_define_metric":                proxy(hostDefineMetric),
	"proxy_increment_metric":             {raw: hostIncrementMetric},
	"proxy_record_metric":                {raw: hostRecordMetric},
	"proxy_get_metric":                   proxy(hostGetMetric),
	"proxy_set_effective_context":        proxy(hostSetEffectiveContext),
	"proxy_done":                         proxy(hostDone),
	"proxy_call_foreign_function":        proxy(hostCallForeign),
	"proxy_continue_stream":              proxy(hostContinueStream),
	"proxy_close_stream":                 proxy(hostCloseStream),
}

// envFunctions is the env module for a module of ABI version v: the
// catalogue's host functions that version has, and the emscripten extras.
func envFunctions(v abi.Version) []hostFunc {
	var sigs []abi.Func
	for _, sig := range abi.HostFunctions {
		if sig.Since <= v {
			sigs = append(sigs, sig)
		}
	}
	return append(bindAll(sigs, proxyHandlers), emscriptenFunctions...)
}

func hostLog(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	if abi.LogLevel(a[0]) > abi.LogLevelCritical {
		return abi.StatusBadArgument
	}
	msg, ok := vm.readString(a[1], a[2])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	vm.log(ctx, abi.LogLevel(a[0]), msg)
	return abi.StatusOK
}

func hostGetLogLevel(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	if !vm.putU32(a[0], uint32(vm.logLevel(ctx))) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

func hostGetStatus(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	if !vm.putU32(a[0], vm.callStatus) {
		return abi.StatusInvalidMemoryAccess
	}
	return vm.copyOutStatus(ctx, []byte(vm.callMessage), a[1], a[2])
}

func hostSetProperty(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	path, ok1 := vm.readString(a[0], a[1])
	value, ok2 := vm.read(a[2], a[3])
	if !ok1 || !ok2 {
		return abi.StatusInvalidMemoryAccess
	}
	s := vm.effective()
	if s == nil {
		return abi.StatusNotFound // no stream info on the root context
	}
	if _, set := s.props[path]; set && vm.declared[path].readonly {
		return abi.StatusBadArgument // a readonly declared property is set once
	}
	if s.props == nil {
		s.props = map[string][]byte{}
	}
	s.props[path] = append([]byte(nil), value...)
	return abi.StatusOK
}

func hostGetProperty(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	path, ok := vm.readString(a[0], a[1])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	v, st := vm.property(vm.effective(), path)
	if st != abi.StatusOK {
		return st
	}
	return vm.copyOutStatus(ctx, v, a[2], a[3])
}

// hostSendLocalResponse defers the reply until the VM call returns
// (Envoy's addAfterVmCallAction) and makes the running callback stop.
func hostSendLocalResponse(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	details, ok1 := vm.readString(a[1], a[2])
	body, ok2 := vm.read(a[3], a[4])
	hdrs, ok3 := vm.read(a[5], a[6])
	if !ok1 || !ok2 || !ok3 {
		return abi.StatusInvalidMemoryAccess
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
	return abi.StatusOK
}

func hostGetSharedData(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	key, ok := vm.readString(a[0], a[1])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	v, cas, found := shared.get(vm.g.cfg.VMID, key)
	if !found {
		return abi.StatusNotFound
	}
	if !vm.copyOut(ctx, v, a[2], a[3]) || !vm.putU32(a[4], cas) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

func hostSetSharedData(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	key, ok1 := vm.readString(a[0], a[1])
	value, ok2 := vm.read(a[2], a[3])
	if !ok1 || !ok2 {
		return abi.StatusInvalidMemoryAccess
	}
	return shared.set(vm.g.cfg.VMID, key, value, a[4])
}

// hostRegisterQueue registers for the root context: on_queue_ready is
// always delivered to a root context (a stream registers its parent).
func hostRegisterQueue(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	name, ok := vm.readString(a[0], a[1])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	tok := shared.registerQueue(vm.g.cfg.VMID, name, vm, vm.curRootID())
	if !vm.putU32(a[2], tok) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

func hostResolveQueue(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	vmID, ok1 := vm.readString(a[0], a[1])
	name, ok2 := vm.readString(a[2], a[3])
	if !ok1 || !ok2 {
		return abi.StatusInvalidMemoryAccess
	}
	if vmID == "" {
		vmID = vm.g.cfg.VMID
	}
	tok, found := shared.resolveQueue(vmID, name)
	if !found {
		return abi.StatusNotFound
	}
	if !vm.putU32(a[4], tok) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

func hostDequeue(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	v, st := shared.dequeue(a[0])
	if st != abi.StatusOK {
		return st
	}
	return vm.copyOutStatus(ctx, v, a[1], a[2])
}

func hostEnqueue(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	v, ok := vm.read(a[1], a[2])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	owner, ownerID, st := shared.enqueue(a[0], v)
	if st == abi.StatusOK && owner != nil {
		owner.queueReady(ownerID, a[0])
	}
	return st
}

// --- header maps --------------------------------------------------------

// constMap is Envoy's getConstMap: what the guest may read now.
func (vm *vmInstance) constMap(t abi.MapType) *httpfilter.Headers {
	switch t {
	case abi.MapHttpCallResponseHeaders:
		if vm.httpResp != nil {
			return &vm.httpResp.Headers
		}
		return nil
	case abi.MapHttpCallResponseTrailers:
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
	case abi.MapHttpRequestHeaders:
		if s.accessLogPhase {
			return s.cb.RequestHeaders()
		}
		return s.reqHeaders
	case abi.MapHttpRequestTrailers:
		if s.accessLogPhase {
			return nil
		}
		return s.reqTrailers
	case abi.MapHttpResponseHeaders:
		if s.accessLogPhase {
			return s.cb.ResponseHeaders()
		}
		return s.respHeaders
	case abi.MapHttpResponseTrailers:
		if s.accessLogPhase {
			return s.cb.ResponseTrailers()
		}
		return s.respTrailers
	}
	return nil
}

// mutableMap is Envoy's getMap: only a stream's own maps, while held.
func (vm *vmInstance) mutableMap(t abi.MapType) (*httpfilter.Headers, *stream) {
	s := vm.effective()
	if s == nil {
		return nil, nil
	}
	switch t {
	case abi.MapHttpRequestHeaders:
		return s.reqHeaders, s
	case abi.MapHttpRequestTrailers:
		return s.reqTrailers, s
	case abi.MapHttpResponseHeaders:
		return s.respHeaders, s
	case abi.MapHttpResponseTrailers:
		return s.respTrailers, s
	}
	return nil, nil
}

// headersModified: editing request headers clears the route cache.
func headersModified(s *stream, t abi.MapType) {
	if t == abi.MapHttpRequestHeaders {
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

func hostGetHeaderValue(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	if abi.MapType(a[0]) > abi.MapTypeMax {
		return abi.StatusBadArgument
	}
	key, ok := vm.readString(a[1], a[2])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	h := vm.constMap(abi.MapType(a[0]))
	if h == nil {
		if s := vm.effective(); s != nil && s.accessLogPhase {
			return abi.StatusNotFound
		}
		return abi.StatusBadArgument
	}
	v, found := h.Get(key)
	if !found {
		return abi.StatusNotFound
	}
	return vm.copyOutStatus(ctx, []byte(v), a[3], a[4])
}

func editHeaders(vm *vmInstance, a []uint32, withValue bool, edit func(h *httpfilter.Headers, k, v string)) abi.Status {
	if abi.MapType(a[0]) > abi.MapTypeMax {
		return abi.StatusBadArgument
	}
	key, ok1 := vm.readString(a[1], a[2])
	value, ok2 := "", true
	if withValue {
		value, ok2 = vm.readString(a[3], a[4])
	}
	if !ok1 || !ok2 {
		return abi.StatusInvalidMemoryAccess
	}
	h, s := vm.mutableMap(abi.MapType(a[0]))
	if h == nil {
		return abi.StatusBadArgument
	}
	edit(h, key, value)
	headersModified(s, abi.MapType(a[0]))
	return abi.StatusOK
}

func hostAddHeaderValue(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	return editHeaders(vm, a, true, addHeader)
}

func hostReplaceHeaderValue(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	return editHeaders(vm, a, true, replaceHeader)
}

func hostRemoveHeaderValue(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	return editHeaders(vm, a, false, func(h *httpfilter.Headers, k, _ string) { h.Del(k) })
}

func hostGetHeaderPairs(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	if abi.MapType(a[0]) > abi.MapTypeMax {
		return abi.StatusBadArgument
	}
	var data []byte
	if h := vm.constMap(abi.MapType(a[0])); h != nil && len(*h) > 0 {
		data = encodePairs(*h)
	}
	return vm.copyOutStatus(ctx, data, a[1], a[2])
}

func hostSetHeaderPairs(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	if abi.MapType(a[0]) > abi.MapTypeMax {
		return abi.StatusBadArgument
	}
	b, ok := vm.read(a[1], a[2])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	h, s := vm.mutableMap(abi.MapType(a[0]))
	if h == nil {
		return abi.StatusBadArgument
	}
	*h = (*h)[:0]
	for _, e := range decodePairs(b) {
		addHeader(h, e.Key, e.Value)
	}
	headersModified(s, abi.MapType(a[0]))
	return abi.StatusOK
}

// hostGetHeaderSize reports Envoy's HeaderMap::byteSize (keys plus values).
func hostGetHeaderSize(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	if abi.MapType(a[0]) > abi.MapTypeMax {
		return abi.StatusBadArgument
	}
	h, _ := vm.mutableMap(abi.MapType(a[0]))
	if h == nil {
		return abi.StatusBadArgument
	}
	if !vm.putU32(a[1], uint32(headersByteSize(*h))) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
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
func (vm *vmInstance) buffer(t abi.BufferType) *bufferRef {
	switch t {
	case abi.BufferHttpRequestBody, abi.BufferHttpResponseBody:
		s := vm.effective()
		if s == nil {
			return &bufferRef{}
		}
		if t == abi.BufferHttpRequestBody {
			return &bufferRef{live: s.reqBody}
		}
		return &bufferRef{live: s.respBody}
	case abi.BufferDownstreamData, abi.BufferUpstreamData:
		return vm.netBuffer(t)
	case abi.BufferGrpcReceiveBuffer, abi.BufferForeignFunctionArguments:
		return &bufferRef{}
	case abi.BufferHttpCallResponseBody:
		if vm.httpResp == nil {
			return nil
		}
		return &bufferRef{ro: vm.httpResp.Body}
	case abi.BufferVMConfiguration:
		return &bufferRef{ro: vm.g.cfg.VMConfiguration}
	case abi.BufferPluginConfiguration:
		f := vm.plugin()
		if !vm.pluginConfigVisible || f == nil {
			return nil
		}
		return &bufferRef{ro: f.cfg.PluginConfiguration}
	}
	return nil
}

func hostGetBufferStatus(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	if abi.BufferType(a[0]) > abi.BufferTypeMax {
		return abi.StatusBadArgument
	}
	b := vm.buffer(abi.BufferType(a[0]))
	if b == nil {
		return abi.StatusNotFound
	}
	if !vm.putU32(a[1], uint32(len(b.bytes()))) || !vm.putU32(a[2], 0) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

// hostGetBufferBytes clamps start/length to the buffer ("don't overread").
func hostGetBufferBytes(vm *vmInstance, ctx context.Context, a []uint32) abi.Status {
	if abi.BufferType(a[0]) > abi.BufferTypeMax {
		return abi.StatusBadArgument
	}
	b := vm.buffer(abi.BufferType(a[0]))
	if b == nil {
		return abi.StatusNotFound
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
			return abi.StatusInvalidMemoryAccess
		}
		return abi.StatusOK
	}
	return vm.copyOutStatus(ctx, data[start:start+length], a[3], a[4])
}

// hostSetBufferBytes follows Envoy's Buffer::copyFrom: start=0 drains
// min(length, size) bytes then prepends (so 0,0 prepends and 0,>=size
// replaces everything); start>=size appends; anything else, or a
// read-only buffer, is BAD_ARGUMENT.
func hostSetBufferBytes(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	if abi.BufferType(a[0]) > abi.BufferTypeMax {
		return abi.StatusBadArgument
	}
	b := vm.buffer(abi.BufferType(a[0]))
	if b == nil {
		return abi.StatusNotFound
	}
	data, ok := vm.read(a[3], a[4])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	if b.live == nil {
		return abi.StatusBadArgument
	}
	cur := b.live.Bytes
	start, length := a[1], a[2]
	switch {
	case start == 0:
		// Built by append, which does not zero what it then overwrites
		// (make would clear the whole 1 MB of a replaced body first).
		drop := min(int(length), len(cur))
		nb := append([]byte(nil), data...)
		b.live.Bytes = append(nb, cur[drop:]...)
	case uint64(start) >= uint64(len(cur)):
		b.live.Bytes = append(cur, data...)
	default:
		return abi.StatusBadArgument
	}
	return abi.StatusOK
}

// --- http calls ---------------------------------------------------------

func hostHTTPCall(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	cluster, ok1 := vm.readString(a[0], a[1])
	hdrs, ok2 := vm.read(a[2], a[3])
	body, ok3 := vm.read(a[4], a[5])
	trl, ok4 := vm.read(a[6], a[7])
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return abi.StatusInvalidMemoryAccess
	}
	if !vm.putU32(a[9], 0) {
		return abi.StatusInvalidMemoryAccess
	}
	timeoutMS := int32(a[8])
	if timeoutMS < 0 {
		return abi.StatusBadArgument
	}
	if cc, ok := vm.g.env.Clusters.(httpfilter.ClusterChecker); ok && !cc.HasCluster(cluster) {
		return abi.StatusBadArgument
	}
	var headers httpfilter.Headers
	for _, e := range decodePairs(hdrs) {
		addHeader(&headers, e.Key, e.Value)
	}
	for _, required := range []string{":path", ":method", ":authority"} {
		if _, ok := headers.Get(required); !ok {
			return abi.StatusBadArgument
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
	vm.dispatchHTTPCall(vm.curRootID(), token, cluster, headers, append([]byte(nil), body...), trailers, time.Duration(timeoutMS)*time.Millisecond)
	vm.putU32(a[9], token)
	return abi.StatusOK
}

// hostGrpcOpen: gRPC callouts are not supported; an unknown cluster gets
// Envoy's PARSE_FAILURE, a known one INTERNAL_FAILURE (failed to send).
func hostGrpcOpen(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	cluster, ok := vm.readString(a[0], a[1])
	if !ok {
		return abi.StatusInvalidMemoryAccess
	}
	if cc, ok := vm.g.env.Clusters.(httpfilter.ClusterChecker); ok && !cc.HasCluster(cluster) {
		return abi.StatusParseFailure
	}
	return abi.StatusInternalFailure
}

func hostGrpcToken(_ *vmInstance, _ context.Context, a []uint32) abi.Status {
	if t := a[0] & 3; t == 1 || t == 2 {
		return abi.StatusNotFound
	}
	return abi.StatusBadArgument
}

// --- timers, time, metrics ----------------------------------------------

func hostSetTick(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	if r := vm.curRoot(); r != nil {
		vm.setTick(r, time.Duration(a[0])*time.Millisecond)
	}
	return abi.StatusOK
}

func hostGetTime(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	if !vm.putU64(a[0], uint64(time.Now().UnixNano())) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

func hostDefineMetric(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	name, ok := vm.readString(a[1], a[2])
	if !ok {
		return abi.StatusInvalidMemoryAccess
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
		return abi.StatusBadArgument
	}
	vm.metrics[id] = vm.g.stats().Define(httpfilter.MetricKind(a[0]), name)
	if !vm.putU32(a[3], id) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

func hostIncrementMetric(vm *vmInstance, _ context.Context, st []uint64) {
	id, delta := uint32(st[0]), int64(st[1])
	m, kind := vm.metrics[id], httpfilter.MetricKind(id&metricTypeMask)
	switch {
	case kind != httpfilter.MetricCounter && kind != httpfilter.MetricGauge:
		st[0] = uint64(abi.StatusBadArgument)
	case m == nil:
		st[0] = uint64(abi.StatusNotFound)
	case kind == httpfilter.MetricCounter && delta <= 0:
		st[0] = uint64(abi.StatusBadArgument)
	default:
		m.Add(delta)
		st[0] = uint64(abi.StatusOK)
	}
}

// hostRecordMetric: a counter adds the value, a gauge is set, a histogram
// records it (Envoy recordMetric).
func hostRecordMetric(vm *vmInstance, _ context.Context, st []uint64) {
	id, v := uint32(st[0]), st[1]
	m := vm.metrics[id]
	if m == nil {
		st[0] = uint64(abi.StatusNotFound)
		return
	}
	if httpfilter.MetricKind(id&metricTypeMask) == httpfilter.MetricCounter {
		m.Add(int64(v))
	} else {
		m.Set(int64(v))
	}
	st[0] = uint64(abi.StatusOK)
}

func hostGetMetric(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	kind := httpfilter.MetricKind(a[0] & metricTypeMask)
	if kind != httpfilter.MetricCounter && kind != httpfilter.MetricGauge {
		return abi.StatusBadArgument
	}
	m := vm.metrics[a[0]]
	if m == nil {
		return abi.StatusNotFound
	}
	if !vm.putU64(a[1], uint64(m.Value())) {
		return abi.StatusInvalidMemoryAccess
	}
	return abi.StatusOK
}

// --- contexts and streams -----------------------------------------------

func hostSetEffectiveContext(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	if vm.roots[a[0]] == nil && vm.streams[a[0]] == nil {
		return abi.StatusBadArgument
	}
	vm.cur.effective = a[0]
	return abi.StatusOK
}

// hostContinueStream defers Continue{De,En}coding until the VM call
// returns and, like Envoy, forgets the request-side maps.
func hostContinueStream(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	s := vm.effective()
	switch abi.StreamType(a[0]) {
	case abi.StreamHttpRequest, abi.StreamHttpResponse:
		if s == nil {
			return abi.StatusOK
		}
		if !s.completed {
			cb := s.cb
			if abi.StreamType(a[0]) == abi.StreamHttpRequest {
				s.queue(cb.ContinueDecoding)
			} else {
				s.queue(cb.ContinueEncoding)
			}
		}
		s.reqHeaders, s.reqTrailers = nil, nil
		if !s.bufferingReq {
			s.reqBody = nil
		}
		return abi.StatusOK
	case abi.StreamDownstream:
		netContinue(s)
		return abi.StatusOK
	case abi.StreamUpstream:
		return abi.StatusUnimplemented
	}
	return abi.StatusBadArgument
}

func hostCloseStream(vm *vmInstance, _ context.Context, a []uint32) abi.Status {
	if abi.StreamType(a[0]) > abi.StreamUpstream {
		return abi.StatusBadArgument
	}
	s := vm.effective()
	if t := abi.StreamType(a[0]); t == abi.StreamDownstream || t == abi.StreamUpstream {
		netClose(s, t)
		return abi.StatusOK
	}
	if s != nil && !s.completed && (abi.StreamType(a[0]) == abi.StreamHttpRequest || abi.StreamType(a[0]) == abi.StreamHttpResponse) {
		cb := s.cb
		s.queue(func() {
			if info := cb.Info(); info != nil && info.ResponseDetails == "" {
				info.ResponseDetails = closeStreamDetails
			}
			cb.ResetStream()
		})
	}
	return abi.StatusOK
}
