package wasmhost

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	abi "github.com/chimehq/chime/internal/proxywasmabi"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// firstContextID is the first id proxy-wasm-cpp-host allocates in a VM
// (the first plugin's root context); 0 is the VM context.
const firstContextID = 1

// rootContext is one plugin's root context in one VM. Its id comes from
// the VM's context id sequence, as in cpp-host's allocContextId: the
// first plugin gets 1, a plugin added later the next free id.
//
// Filters with the same root_id and plugin configuration in one VM are one
// plugin to Envoy (cpp-host's plugin key: root_id, plugin configuration and
// vm key; the worker's plugin cache returns the first one's handle), so
// they share a root context: refs counts them.
type rootContext struct {
	id       uint32
	f        *Factory // the first filter with this plugin key still open
	refs     int
	created  bool // proxy_on_context_create was called
	tickStop chan struct{}
	// pendingDone: proxy_on_done returned false, and the root context
	// lives on (its http_call answers still arrive) until it calls
	// proxy_done (cpp-host's pending_done_).
	pendingDone bool
}

// vmInstance is one instantiated module with its own runtime. Every call
// into it is serialized by mu (a wasm VM is single-threaded); host
// functions run inside such a call and use the per-call state in cur.
type vmInstance struct {
	g      *vmGroup
	eng    *engine // the compiled (or interpreted) module this VM instantiates
	worker int
	mod    api.Module
	// host is the VM's own instance of each host module, by the name the
	// guest imports it as.
	host map[string]api.Module

	mu      sync.Mutex
	failed  atomic.Bool
	failErr error // why it failed (set once, under mu)
	closed  bool  // guarded by mu
	// retired (guarded by mu): replaced in its slot (tier.go); it ends
	// when bound, the streams handed this VM and not yet forgotten, is 0.
	retired  bool
	bound    atomic.Int64
	released bool // guarded by mu or before the VM is shared

	// Guest exports (nil when absent, as every callback is optional).
	fnMalloc, fnContextCreate, fnVMStart, fnConfigure                        api.Function
	fnReqHeaders, fnReqBody, fnReqTrailers, fnRespHeaders, fnRespBody        api.Function
	fnRespTrailers, fnLog, fnDone, fnDelete, fnTick, fnQueueReady, fnHTTPRes api.Function

	// Guarded by mu.
	nextContextID uint32
	streams       map[uint32]*stream
	roots         map[uint32]*rootContext
	rootOf        map[*Factory]*rootContext
	cur           *callState
	// scratch is per call depth (host functions call the guest's
	// allocator, which may call the host): the call states, result
	// stacks and host-call arguments of the calls in progress, so a call
	// allocates none of them.
	scratch [scratchDepth]struct {
		call  callState
		stack [8]uint64
		args  [8]uint32
	}
	callDepth, argDepth int
	mallocStack         [1]uint64
	after               []func()
	restricted          bool // during _initialize/_start, as Envoy's restricted callbacks
	pendingDone         int  // root contexts waiting for their proxy_done

	pendingCalls map[uint32]context.CancelFunc
	nextCallID   uint32
	httpResp     *httpfilter.CallResponse // during proxy_on_http_call_response
	callStatus   uint32                   // proxy_get_status
	callMessage  string

	declared                              map[string]declaredProperty // declare_property
	metrics                               map[uint32]httpfilter.Metric
	nextCounter, nextGauge, nextHistogram uint32
	pluginConfigVisible                   bool
	net                                   *netExports // network filter callbacks (netfilter.go)
}

// callState is what host functions need to know about the call in progress.
type callState struct {
	current   uint32 // the context the host called into
	effective uint32 // set by proxy_set_effective_context (0 = current)
	// send_local_response was called: the callback's result becomes a stop
	// (cpp-host stopNextIteration).
	stopIteration bool
}

