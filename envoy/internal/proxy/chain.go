package proxy

import (
	"slices"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// chain iterates one direction of the filter chain with Envoy's
// StreamFilter semantics (docs/local-runtime.md). Decoding runs the filters in config
// order and ends at the router; encoding runs them in reverse and ends at
// the downstream writer. Every method runs on the stream goroutine.
type chain struct {
	s       *stream
	encode  bool
	filters []httpfilter.Filter // in iteration order
	slots   []slotState         // parallel to filters
	pos     map[int]int         // filter config index → iteration position
	term    terminal
	// dead stops all further iteration (local reply took over, reset, or
	// the stream ended).
	dead bool
	// started: headers have entered this chain.
	started bool
}

// terminal is what receives frames after the last filter.
type terminal interface {
	headers(end bool)
	data(b []byte, end bool)
	trailers()
}

// slotState is one filter's iteration state in one direction.
type slotState struct {
	hdrEnd  bool // the headers it got carried end_stream
	hdrDone bool // headers were passed on beyond this filter
	stopAll bool // headers returned StopAll: input held, not delivered
	// stopSingle: headers returned StopIteration; body and trailers are
	// still delivered to this filter, the headers wait here.
	stopSingle  bool
	dataStopped bool   // data returned StopAndBuffer or StopNoBuffer
	buffering   bool   // ... and it was StopAndBuffer: body accumulates
	held        []byte // input held under stopAll, not yet delivered
	// body is the live Buffer last passed to a buffering filter. The filter
	// may still edit it (from an http_call callback) until it continues, so
	// it is this object's Bytes that get forwarded, never a copy.
	body            *httpfilter.Buffer
	inEnd           bool // end of stream has reached this filter's input
	trailersHeld    bool // trailers arrived but were not delivered (stopAll)
	trailersStopped bool // trailers were delivered and wait for Continue
}

func newChain(s *stream, encode bool, filters []httpfilter.Filter, term terminal) *chain {
	c := &chain{s: s, encode: encode, term: term, pos: map[int]int{}}
	n := len(filters)
	for i := range filters {
		idx := i
		if encode {
			idx = n - 1 - i
		}
		c.filters = append(c.filters, filters[idx])
		c.pos[idx] = i
	}
	c.slots = make([]slotState, n)
	return c
}

// halted reports whether iteration must stop now: the chain is dead or a
// filter asked for a local reply or reset, which Envoy acts on as soon as
// the filter call returns.
func (c *chain) halted() bool { return c.dead || c.s.urgent.Load() }

func (c *chain) callHeaders(i int, end bool) httpfilter.HeadersStatus {
	if c.encode {
		return c.filters[i].EncodeHeaders(c.s.respHeaders, end)
	}
	return c.filters[i].DecodeHeaders(c.s.reqHeaders, end)
}

func (c *chain) callData(i int, b *httpfilter.Buffer, end bool) httpfilter.DataStatus {
	if c.encode {
		return c.filters[i].EncodeData(b, end)
	}
	return c.filters[i].DecodeData(b, end)
}

func (c *chain) callTrailers(i int) httpfilter.TrailersStatus {
	if c.encode {
		return c.filters[i].EncodeTrailers(c.s.respTrailers)
	}
	return c.filters[i].DecodeTrailers(c.s.reqTrailers)
}

func (c *chain) pushHeaders(from int, end bool) {
	c.started = true
	for i := from; i < len(c.filters); i++ {
		if c.halted() {
			return
		}
		st := &c.slots[i]
		st.hdrEnd, st.inEnd = end, end
		status := c.callHeaders(i, end)
		if c.halted() {
			return
		}
		switch status {
		case httpfilter.HeadersStopAll:
			st.stopAll = true
			return
		case httpfilter.HeadersStopIteration:
			st.stopSingle = true
			return
		}
		st.hdrDone = true
	}
	c.term.headers(end)
}

func (c *chain) pushData(from int, chunk []byte, end bool) {
	for i := from; i < len(c.filters); i++ {
		if c.halted() {
			return
		}
		st := &c.slots[i]
		if end {
			st.inEnd = true
		}
		if !st.hdrDone && !st.stopSingle {
			// Stopped on headers: held, not delivered. Backpressure (not a
			// 413) applies to held data, as for Envoy's
			// StopAllIterationAndWatermark.
			st.held = append(st.held, chunk...)
			return
		}
		var b *httpfilter.Buffer
		if st.buffering {
			// Envoy checks the limit as data is added to a buffering
			// filter, before calling it again.
			if len(st.body.Bytes)+len(chunk) > c.s.limit {
				c.overLimit()
				return
			}
			b = st.body
			if need := len(b.Bytes) + len(chunk); need > cap(b.Bytes) {
				b.Bytes = slices.Grow(b.Bytes, c.bufferSize(need)-len(b.Bytes))
			}
			b.Bytes = append(b.Bytes, chunk...)
		} else {
			// Clipped so appends never write into a slice a reader owns.
			b = &httpfilter.Buffer{Bytes: chunk[:len(chunk):len(chunk)]}
		}
		status := c.callData(i, b, end)
		if c.halted() {
			return
		}
		switch status {
		case httpfilter.DataContinue:
			chunk = b.Bytes
			st.body, st.buffering, st.dataStopped = nil, false, false
			if st.stopSingle {
				// Continue from data after StopIteration from headers sends
				// the headers on first (Envoy's commonContinue).
				st.stopSingle, st.hdrDone = false, true
				c.pushHeaders(i+1, false)
				if c.halted() {
					return
				}
			}
		case httpfilter.DataStopAndBuffer:
			// b is not touched again until more data arrives or the filter
			// continues: a callback may still be editing it.
			st.dataStopped, st.buffering, st.body = true, true, b
			return
		default:
			st.dataStopped, st.buffering, st.body = true, false, nil
			return
		}
	}
	c.term.data(chunk, end)
}

func (c *chain) pushTrailers(from int) {
	for i := from; i < len(c.filters); i++ {
		if c.halted() {
			return
		}
		st := &c.slots[i]
		st.inEnd = true
		if !st.hdrDone && !st.stopSingle {
			st.trailersHeld = true
			return
		}
		status := c.callTrailers(i)
		if c.halted() {
			return
		}
		if status == httpfilter.TrailersStop {
			st.trailersStopped = true
			return
		}
		if st.stopSingle {
			// Continue from trailers after StopIteration from headers:
			// headers, then the buffered body, then the trailers.
			st.trailersStopped = true
			c.resume(c.configIndex(i))
			return
		}
		if st.dataStopped {
			// Continue from trailers releases the buffered body first.
			buf := st.takeBody()
			st.dataStopped = false
			if len(buf) > 0 {
				c.pushData(i+1, buf, false)
			}
			c.pushTrailers(i + 1)
			return
		}
	}
	c.term.trailers()
}

// bufferSize is the capacity to give a buffer that must hold need bytes:
// the whole request body when its length is known (and within the
// limit), so a buffered 1 MB body is allocated once rather than grown
// and copied a dozen times; else need.
func (c *chain) bufferSize(need int) int {
	if !c.encode && c.s.r != nil {
		if cl := c.s.r.ContentLength; cl > int64(need) && cl <= int64(c.s.limit) {
			return int(cl)
		}
	}
	return need
}

// takeBody ends buffering and returns the live buffer's current bytes.
func (st *slotState) takeBody() []byte {
	var b []byte
	if st.body != nil {
		b = st.body.Bytes
	}
	st.body, st.buffering = nil, false
	return b
}

// resume is Continue{De,En}coding from the filter at config index idx.
// A filter that is not stopped ignores it, as in Envoy.
func (c *chain) resume(idx int) {
	i, ok := c.pos[idx]
	if !ok || c.dead {
		return
	}
	st := &c.slots[i]
	switch {
	case st.stopAll:
		st.stopAll, st.hdrDone = false, true
		buf := st.held
		st.held = nil
		trailers := st.trailersHeld
		st.trailersHeld = false
		c.pushHeaders(i+1, st.hdrEnd)
		if st.hdrEnd || c.halted() {
			return
		}
		// Held body goes to the stopped filter itself first (Envoy
		// iterates from the current filter after StopAll).
		if len(buf) > 0 || st.inEnd && !trailers {
			c.pushData(i, buf, st.inEnd && !trailers)
		}
		if trailers && !c.halted() {
			c.pushTrailers(i)
		}
	case st.stopSingle:
		st.stopSingle, st.hdrDone = false, true
		buf := st.takeBody()
		st.dataStopped = false
		trailers := st.trailersStopped
		st.trailersStopped = false
		c.pushHeaders(i+1, st.hdrEnd)
		if st.hdrEnd || c.halted() {
			return
		}
		if len(buf) > 0 || st.inEnd && !trailers {
			c.pushData(i+1, buf, st.inEnd && !trailers)
		}
		if trailers && !c.halted() {
			c.pushTrailers(i + 1)
		}
	case st.dataStopped:
		buf := st.takeBody()
		st.dataStopped = false
		trailers := st.trailersStopped
		st.trailersStopped = false
		if len(buf) > 0 || st.inEnd && !trailers {
			c.pushData(i+1, buf, st.inEnd && !trailers)
		}
		if trailers && !c.halted() {
			c.pushTrailers(i + 1)
		}
	case st.trailersStopped:
		st.trailersStopped = false
		c.pushTrailers(i + 1)
	}
}

// configIndex maps an iteration position back to the filter's config index.
func (c *chain) configIndex(i int) int {
	if c.encode {
		return len(c.filters) - 1 - i
	}
	return i
}

// heldBytes is the body held at filters stopped on headers; above the
// buffer limit the stream stops reading this direction's source.
func (c *chain) heldBytes() int {
	n := 0
	for i := range c.slots {
		if c.slots[i].stopAll {
			n += len(c.slots[i].held)
		}
	}
	return n
}

// overLimit is a buffering filter exceeding the buffer limit: 413 for a
// request, 500 or a reset for a response (Envoy's rules).
func (c *chain) overLimit() {
	if c.encode {
		c.s.queueLocalReply(500, []byte("Internal Server Error"), nil, "response_payload_too_large")
	} else {
		c.s.queueLocalReply(413, []byte("Payload Too Large"), nil, "request_payload_too_large")
	}
}
