package proxywasm

import (
	"fmt"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/proxywasm/internal/bridge"
	"github.com/chimehq/chime/plugin/proxywasm/internal/hostcall"
)

// HttpCallCallback receives the response of DispatchHttpCall. numHeaders is
// 0 when the call failed (timeout, reset, unknown cluster): the host's
// convention for failure. Read the response with GetHttpCallResponseHeaders,
// GetHttpCallResponseBody and GetHttpCallResponseTrailers.
type HttpCallCallback func(numHeaders, bodySize, numTrailers int)

// SetVMContext installs the plugin. Call it from an init function of the
// main package. It also forgets every context of a previous VM context,
// which is what tests rely on to start from a clean state.
func SetVMContext(vm VMContext) {
	state = dispatcher{
		vm:      vm,
		plugins: map[uint32]*pluginEntry{},
	}
}

type pluginEntry struct {
	ctx      PluginContext
	callouts map[uint32]callout
}

type callout struct {
	streamID uint32 // 0 when dispatched from the plugin context itself
	fn       HttpCallCallback
}

type streamEntry struct {
	ctx      HttpContext
	pluginID uint32
	finished bool // OnHttpStreamDone delivered
}

// dispatcher routes host callbacks to the plugin's contexts. The guest is
// single-threaded, so no locking.
type dispatcher struct {
	vm      VMContext
	plugins map[uint32]*pluginEntry
	// lastPlugin is the entry plugin last found, of root context
	// lastPluginID: a VM has one root context or a few, and a compare
	// costs less than a map lookup on every stream.
	lastPlugin   *pluginEntry
	lastPluginID uint32
	streams      streamTable
	active       uint32 // context whose callback is running (owner of new HTTP calls)
}

// plugin returns root context id's entry.
func (s *dispatcher) plugin(id uint32) (*pluginEntry, bool) {
	if s.lastPlugin != nil && s.lastPluginID == id {
		return s.lastPlugin, true
	}
	p, ok := s.plugins[id]
	if ok {
		s.lastPlugin, s.lastPluginID = p, id
	}
	return p, ok
}

var state dispatcher

func init() {
	SetVMContext(nil)
	bridge.SetGuest(guest{})
}

// recovered turns a panic in plugin code into an error log, so ordinary bad
// input can never trap the VM (a trap would fail every stream on it).
func recovered(callback string, r any) {
	if r == nil {
		return
	}
	defer func() { _ = recover() }() // logging itself must not re-panic
	_ = hostcall.Log(abi.LogLevelCritical, fmt.Sprintf("panic in %s: %v", callback, r))
}

// guest implements bridge.Guest on the package state.
type guest struct{}

func (guest) OnContextCreate(contextID, parentID uint32) {
	defer func() { recovered("proxy_on_context_create", recover()) }()
	s := &state
	s.active = contextID
	if parentID == 0 {
		if s.vm == nil {
			_ = hostcall.Log(abi.LogLevelCritical, "proxywasm: SetVMContext was never called")
			return
		}
		if pc := s.vm.NewPluginContext(contextID); pc != nil {
			s.plugins[contextID] = &pluginEntry{ctx: pc, callouts: map[uint32]callout{}}
			s.lastPlugin = nil // it may have been this id's
		}
		return
	}
	p, ok := s.plugin(parentID)
	if !ok {
		return
	}
	if hc := p.ctx.NewHttpContext(contextID); hc != nil {
		s.streams.put(contextID, &streamEntry{ctx: hc, pluginID: parentID})
	}
}

func (guest) OnVMStart(rootID, size uint32) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			recovered("proxy_on_vm_start", r)
			ok = false
		}
	}()
	state.active = rootID
	return state.vm != nil && state.vm.OnVMStart(int(size))
}

func (guest) OnConfigure(rootID, size uint32) (ok bool) {
	defer func() {
		if r := recover(); r != nil {
			recovered("proxy_on_configure", r)
			ok = false
		}
	}()
	state.active = rootID
	p, found := state.plugins[rootID]
	return found && p.ctx.OnPluginStart(int(size))
}

// stream runs fn on the HTTP context id, or continues when there is none.
func stream(name string, id uint32, fn func(HttpContext) Action) (action abi.Action) {
	defer func() {
		if r := recover(); r != nil {
			recovered(name, r)
			action = abi.ActionContinue // fail open
		}
	}()
	e, ok := state.streams.get(id)
	if !ok {
		return abi.ActionContinue
	}
	state.active = id
	return abi.Action(fn(e.ctx))
}

func (guest) OnRequestHeaders(id, n uint32, eos bool) abi.Action {
	return stream("proxy_on_request_headers", id, func(c HttpContext) Action {
		return c.OnHttpRequestHeaders(int(n), eos)
	})
}

func (guest) OnRequestBody(id, size uint32, eos bool) abi.Action {
	return stream("proxy_on_request_body", id, func(c HttpContext) Action {
		return c.OnHttpRequestBody(int(size), eos)
	})
}

func (guest) OnRequestTrailers(id, n uint32) abi.Action {
	return stream("proxy_on_request_trailers", id, func(c HttpContext) Action {
		return c.OnHttpRequestTrailers(int(n))
	})
}