func (g *vmGroup) newVM(worker int) (*vmInstance, error) {
	ctx := g.ctx
	vm := &vmInstance{
		g:             g,
		eng:           g.eng.Load(),
		worker:        worker,
		nextContextID: firstContextID,
		streams:       map[uint32]*stream{},
		roots:         map[uint32]*rootContext{},
		rootOf:        map[*Factory]*rootContext{},
		pendingCalls:  map[uint32]context.CancelFunc{},
		metrics:       map[uint32]httpfilter.Metric{},
		nextGauge:     1,
		nextHistogram: 2,
	}
	vm.eng.vms.Add(1) // until release
	if err := vm.instantiateHost(ctx); err != nil {
		vm.release()
		return nil, err
	}
	// The guest's imports resolve to this VM's host modules.
	ictx := experimental.WithImportResolver(withGuestMemory(ctx), func(name string) api.Module { return vm.host[name] })
	mod, err := vm.eng.rt.InstantiateModule(ictx, vm.eng.cm, wazero.NewModuleConfig().WithName("").WithStartFunctions())
	if err != nil {
		vm.release()
		return nil, fmt.Errorf("wasm: instantiate: %w", err)
	}
	g.instantiations.Add(1)
	vm.mod = mod
	vm.lookupExports()
	if err := vm.start(ctx); err != nil {
		vm.close()
		return nil, err
	}
	return vm, nil
}

func (vm *vmInstance) lookupExports() {
	get := func(name string) api.Function { return vm.mod.ExportedFunction(name) }
	// cpp-host prefers an exported malloc over proxy_on_memory_allocate.
	if vm.fnMalloc = get("malloc"); vm.fnMalloc == nil {
		vm.fnMalloc = get("proxy_on_memory_allocate")
	}
	vm.fnContextCreate = get("proxy_on_context_create")
	vm.fnVMStart = get("proxy_on_vm_start")
	vm.fnConfigure = get("proxy_on_configure")
	vm.fnReqHeaders = get("proxy_on_request_headers")
	vm.fnReqBody = get("proxy_on_request_body")
	vm.fnReqTrailers = get("proxy_on_request_trailers")
	vm.fnRespHeaders = get("proxy_on_response_headers")
	vm.fnRespBody = get("proxy_on_response_body")
	vm.fnRespTrailers = get("proxy_on_response_trailers")
	vm.fnLog = get("proxy_on_log")
	vm.fnDone = get("proxy_on_done")
	vm.fnDelete = get("proxy_on_delete")
	vm.fnTick = get("proxy_on_tick")
	vm.fnQueueReady = get("proxy_on_queue_ready")
	vm.fnHTTPRes = get("proxy_on_http_call_response")
}

// start runs Envoy's VM start (cpp-host startVm): _initialize then main
// (reactor) or _start (command), with only the restricted capabilities.
// Plugins are started afterwards with startPlugin.
func (vm *vmInstance) start(ctx context.Context) error {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.restricted = true
	defer func() { vm.restricted = false }()
	if fn := vm.mod.ExportedFunction("_initialize"); fn != nil {
		if _, ok := vm.call(ctx, 0, fn); !ok {
			return fmt.Errorf("wasm: _initialize trapped: %w", vm.failErr)
		}
		if fn := vm.mod.ExportedFunction("main"); fn != nil && len(fn.Definition().ParamTypes()) == 2 {
			if _, ok := vm.call(ctx, 0, fn, 0, 0); !ok {
				return fmt.Errorf("wasm: main trapped: %w", vm.failErr)
			}
		} else if fn := vm.mod.ExportedFunction("__main_void"); fn != nil {
			if _, ok := vm.call(ctx, 0, fn); !ok {
				return fmt.Errorf("wasm: __main_void trapped: %w", vm.failErr)
			}
		}
	} else if fn := vm.mod.ExportedFunction("_start"); fn != nil {
		if _, ok := vm.call(ctx, 0, fn); !ok {
			return fmt.Errorf("wasm: _start trapped: %w", vm.failErr)
		}
	}
	return nil
}

