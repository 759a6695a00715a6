package wasmhost

import (
	"context"
	"errors"

	"github.com/tetratelabs/wazero/api"

	abi "github.com/chimehq/chime/internal/proxywasmabi"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/netfilter"
)

// Network (TCP) filter contexts, the counterpart of Envoy's wasm network
// filter (source/extensions/filters/network/wasm). A connection's context
// is a stream whose net field is set: it shares the context table, the
// effective-context rules, properties and the after-call actions with
// HTTP streams, and differs in the callbacks it receives.

// netState is what a network context holds besides the stream.
type netState struct {
	cb netfilter.Callbacks
	// down and up are the buffers the guest may touch through
	// DownstreamData / UpstreamData: set while the callback runs, kept
	// while iteration is stopped on them (Envoy keeps the pointer unless
	// the callback returned Continue).
	down, up *httpfilter.Buffer
	// downstreamClosed is Envoy's downstream_closed_; closed is
	// tcp_connection_closed_ (proxy_on_done/log/delete ran).
	downstreamClosed, closed bool
}

// netExports are a VM's network callbacks, looked up on first use.
type netExports struct {
	newConn, downData, upData, downClose, upClose api.Function
}

func (vm *vmInstance) netFns() *netExports {
	if vm.net == nil {
		get := vm.mod.ExportedFunction
		vm.net = &netExports{
			newConn:   get("proxy_on_new_connection"),
			downData:  get("proxy_on_downstream_data"),
			upData:    get("proxy_on_upstream_data"),
			downClose: get("proxy_on_downstream_connection_close"),
			upClose:   get("proxy_on_upstream_connection_close"),
		}
	}
	return vm.net
}

// netStream is the netfilter.Filter of one downstream connection.
type netStream struct{ s *stream }

// NewNetworkFilter binds a downstream connection to its worker's VM, as
// NewFilter does for an HTTP stream.
func (f *Factory) NewNetworkFilter(cb netfilter.Callbacks) (netfilter.Filter, error) {
	if f.closed.Load() {
		return nil, errors.New("wasm: filter factory is closed")
	}
	g := f.g
	worker := 0
	if info := cb.Info(); info != nil && info.Worker > 0 {
		worker = info.Worker % len(g.slots)
	}
	s := newStream(f, g.slots[worker].get(g, worker), netCallbacks{cb})
	s.net = &netState{cb: cb}
	return &netStream{s: s}, nil
}

// checkFail is CHECK_FAIL_NET: with the VM dead, a fail-open connection
// goes on without the filter; otherwise the connection is closed once
// (failStream: FlushWrite) and the caller stops.
func (n *netStream) checkFail() (failed, open bool) {
	s := n.s
	if !s.vmFailed() {
		return false, false
	}
	if s.f.cfg.FailOpen {
		return true, true
	}
	if !s.failedReplySent {
		s.failedReplySent = true
		cb := s.net.cb
		s.queue(func() { cb.Close(failStreamDetails) })
	}
	return true, false
}

func (n *netStream) failStatus() netfilter.Status {
	if _, open := n.checkFail(); open {
		return netfilter.Continue
	}
	return netfilter.StopIteration
}

// OnNewConnection is Envoy's onNewConnection: the context is created
// (proxy_on_context_create), then proxy_on_new_connection; 0 continues,
// anything else stops iteration.
func (n *netStream) OnNewConnection() netfilter.Status {
	s := n.s
	s.lock()
	defer s.unlock()
	if failed, _ := n.checkFail(); failed {
		return n.failStatus()
	}
	s.create()
	v, _, present := s.invoke(s.vm.netFns().newConn, uint64(s.id))
	if failed, _ := n.checkFail(); failed {
		return n.failStatus()
	}
	if !present || uint32(v) == 0 {
		return netfilter.Continue
	}
	return netfilter.StopIteration
}

// OnDownstreamData is onData: proxy_on_downstream_data(ctx, size, end).
func (n *netStream) OnDownstreamData(buf *httpfilter.Buffer, endStream bool) netfilter.Status {
	return n.data(buf, endStream, false)
}

// OnUpstreamData is onWrite: proxy_on_upstream_data(ctx, size, end). On
// the upstream's end of stream Envoy also reports
// proxy_on_upstream_connection_close(ctx, Unknown): it has no upstream
// connection event of its own.
func (n *netStream) OnUpstreamData(buf *httpfilter.Buffer, endStream bool) netfilter.Status {
	st := n.data(buf, endStream, true)
	if endStream {
		n.upstreamClosed()
	}
	return st
}