func (guest) OnResponseHeaders(id, n uint32, eos bool) abi.Action {
	return stream("proxy_on_response_headers", id, func(c HttpContext) Action {
		return c.OnHttpResponseHeaders(int(n), eos)
	})
}

func (guest) OnResponseBody(id, size uint32, eos bool) abi.Action {
	return stream("proxy_on_response_body", id, func(c HttpContext) Action {
		return c.OnHttpResponseBody(int(size), eos)
	})
}

func (guest) OnResponseTrailers(id, n uint32) abi.Action {
	return stream("proxy_on_response_trailers", id, func(c HttpContext) Action {
		return c.OnHttpResponseTrailers(int(n))
	})
}

func (guest) OnHttpCallResponse(rootID, calloutID, numHeaders, bodySize, numTrailers uint32) {
	defer func() { recovered("proxy_on_http_call_response", recover()) }()
	p, ok := state.plugins[rootID]
	if !ok {
		return
	}
	c, ok := p.callouts[calloutID]
	if !ok {
		return
	}
	delete(p.callouts, calloutID)
	state.active = rootID
	if c.streamID != 0 {
		// The host calls back on the plugin context; make the stream
		// effective again so ResumeHttpRequest and friends act on it.
		if _, alive := state.streams.get(c.streamID); alive && bridge.CurrentHost().SetEffectiveContext(c.streamID) == abi.StatusOK {
			state.active = c.streamID
		}
	}
	c.fn(int(numHeaders), int(bodySize), int(numTrailers))
}

func (guest) OnTick(rootID uint32) {
	defer func() { recovered("proxy_on_tick", recover()) }()
	hostcall.ForgetLogLevel() // a level changed at runtime applies from now on
	if p, ok := state.plugins[rootID]; ok {
		state.active = rootID
		p.ctx.OnTick()
	}
}

func (guest) OnQueueReady(rootID, queueID uint32) {
	defer func() { recovered("proxy_on_queue_ready", recover()) }()
	if p, ok := state.plugins[rootID]; ok {
		if h, ok := p.ctx.(queueReadyHandler); ok {
			state.active = rootID
			h.OnQueueReady(queueID)
		}
	}
}

func (guest) OnForeignFunction(rootID, functionID, size uint32) {
	defer func() { recovered("proxy_on_foreign_function", recover()) }()
	if p, ok := state.plugins[rootID]; ok {
		if h, ok := p.ctx.(foreignFunctionHandler); ok {
			state.active = rootID
			h.OnForeignFunction(functionID, int(size))
		}
	}
}

// streamDone delivers OnHttpStreamDone at most once.
func streamDone(id uint32) {
	e, ok := state.streams.get(id)
	if !ok || e.finished {
		return
	}
	e.finished = true
	state.active = id
	e.ctx.OnHttpStreamDone()
}

func (guest) OnLog(id uint32) {
	defer func() { recovered("proxy_on_log", recover()) }()
	streamDone(id)
}

func (guest) OnDone(id uint32) (completed bool) {
	defer func() {
		if r := recover(); r != nil {
			recovered("proxy_on_done", r)
			completed = true
		}
	}()
	if _, ok := state.streams.get(id); ok {
		return true // a stream's: only a root context may defer
	}
	if p, ok := state.plugins[id]; ok {
		state.active = id
		return p.ctx.OnPluginDone()
	}
	return true
}

func (guest) OnDelete(id uint32) {
	defer func() { recovered("proxy_on_delete", recover()) }()
	if _, ok := state.streams.get(id); ok {
		streamDone(id) // a host that skipped proxy_on_log still gets it
		state.streams.del(id)
		return
	}
	delete(state.plugins, id)
	if state.lastPluginID == id {
		state.lastPlugin = nil
	}
}

// DispatchHttpCall sends an HTTP request to cluster through the host
// (proxy_http_call). headers must include :method, :path and :authority.
// The callback runs later, on the stream that dispatched the call (its
// effective context is restored, so ResumeHttpRequest works there). Calls
// belong to the plugin context and outlive the stream: if the stream was
// deleted meanwhile, the callback still runs, in the plugin context.
func DispatchHttpCall(cluster string, headers [][2]string, body []byte, trailers [][2]string,
	timeoutMilliseconds uint32, callback HttpCallCallback) (calloutID uint32, err error) {
	if callback == nil {
		return 0, fmt.Errorf("proxywasm: DispatchHttpCall needs a callback: %w", ErrBadArgument)
	}
	var pluginID, streamID uint32
	if e, ok := state.streams.get(state.active); ok {
		pluginID, streamID = e.pluginID, state.active
	} else if _, ok := state.plugins[state.active]; ok {
		pluginID = state.active
	} else {
		return 0, fmt.Errorf("proxywasm: DispatchHttpCall outside a plugin or HTTP context: %w", ErrBadArgument)
	}
	id, err := hostcall.HttpCall(cluster, headers, body, trailers, timeoutMilliseconds)
	if err != nil {
		return 0, err
	}
	state.plugins[pluginID].callouts[id] = callout{streamID: streamID, fn: callback}
	return id, nil
}