// startPlugin is cpp-host's WasmBase::start(plugin) then configure: a new
// root context with the next context id, proxy_on_context_create(root, 0),
// proxy_on_vm_start(root, vm_config_size) (per root context, as cpp-host's
// ContextBase::onStart calls it), proxy_on_configure(root,
// plugin_config_size).
func (vm *vmInstance) startPlugin(ctx context.Context, f *Factory) error {
	vm.mu.Lock()
	defer func() {
		after := vm.takeAfter()
		vm.mu.Unlock()
		runAfter(after)
	}()
	if vm.failed.Load() || vm.closed {
		return fmt.Errorf("wasm: VM failed: %w", vm.failErr)
	}
	if r := vm.rootOf[f]; r != nil {
		return nil // already started in this VM
	}
	for _, r := range vm.roots {
		if samePluginKey(r.f, f) {
			r.refs++
			vm.rootOf[f] = r
			return nil
		}
	}
	r := &rootContext{id: vm.nextContextID, f: f, refs: 1}
	vm.nextContextID++
	vm.roots[r.id] = r
	vm.rootOf[f] = r
	if vm.fnContextCreate != nil {
		vm.pluginConfigVisible = true
		_, ok := vm.call(ctx, r.id, vm.fnContextCreate, uint64(r.id), 0)
		vm.pluginConfigVisible = false
		if !ok {
			return fmt.Errorf("wasm: proxy_on_context_create for the root context trapped: %w", vm.failErr)
		}
	}
	r.created = true
	if vm.fnVMStart != nil {
		res, ok := vm.call(ctx, r.id, vm.fnVMStart, uint64(r.id), uint64(len(vm.g.cfg.VMConfiguration)))
		if !ok {
			return fmt.Errorf("wasm: proxy_on_vm_start trapped: %w", vm.failErr)
		}
		if uint32(res) == 0 {
			return errors.New("wasm: Failed to start base Wasm (proxy_on_vm_start returned false)")
		}
	}
	if vm.fnConfigure != nil {
		vm.pluginConfigVisible = true
		res, ok := vm.call(ctx, r.id, vm.fnConfigure, uint64(r.id), uint64(len(f.cfg.PluginConfiguration)))
		vm.pluginConfigVisible = false
		if !ok {
			return fmt.Errorf("wasm: proxy_on_configure trapped: %w", vm.failErr)
		}
		if uint32(res) == 0 {
			return fmt.Errorf("wasm: Unable to configure Wasm plugin %q (proxy_on_configure returned false)", f.cfg.PluginName)
		}
	}
	return nil
}

// stopPlugin is WasmBase::startShutdown(plugin_key): the plugin's root
// context gets proxy_on_done and proxy_on_delete, and its tick stops.
func (vm *vmInstance) stopPlugin(f *Factory) {
	vm.mu.Lock()
	r := vm.rootOf[f]
	if r == nil {
		vm.mu.Unlock()
		return
	}
	delete(vm.rootOf, f)
	if r.refs--; r.refs > 0 {
		if r.f == f { // another filter with this plugin key takes over
			for other, or := range vm.rootOf {
				if or == r {
					r.f = other
					break
				}
			}
		}
		vm.mu.Unlock()
		return
	}
	vm.stopTick(r)
	if !vm.failed.Load() && !vm.closed && r.created {
		ctx := context.Background()
		if vm.fnDone != nil {
			if res, ok := vm.call(ctx, r.id, vm.fnDone, uint64(r.id)); ok && res == 0 {
				// The plugin finishes first and calls proxy_done.
				r.pendingDone = true
				vm.pendingDone++
				vm.after = nil
				vm.mu.Unlock()
				return
			}
		}
		if vm.fnDelete != nil {
			vm.call(ctx, r.id, vm.fnDelete, uint64(r.id))
		}
		vm.after = nil
	}
	delete(vm.roots, r.id)
	vm.mu.Unlock()
}

