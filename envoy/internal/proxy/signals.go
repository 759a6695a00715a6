// Signals: what filter callbacks (any goroutine) ask of the stream
// goroutine, and the callbacks that raise them.

package proxy

import (
	"context"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

type signalKind int

const (
	sigContinueDecoding signalKind = iota
	sigContinueEncoding
	sigLocalReply
	sigReset
)

type signal struct {
	kind    signalKind
	filter  int
	status  int
	body    []byte
	headers httpfilter.Headers
	details string
}

func (s *stream) enqueue(sig signal) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.pending = append(s.pending, sig)
	if sig.kind == sigLocalReply || sig.kind == sigReset {
		s.urgent.Store(true)
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// queueLocalReply is a local reply raised by the runtime itself from
// inside chain iteration; it runs once the current step unwinds.
func (s *stream) queueLocalReply(status int, body []byte, h httpfilter.Headers, details string) {
	s.enqueue(signal{kind: sigLocalReply, status: status, body: body, headers: h, details: details})
}

func (s *stream) processSignals() {
	for !s.done {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.urgent.Store(false)
			s.mu.Unlock()
			return
		}
		sig := s.pending[0]
		s.pending = s.pending[1:]
		urgent := false
		for _, p := range s.pending {
			urgent = urgent || p.kind == sigLocalReply || p.kind == sigReset
		}
		s.urgent.Store(urgent)
		s.mu.Unlock()
		switch sig.kind {
		case sigContinueDecoding:
			s.dec.resume(sig.filter)
		case sigContinueEncoding:
			s.enc.resume(sig.filter)
		case sigLocalReply:
			s.localReply(sig.status, sig.body, sig.headers, sig.details)
		case sigReset:
			s.doReset("filter_reset")
		}
	}
}

func (s *stream) doReset(details string) {
	if s.info.ResponseDetails == "" || details != "filter_reset" {
		s.info.ResponseDetails = details
	}
	s.reset, s.done = true, true
}

// callbacks is one filter's handle on its stream (httpfilter.Callbacks).
type callbacks struct {
	s   *stream
	idx int
}

func (c *callbacks) ContinueDecoding() { c.s.enqueue(signal{kind: sigContinueDecoding, filter: c.idx}) }
func (c *callbacks) ContinueEncoding() { c.s.enqueue(signal{kind: sigContinueEncoding, filter: c.idx}) }
func (c *callbacks) SendLocalReply(status int, body []byte, headers httpfilter.Headers, details string) {
	c.s.enqueue(signal{kind: sigLocalReply, status: status, body: body, headers: headers, details: details})
}
func (c *callbacks) ResetStream() { c.s.enqueue(signal{kind: sigReset}) }
func (c *callbacks) ClearRouteCache() {
	c.s.mu.Lock()
	c.s.routeDirty = true
	c.s.mu.Unlock()
}
func (c *callbacks) RequestHeaders() *httpfilter.Headers   { return c.s.reqHeaders }
func (c *callbacks) RequestTrailers() *httpfilter.Headers  { return c.s.reqTrailers }
func (c *callbacks) ResponseHeaders() *httpfilter.Headers  { return c.s.respHeaders }
func (c *callbacks) ResponseTrailers() *httpfilter.Headers { return c.s.respTrailers }
func (c *callbacks) Info() *httpfilter.StreamInfo          { return &c.s.info }
func (c *callbacks) Context() context.Context              { return c.s.ctx }
