package proxywasm

// VMContext is the plugin's per-VM entry point, installed with SetVMContext.
type VMContext interface {
	// OnVMStart is called once per VM. vmConfigurationSize is the size of
	// the VM configuration (read it with GetVMConfiguration). Returning false
	// fails the VM.
	OnVMStart(vmConfigurationSize int) bool
	// NewPluginContext creates the context of one configured plugin (the
	// ABI's root context).
	NewPluginContext(contextID uint32) PluginContext
}

// PluginContext is one configured plugin (root context). It owns the HTTP
// calls, ticks and queues of its streams.
type PluginContext interface {
	// OnPluginStart is called with the size of the plugin configuration
	// (read it with GetPluginConfiguration). Returning false rejects it.
	OnPluginStart(pluginConfigurationSize int) bool
	// OnPluginDone is called when the host tears the plugin down. Return
	// true to finish now, or false to finish later (its http calls are
	// still answered) with PluginDone.
	OnPluginDone() bool
	// OnTick is called every tick period (SetTickPeriodMilliSeconds).
	OnTick()
	// NewHttpContext creates the context of one HTTP stream. Returning nil
	// lets the stream pass through without callbacks.
	NewHttpContext(contextID uint32) HttpContext
}

// HttpContext is one HTTP stream. Each callback returns whether the host
// may forward what it just delivered.
type HttpContext interface {
	OnHttpRequestHeaders(numHeaders int, endOfStream bool) Action
	OnHttpRequestBody(bodySize int, endOfStream bool) Action
	OnHttpRequestTrailers(numTrailers int) Action
	OnHttpResponseHeaders(numHeaders int, endOfStream bool) Action
	OnHttpResponseBody(bodySize int, endOfStream bool) Action
	OnHttpResponseTrailers(numTrailers int) Action
	// OnHttpStreamDone is called once when the stream is complete or reset
	// (proxy_on_log), before the context is deleted.
	OnHttpStreamDone()
}

// A PluginContext may also implement these to receive the callbacks of
// the ABI parts this package does not export (shared queues, foreign
// functions); the internal bindings use them.
type queueReadyHandler interface{ OnQueueReady(queueID uint32) }

type foreignFunctionHandler interface {
	OnForeignFunction(functionID uint32, argumentsSize int)
}

// DefaultVMContext accepts any VM configuration and creates
// DefaultPluginContexts. Embed it to override only what you need.
type DefaultVMContext struct{}

func (DefaultVMContext) OnVMStart(int) bool { return true }
func (DefaultVMContext) NewPluginContext(uint32) PluginContext {
	return &DefaultPluginContext{}
}

// DefaultPluginContext accepts any configuration and creates no HTTP
// contexts.
type DefaultPluginContext struct{}

func (DefaultPluginContext) OnPluginStart(int) bool            { return true }
func (DefaultPluginContext) OnPluginDone() bool                { return true }
func (DefaultPluginContext) OnTick()                           {}
func (DefaultPluginContext) NewHttpContext(uint32) HttpContext { return nil }

// DefaultHttpContext continues every callback.
type DefaultHttpContext struct{}

func (DefaultHttpContext) OnHttpRequestHeaders(int, bool) Action  { return ActionContinue }
func (DefaultHttpContext) OnHttpRequestBody(int, bool) Action     { return ActionContinue }
func (DefaultHttpContext) OnHttpRequestTrailers(int) Action       { return ActionContinue }
func (DefaultHttpContext) OnHttpResponseHeaders(int, bool) Action { return ActionContinue }
func (DefaultHttpContext) OnHttpResponseBody(int, bool) Action    { return ActionContinue }
func (DefaultHttpContext) OnHttpResponseTrailers(int) Action      { return ActionContinue }
func (DefaultHttpContext) OnHttpStreamDone()                      {}