// hostDone is proxy_done (cpp-host WasmBase::done): the calling plugin's
// root context, whose proxy_on_done returned false, is finished; it gets
// proxy_on_delete once this call returns, and a retired VM with no other
// plugin pending closes then. NOT_FOUND when nothing is pending.
func hostDone(vm *vmInstance, _ context.Context, _ []uint32) abi.Status {
	r := vm.curRoot()
	if r == nil || !r.pendingDone {
		return abi.StatusNotFound
	}
	r.pendingDone = false
	vm.pendingDone--
	vm.after = append(vm.after, func() { vm.finishDone(r) })
	return abi.StatusOK
}

// finishDone deletes a root context whose plugin called proxy_done.
func (vm *vmInstance) finishDone(r *rootContext) {
	vm.mu.Lock()
	if !vm.failed.Load() && !vm.closed && vm.fnDelete != nil {
		vm.call(context.Background(), r.id, vm.fnDelete, uint64(r.id))
		vm.after = nil
	}
	delete(vm.roots, r.id)
	last := vm.retired && vm.pendingDone == 0 && len(vm.rootOf) == 0 && vm.bound.Load() == 0
	vm.mu.Unlock()
	if last {
		vm.close()
	}
}

// samePluginKey is cpp-host's plugin key comparison within one VM (whose
// vm key is already the same): root_id and plugin configuration.
func samePluginKey(a, b *Factory) bool {
	return a.cfg.RootID == b.cfg.RootID && string(a.cfg.PluginConfiguration) == string(b.cfg.PluginConfiguration)
}

// rootFor is the root context of the plugin the call at context id acts
// for: the root itself, a stream's plugin root, or (for the VM context)
// the first live root.
func (vm *vmInstance) rootFor(id uint32) *rootContext {
	if r := vm.roots[id]; r != nil {
		return r
	}
	if s := vm.streams[id]; s != nil {
		if r := vm.rootOf[s.f]; r != nil {
			return r
		}
	}
	var first *rootContext
	for _, r := range vm.roots {
		if first == nil || r.id < first.id {
			first = r
		}
	}
	return first
}

// curRoot is rootFor the context the current call acts for (the effective
// context if set).
func (vm *vmInstance) curRoot() *rootContext {
	id := uint32(0)
	if c := vm.cur; c != nil {
		id = c.current
		if c.effective != 0 {
			id = c.effective
		}
	}
	return vm.rootFor(id)
}

// plugin is the plugin (Factory) the current call acts for; nil only when
// the VM has no root context yet.
func (vm *vmInstance) plugin() *Factory {
	if r := vm.curRoot(); r != nil {
		return r.f
	}
	return nil
}

// curRootID is curRoot's id (0 when the VM has no root context).
func (vm *vmInstance) curRootID() uint32 {
	if r := vm.curRoot(); r != nil {
		return r.id
	}
	return 0
}

// pluginCfg is the current plugin's configuration (the group's first
// plugin's when none is current).
func (vm *vmInstance) pluginCfg() httpfilter.WasmConfig {
	if f := vm.plugin(); f != nil {
		return f.cfg
	}
	return vm.g.cfg
}

// logger is the current plugin's logger, or the group's.
func (vm *vmInstance) logger() *slog.Logger {
	if f := vm.plugin(); f != nil {
		return f.logger
	}
	return vm.g.logger
}

// call invokes fn with mu held, as context `current`. It returns false if
// the guest trapped, in which case the VM is marked failed. Deferred
// "after VM call" actions queued by host functions are left in vm.after for
// the caller to run once it has released mu (see runAfter).
func (vm *vmInstance) call(ctx context.Context, current uint32, fn api.Function, args ...uint64) (uint64, bool) {
	if vm.failed.Load() || vm.closed {
		return 0, false
	}
	res, _, ok := vm.invoke(ctx, current, fn, args...)
	return res, ok
}