func (n *netStream) data(buf *httpfilter.Buffer, endStream, upstream bool) netfilter.Status {
	s := n.s
	s.lock()
	defer s.unlock()
	if s.completed || !s.created {
		return netfilter.Continue
	}
	if failed, _ := n.checkFail(); failed {
		return n.failStatus()
	}
	fns := s.vm.netFns()
	fn, slot := fns.downData, &s.net.down
	if upstream {
		fn, slot = fns.upData, &s.net.up
	}
	*slot = buf
	v, _, present := s.invoke(fn, uint64(s.id), uint64(len(buf.Bytes)), b2u(endStream))
	if failed, _ := n.checkFail(); failed {
		return n.failStatus()
	}
	if !present || uint32(v) == 0 {
		*slot = nil
		return netfilter.Continue
	}
	return netfilter.StopIteration
}

func (n *netStream) upstreamClosed() {
	s := n.s
	s.lock()
	defer s.unlock()
	if s.completed || !s.created || s.vmFailed() {
		return
	}
	if fn := s.vm.netFns().upClose; fn != nil {
		s.vm.callStream(s, fn, uint64(s.id), uint64(abi.PeerUnknown))
	}
	if s.net.downstreamClosed {
		n.closeTCP()
	}
}

// OnDownstreamClose is the connection event: proxy_on_downstream_connection_close
// with the peer, then (Envoy's onCloseTCP) proxy_on_done, proxy_on_log and
// proxy_on_delete.
func (n *netStream) OnDownstreamClose(peer netfilter.CloseType) {
	s := n.s
	s.lock()
	defer s.unlock()
	if s.completed {
		return
	}
	if !s.created || s.vmFailed() {
		s.completed = true
		s.forget()
		return
	}
	if fn := s.vm.netFns().downClose; fn != nil {
		s.vm.callStream(s, fn, uint64(s.id), uint64(peer))
	}
	s.net.downstreamClosed = true
	n.closeTCP()
}

// closeTCP is Envoy's onCloseTCP; call with the VM lock held.
func (n *netStream) closeTCP() {
	s := n.s
	if s.net.closed {
		return
	}
	s.net.closed = true
	s.completed = true
	vm := s.vm
	for _, fn := range []api.Function{vm.fnDone, vm.fnLog, vm.fnDelete} {
		if fn != nil && !vm.failed.Load() {
			vm.callStream(s, fn, uint64(s.id))
		}
	}
	s.net.down, s.net.up = nil, nil
	s.forget()
	// Signals queued by the final callbacks are no-ops on a closed connection.
	vm.after = nil
}

// netBuffer is the DownstreamData / UpstreamData buffer of the context the
// call acts for: live while its callback runs or iteration is stopped on
// it, otherwise empty (Envoy's null buffer).
func (vm *vmInstance) netBuffer(t abi.BufferType) *bufferRef {
	s := vm.effective()
	if s == nil || s.net == nil {
		return &bufferRef{}
	}
	if t == abi.BufferDownstreamData {
		return &bufferRef{live: s.net.down}
	}
	return &bufferRef{live: s.net.up}
}

// netContinue is proxy_continue_stream(Downstream): resume reading after
// the filter once the VM call returns.
func netContinue(s *stream) {
	if s != nil && s.net != nil && !s.completed {
		s.queue(s.net.cb.ContinueReading)
	}
}

// netClose is proxy_close_stream(Downstream / Upstream): both close the
// downstream connection after flushing, once the VM call returns, as
// Envoy's closeStream does through the read and write filter callbacks.
func netClose(s *stream, t abi.StreamType) {
	if s == nil || s.net == nil || s.completed {
		return
	}
	details := "wasm_downstream_close"
	if t == abi.StreamUpstream {
		details = "wasm_upstream_close"
	}
	cb := s.net.cb
	s.queue(func() { cb.Close(details) })
}

// netCallbacks presents a connection as httpfilter.Callbacks to the code
// shared with HTTP streams (properties, send_local_response): HTTP-only
// requests are no-ops, as they are in Envoy without decoder callbacks.
type netCallbacks struct{ cb netfilter.Callbacks }

func (c netCallbacks) ContinueDecoding()                                      {}
func (c netCallbacks) ContinueEncoding()                                      {}
func (c netCallbacks) SendLocalReply(int, []byte, httpfilter.Headers, string) {}
func (c netCallbacks) ResetStream()                                           {}
func (c netCallbacks) ClearRouteCache()                                       {}
func (c netCallbacks) RequestHeaders() *httpfilter.Headers                    { return nil }
func (c netCallbacks) RequestTrailers() *httpfilter.Headers                   { return nil }
func (c netCallbacks) ResponseHeaders() *httpfilter.Headers                   { return nil }
func (c netCallbacks) ResponseTrailers() *httpfilter.Headers                  { return nil }
func (c netCallbacks) Info() *httpfilter.StreamInfo                           { return c.cb.Info() }
func (c netCallbacks) Context() context.Context                               { return c.cb.Context() }
