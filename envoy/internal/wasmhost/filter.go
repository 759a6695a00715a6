package wasmhost

import (
	"context"

	"github.com/tetratelabs/wazero/api"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// stream is one HTTP stream context (docs/local-runtime.md), the Go counterpart of
// Envoy's Wasm Context for an HTTP filter. All fields are guarded by vm.mu
// (host functions read them during calls).
type stream struct {
	f   *Factory
	vm  *vmInstance // nil or failed: the stream fails per fail_open
	cb  httpfilter.Callbacks
	id  uint32
	ctx context.Context

	created   bool // proxy_on_context_create was called
	completed bool
	unbound   bool // forget released the VM's bound count
	// stream_failed_ / failure_local_reply_sent_: the 503 went out once.
	failedReplySent bool

	// The maps and buffers the guest may touch right now. Envoy keeps a
	// pointer only while the callback runs or while the filter is stopped
	// in it, and drops it when iteration continues (context.cc
	// decodeHeaders & co.), so e.g. request headers are not readable from
	// proxy_on_response_headers.
	reqHeaders, reqTrailers, respHeaders, respTrailers *httpfilter.Headers
	reqBody, respBody                                  *httpfilter.Buffer
	bufferingReq, bufferingResp                        bool
	accessLogPhase                                     bool

	props    map[string][]byte           // set_property values (Envoy filter state "wasm.<path>")
	declared map[string]declaredProperty // declare_property called on this stream context

	net *netState // set for a network filter's connection context (netfilter.go)
}

func newStream(f *Factory, vm *vmInstance, cb httpfilter.Callbacks) *stream {
	ctx := cb.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	return &stream{f: f, vm: vm, cb: cb, ctx: ctx}
}

func (s *stream) vmFailed() bool { return s.vm == nil || s.vm.failed.Load() }

// lock takes the VM lock; unlock releases it and then runs the
// after-call actions (deferred local replies, continues, resets).
func (s *stream) lock() {
	if s.vm != nil {
		s.vm.mu.Lock()
	}
}

func (s *stream) unlock() {
	if s.vm == nil {
		return
	}
	after := s.vm.takeAfter()
	s.vm.mu.Unlock()
	runAfter(after)
}

// checkFail is cpp-host's CHECK_FAIL_HTTP: with the VM dead, a fail-open
// stream goes on without the filter; otherwise it gets one 503
// (wasm_fail_stream) and the caller returns its "stop" status.
func (s *stream) checkFail() (failed, open bool) {
	if !s.vmFailed() {
		return false, false
	}
	if s.f.cfg.FailOpen {
		return true, true
	}
	if !s.failedReplySent {
		s.failedReplySent = true
		cb := s.cb
		s.queue(func() { cb.SendLocalReply(503, nil, nil, failStreamDetails) })
	}
	return true, false
}

func (s *stream) queue(a func()) {
	if s.vm == nil {
		a()
		return
	}
	s.vm.after = append(s.vm.after, a)
}

// create is ContextBase::onCreate: allocate the context id and tell the guest.
func (s *stream) create() {
	if s.created || s.vmFailed() {
		return
	}
	vm := s.vm
	s.id = vm.nextContextID
	vm.nextContextID++
	vm.streams[s.id] = s
	s.created = true
	if vm.fnContextCreate != nil {
		parent := uint64(0)
		if r := vm.rootOf[s.f]; r != nil {
			parent = uint64(r.id)
		}
		vm.call(s.ctx, s.id, vm.fnContextCreate, uint64(s.id), parent)
	}
}

// invoke calls a stream callback. present is false when the guest does not
// export it (Continue); a trap is seen afterwards through checkFail.
func (s *stream) invoke(fn api.Function, args ...uint64) (result uint64, stop bool, present bool) {
	if fn == nil {
		return 0, false, false
	}
	res, ok := s.vm.callStream(s, fn, args...)
	if !ok {
		return 0, false, true
	}
	return res.value, res.stop, true
}

type streamResult struct {
	value uint64
	stop  bool
}

// callStream is vm.call for a stream callback, also reporting whether the
// guest asked for a local reply during it (stopNextIteration).
func (vm *vmInstance) callStream(s *stream, fn api.Function, args ...uint64) (streamResult, bool) {
	if vm.failed.Load() || vm.closed {
		return streamResult{}, false
	}
	v, st, ok := vm.invoke(s.ctx, s.id, fn, args...)
	if !ok {
		return streamResult{}, false
	}
	return streamResult{value: v, stop: st.stopIteration}, true
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// headersStatus maps a headers callback result as
// convertVmCallResultToFilterHeadersStatus does for ABI 0.2.x: Continue (0)
// and ContinueAndEndStream (2) continue; PAUSE (1, StopIteration) stops
// all iteration unless the plugin sets allow_on_headers_stop_iteration,
// which keeps it StopIteration (docs/local-runtime.md); anything else stops all; a
// local reply stops too.
func headersStatus(v uint64, stop, allowStopIteration bool) httpfilter.HeadersStatus {
	switch {
	case stop:
		return httpfilter.HeadersStopAll
	case uint32(v) == 0 || uint32(v) == 2:
		return httpfilter.HeadersContinue
	case uint32(v) == 1 && allowStopIteration:
		return httpfilter.HeadersStopIteration
	}
	return httpfilter.HeadersStopAll
}

// dataStatus: 0 Continue, 1 StopIterationAndBuffer, 2 StopIterationAndWatermark
// (buffered here too), anything else or a local reply StopIterationNoBuffer.
func dataStatus(v uint64, stop bool) httpfilter.DataStatus {
	switch {
	case stop || uint32(v) > 2:
		return httpfilter.DataStopNoBuffer
	case uint32(v) == 0:
		return httpfilter.DataContinue
	default:
		return httpfilter.DataStopAndBuffer
	}
}

func trailersStatus(v uint64, stop bool) httpfilter.TrailersStatus {
	if stop || uint32(v) != 0 {
		return httpfilter.TrailersStop
	}
	return httpfilter.TrailersContinue
}

// DecodeHeaders is proxy_on_request_headers(ctx, num_headers, end_of_stream).
func (s *stream) DecodeHeaders(h *httpfilter.Headers, endStream bool) httpfilter.HeadersStatus {
	s.lock()
	defer s.unlock()
	if s.completed {
		return httpfilter.HeadersContinue
	}
	if st, failed := s.headersFailStatus(); failed {
		return st
	}
	s.create()
	return s.headersCallback(s.vm.fnReqHeaders, &s.reqHeaders, h, endStream)
}

// headersFailStatus maps a failed stream to its headers result: pass
// through when fail_open, else stop (the 503 is on its way).
func (s *stream) headersFailStatus() (httpfilter.HeadersStatus, bool) {
	failed, open := s.checkFail()
	switch {
	case !failed:
		return httpfilter.HeadersContinue, false
	case open:
		return httpfilter.HeadersContinue, true
	}
	return httpfilter.HeadersStopAll, true
}

// headersCallback runs a request or response headers callback. The map in
// *slot stays reachable to hostcalls only while iteration is stopped on it,
// as in Envoy.
func (s *stream) headersCallback(fn api.Function, slot **httpfilter.Headers, h *httpfilter.Headers, endStream bool) httpfilter.HeadersStatus {
	*slot = h
	v, stop, present := s.invoke(fn, uint64(s.id), uint64(len(*h)), b2u(endStream))
	if st, failed := s.headersFailStatus(); failed {
		return st
	}
	if !present {
		*slot = nil
		return httpfilter.HeadersContinue
	}
	st := headersStatus(v, stop, s.f.cfg.AllowOnHeadersStopIteration)
	if st == httpfilter.HeadersContinue {
		*slot = nil
	}
	return st
}

// DecodeData is proxy_on_request_body; body_size is the whole buffered body.
func (s *stream) DecodeData(body *httpfilter.Buffer, endStream bool) httpfilter.DataStatus {
	return s.data(body, endStream, false)
}

// EncodeData is proxy_on_response_body.
func (s *stream) EncodeData(body *httpfilter.Buffer, endStream bool) httpfilter.DataStatus {
	return s.data(body, endStream, true)
}

func (s *stream) data(body *httpfilter.Buffer, endStream, response bool) httpfilter.DataStatus {
	s.lock()
	defer s.unlock()
	if s.completed || !s.created || (response && s.failedReplySent) {
		return httpfilter.DataContinue
	}
	if failed, open := s.checkFail(); failed {
		if open {
			return httpfilter.DataContinue
		}
		return httpfilter.DataStopNoBuffer
	}
	fn := s.vm.fnReqBody
	bodyPtr, buffering := &s.reqBody, &s.bufferingReq
	if response {
		fn = s.vm.fnRespBody
		bodyPtr, buffering = &s.respBody, &s.bufferingResp
	}
	*bodyPtr = body
	v, stop, present := s.invoke(fn, uint64(s.id), uint64(len(body.Bytes)), b2u(endStream))
	*buffering = false
	if failed, open := s.checkFail(); failed {
		if open {
			return httpfilter.DataContinue
		}
		return httpfilter.DataStopNoBuffer
	}
	if !present {
		*bodyPtr = nil
		return httpfilter.DataContinue
	}
	st := dataStatus(v, stop)
	switch st {
	case httpfilter.DataContinue:
		*bodyPtr = nil
	case httpfilter.DataStopAndBuffer:
		*buffering = true
	}
	return st
}

// DecodeTrailers is proxy_on_request_trailers.
func (s *stream) DecodeTrailers(t *httpfilter.Headers) httpfilter.TrailersStatus {
	return s.trailers(t, false)
}

// EncodeTrailers is proxy_on_response_trailers.
func (s *stream) EncodeTrailers(t *httpfilter.Headers) httpfilter.TrailersStatus {
	return s.trailers(t, true)
}

func (s *stream) trailers(t *httpfilter.Headers, response bool) httpfilter.TrailersStatus {
	s.lock()
	defer s.unlock()
	if s.completed || !s.created || (response && s.failedReplySent) {
		return httpfilter.TrailersContinue
	}
	if failed, open := s.checkFail(); failed {
		if open {
			return httpfilter.TrailersContinue
		}
		return httpfilter.TrailersStop
	}
	fn, ptr := s.vm.fnReqTrailers, &s.reqTrailers
	if response {
		fn, ptr = s.vm.fnRespTrailers, &s.respTrailers
	}
	*ptr = t
	v, stop, present := s.invoke(fn, uint64(s.id), uint64(len(*t)))
	if failed, open := s.checkFail(); failed {
		if open {
			return httpfilter.TrailersContinue
		}
		return httpfilter.TrailersStop
	}
	if !present {
		*ptr = nil
		return httpfilter.TrailersContinue
	}
	st := trailersStatus(v, stop)
	if st == httpfilter.TrailersContinue {
		*ptr = nil
	}
	return st
}

// EncodeHeaders is proxy_on_response_headers. After the stream failed and
// its 503 went out, the VM is not called again (Envoy encodeHeaders).
func (s *stream) EncodeHeaders(h *httpfilter.Headers, endStream bool) httpfilter.HeadersStatus {
	s.lock()
	defer s.unlock()
	if s.completed || !s.created || s.failedReplySent {
		return httpfilter.HeadersContinue
	}
	if st, failed := s.headersFailStatus(); failed {
		return st
	}
	return s.headersCallback(s.vm.fnRespHeaders, &s.respHeaders, h, endStream)
}

// OnStreamComplete runs proxy_on_log (the access-log phase: request and
// response headers readable), proxy_on_done and proxy_on_delete, then
// forgets the context. A context never created (no request headers seen)
// is created first, as Envoy's access log does.
func (s *stream) OnStreamComplete() {
	s.lock()
	defer s.unlock()
	if s.completed {
		return
	}
	s.completed = true
	if s.vmFailed() {
		s.forget()
		return
	}
	s.create()
	vm := s.vm
	if vm.fnLog != nil {
		s.accessLogPhase = true
		vm.callStream(s, vm.fnLog, uint64(s.id))
		s.accessLogPhase = false
	}
	if vm.fnDone != nil {
		vm.callStream(s, vm.fnDone, uint64(s.id))
	}
	if vm.fnDelete != nil {
		vm.callStream(s, vm.fnDelete, uint64(s.id))
	}
	s.forget()
	// Signals queued by the final callbacks are no-ops on a finished stream.
	vm.after = nil
}

func (s *stream) forget() {
	if s.vm != nil && s.created {
		delete(s.vm.streams, s.id)
	}
	if s.vm != nil && !s.unbound {
		s.unbound = true
		if s.vm.bound.Add(-1) == 0 && s.vm.retired {
			go s.vm.shutdownIfIdle() // it takes the lock held here
		}
	}
	s.reqHeaders, s.reqTrailers, s.respHeaders, s.respTrailers = nil, nil, nil, nil
	s.reqBody, s.respBody = nil, nil
}