// scratchDepth is how deep calls nest before they allocate their state.
const scratchDepth = 4

// invoke calls fn as context current, with vm.cur set for the host
// functions it calls; it returns fn's first result (0 when none) and the
// call state the host functions left. A trap fails the VM.
func (vm *vmInstance) invoke(ctx context.Context, current uint32, fn api.Function, args ...uint64) (uint64, callState, bool) {
	prev, d := vm.cur, vm.callDepth
	var st *callState
	var stack []uint64
	if d < scratchDepth && len(args) <= len(vm.scratch[d].stack) {
		st, stack = &vm.scratch[d].call, vm.scratch[d].stack[:]
		*st = callState{current: current}
	} else {
		st, stack = &callState{current: current}, make([]uint64, max(len(args), 1))
	}
	copy(stack, args)
	vm.cur = st
	vm.callDepth++
	err := fn.CallWithStack(ctx, stack)
	vm.callDepth--
	if err != nil {
		vm.fail(fn.Definition().Name(), err) // logged as the plugin in the call: vm.cur still names it
		vm.cur = prev
		return 0, callState{}, false
	}
	vm.cur = prev
	var v uint64
	if len(fn.Definition().ResultTypes()) > 0 {
		v = stack[0]
	}
	return v, *st, true
}

// fail marks the VM dead after a guest fault. Streams bound to it fail per
// fail_open from now on; the worker slot replaces it on the next stream.
func (vm *vmInstance) fail(where string, err error) {
	if vm.failed.Swap(true) {
		return
	}
	vm.failErr = fmt.Errorf("%s: %w", where, err)
	vm.logger().Error("wasm: VM failed; it will be replaced", "worker", vm.worker, "callback", where, "err", err)
	for _, r := range vm.roots {
		vm.stopTick(r)
	}
	for id, cancel := range vm.pendingCalls {
		cancel()
		delete(vm.pendingCalls, id)
	}
	if vm.retired && vm.pendingDone > 0 {
		// Out of its slot, so nothing replaces it, and no proxy_done can
		// come any more: it ends here (close takes the lock held now).
		go vm.close()
	}
}

// takeAfter returns and clears the deferred actions; call with mu held.
func (vm *vmInstance) takeAfter() []func() {
	a := vm.after
	vm.after = nil
	return a
}

func runAfter(actions []func()) {
	for _, a := range actions {
		a()
	}
}

// background runs a delivery that does not come from a stream (tick, queue,
// http response): lock, call, then run the deferred actions unlocked.
func (vm *vmInstance) background(fn func()) {
	vm.mu.Lock()
	if vm.failed.Load() || vm.closed {
		vm.mu.Unlock()
		return
	}
	fn()
	after := vm.takeAfter()
	vm.mu.Unlock()
	runAfter(after)
}

func (vm *vmInstance) close() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.closed {
		return
	}
	vm.closed = true
	for _, r := range vm.roots {
		vm.stopTick(r)
	}
	for id, cancel := range vm.pendingCalls {
		cancel()
		delete(vm.pendingCalls, id)
	}
	vm.release()
}

// release closes the guest instance and the VM's host modules.
func (vm *vmInstance) release() {
	if vm.released {
		return
	}
	vm.released = true
	defer func() {
		vm.eng.vms.Add(-1)
		vm.g.releaseEngine(vm.eng)
	}()
	ctx := context.Background()
	if vm.mod != nil {
		vm.mod.Close(ctx)
	}
	for _, m := range vm.host {
		m.Close(ctx)
	}
}

