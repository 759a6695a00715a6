//go:build wasip1

package bridge

//lint:file-ignore U1000 the proxy_on_* callbacks are called by the wasm host through go:wasmexport

// The proxy-wasm v0.2.1 callbacks (abi.GuestCallbacks). Each one enters
// through enter(), which drops host allocations left over from earlier
// callbacks, then routes to the installed Guest. Reentrant calls (a host
// calling back while a hostcall is in progress) keep the live allocations.

var depth int

func enter() {
	if depth == 0 {
		memory.Reset()
	}
	depth++
}

func leave() { depth-- }

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

//go:wasmexport proxy_abi_version_0_2_1
func proxyABIVersion021() {}

//go:wasmexport proxy_on_memory_allocate
func proxyOnMemoryAllocate(size uint32) uint32 {
	_, addr := memory.Alloc(size)
	return uint32(addr)
}

//go:wasmexport proxy_on_vm_start
func proxyOnVMStart(rootID, size uint32) uint32 {
	enter()
	defer leave()
	return b2u(guest.OnVMStart(rootID, size))
}

//go:wasmexport proxy_on_configure
func proxyOnConfigure(rootID, size uint32) uint32 {
	enter()
	defer leave()
	return b2u(guest.OnConfigure(rootID, size))
}

//go:wasmexport proxy_on_context_create
func proxyOnContextCreate(contextID, parentID uint32) {
	enter()
	defer leave()
	guest.OnContextCreate(contextID, parentID)
}

//go:wasmexport proxy_on_request_headers
func proxyOnRequestHeaders(contextID, numHeaders, endOfStream uint32) uint32 {
	enter()
	defer leave()
	return uint32(guest.OnRequestHeaders(contextID, numHeaders, endOfStream != 0))
}

//go:wasmexport proxy_on_request_body
func proxyOnRequestBody(contextID, bodySize, endOfStream uint32) uint32 {
	enter()
	defer leave()
	return uint32(guest.OnRequestBody(contextID, bodySize, endOfStream != 0))
}

//go:wasmexport proxy_on_request_trailers
func proxyOnRequestTrailers(contextID, numTrailers uint32) uint32 {
	enter()
	defer leave()
	return uint32(guest.OnRequestTrailers(contextID, numTrailers))
}

//go:wasmexport proxy_on_response_headers
func proxyOnResponseHeaders(contextID, numHeaders, endOfStream uint32) uint32 {
	enter()
	defer leave()
	return uint32(guest.OnResponseHeaders(contextID, numHeaders, endOfStream != 0))
}

//go:wasmexport proxy_on_response_body
func proxyOnResponseBody(contextID, bodySize, endOfStream uint32) uint32 {
	enter()
	defer leave()
	return uint32(guest.OnResponseBody(contextID, bodySize, endOfStream != 0))
}

//go:wasmexport proxy_on_response_trailers
func proxyOnResponseTrailers(contextID, numTrailers uint32) uint32 {
	enter()
	defer leave()
	return uint32(guest.OnResponseTrailers(contextID, numTrailers))
}

//go:wasmexport proxy_on_http_call_response
func proxyOnHttpCallResponse(rootID, calloutID, numHeaders, bodySize, numTrailers uint32) {
	enter()
	defer leave()
	guest.OnHttpCallResponse(rootID, calloutID, numHeaders, bodySize, numTrailers)
}

//go:wasmexport proxy_on_tick
func proxyOnTick(rootID uint32) {
	enter()
	defer leave()
	guest.OnTick(rootID)
}

//go:wasmexport proxy_on_queue_ready
func proxyOnQueueReady(rootID, queueID uint32) {
	enter()
	defer leave()
	guest.OnQueueReady(rootID, queueID)
}

//go:wasmexport proxy_on_foreign_function
func proxyOnForeignFunction(rootID, functionID, argumentsSize uint32) {
	enter()
	defer leave()
	guest.OnForeignFunction(rootID, functionID, argumentsSize)
}

//go:wasmexport proxy_on_log
func proxyOnLog(contextID uint32) {
	enter()
	defer leave()
	guest.OnLog(contextID)
}

//go:wasmexport proxy_on_done
func proxyOnDone(contextID uint32) uint32 {
	enter()
	defer leave()
	return b2u(guest.OnDone(contextID))
}

//go:wasmexport proxy_on_delete
func proxyOnDelete(contextID uint32) {
	enter()
	defer leave()
	guest.OnDelete(contextID)
}