// setTick (re)arms root context r's tick; 0 disables it. Envoy keeps one
// tick per root context and re-arms the timer after each proxy_on_tick
// returns, so a slow tick never overlaps.
func (vm *vmInstance) setTick(r *rootContext, period time.Duration) {
	r.f.logger.Debug("wasm: tick period set", "worker", vm.worker, "root_context_id", r.id, "period_ms", period.Milliseconds())
	vm.stopTick(r)
	if period <= 0 || vm.retired {
		return
	}
	stop := make(chan struct{})
	r.tickStop = stop
	g := vm.g
	go func() {
		if !g.waitStarted(stop) {
			return
		}
		t := time.NewTimer(period)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-g.ctx.Done():
				return
			case <-t.C:
			}
			vm.background(func() {
				select {
				case <-stop: // re-armed or disabled while this tick waited for the VM
					return
				default:
				}
				if vm.fnTick != nil {
					vm.call(g.ctx, r.id, vm.fnTick, uint64(r.id))
				}
			})
			t.Reset(period)
		}
	}()
}

func (vm *vmInstance) stopTick(r *rootContext) {
	if r.tickStop != nil {
		close(r.tickStop)
		r.tickStop = nil
	}
}

// dispatchHTTPCall runs an accepted proxy_http_call in the background and
// delivers proxy_on_http_call_response to the root context: the call is
// owned by the root context (exports.cc http_call uses root_context()), so
// it outlives the stream that made it. A connect failure or an upstream
// timeout arrives from the cluster manager as a 503/504 response, as
// Envoy's async client makes it; any other failure (a reset after the
// response started, no cluster manager) is delivered as num_headers=0,
// body_size=0, num_trailers=0 with proxy_get_status = BROKEN_CONNECTION,
// "reset", as Envoy's onHttpCallFailure does.
func (vm *vmInstance) dispatchHTTPCall(root uint32, token uint32, cluster string, headers httpfilter.Headers, body []byte, trailers httpfilter.Headers, timeout time.Duration) {
	var ctx context.Context
	var cancel context.CancelFunc
	if timeout > 0 {
		ctx, cancel = context.WithTimeout(vm.g.ctx, timeout)
	} else {
		ctx, cancel = context.WithCancel(vm.g.ctx)
	}
	vm.pendingCalls[token] = cancel
	caller := vm.g.env.Clusters
	go func() {
		defer cancel()
		var resp *httpfilter.CallResponse
		err := errors.New("no cluster manager")
		if !vm.g.waitStarted(ctx.Done()) {
			err = ctx.Err() // closed, or timed out before the listeners were bound
			if err == nil {
				err = context.Canceled
			}
		} else if caller != nil {
			resp, err = caller.Call(ctx, cluster, headers, body, trailers, timeout)
		}
		if err == nil && ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			err = ctx.Err() // the VM is going away; a timeout is the caller's 504 answer
		}
		vm.background(func() {
			if _, ok := vm.pendingCalls[token]; !ok {
				return
			}
			delete(vm.pendingCalls, token)
			if vm.fnHTTPRes == nil {
				return
			}
			if err != nil || resp == nil {
				vm.g.logger.Debug("wasm: http call failed", "cluster", cluster, "token", token, "err", err)
				vm.callStatus, vm.callMessage = uint32(abi.StatusBrokenConnection), "reset"
				vm.call(vm.g.ctx, root, vm.fnHTTPRes, uint64(root), uint64(token), 0, 0, 0)
				vm.callMessage = ""
				return
			}
			vm.httpResp = resp
			vm.call(vm.g.ctx, root, vm.fnHTTPRes, uint64(root), uint64(token),
				uint64(len(resp.Headers)), uint64(len(resp.Body)), uint64(len(resp.Trailers)))
			vm.httpResp = nil
		})
	}()
}

// queueReady delivers proxy_on_queue_ready to the context that registered
// the queue, asynchronously (Envoy posts it to that worker's dispatcher).
func (vm *vmInstance) queueReady(contextID, token uint32) {
	go vm.background(func() {
		if vm.fnQueueReady == nil {
			return
		}
		if vm.roots[contextID] == nil && vm.streams[contextID] == nil {
			return
		}
		vm.call(vm.g.ctx, contextID, vm.fnQueueReady, uint64(contextID), uint64(token))
	})
}
