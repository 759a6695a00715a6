// The downstream writer: the encoder chain's terminal and local replies.

package proxy

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// localReply answers the client from the proxy, with Envoy's three cases:
// before the response has started it runs through the encoder filters;
// once the encoders have the upstream headers but nothing reached the
// client it goes straight to the client; after that only a reset is left.
func (s *stream) localReply(status int, body []byte, extra httpfilter.Headers, details string) {
	if s.done {
		return
	}
	if s.downstreamStarted {
		s.doReset(details)
		return
	}
	s.stopUpstream()
	s.dec.dead = true
	s.reqBody = nil
	if s.enc.started {
		s.enc.dead = true
		s.writeDirect(status, body, extra, details)
		return
	}
	s.info.ResponseDetails = details
	h := localReplyHeaders(status, body, extra)
	s.respHeaders = &h
	s.enc.pushHeaders(0, len(body) == 0)
	if len(body) > 0 {
		s.enc.pushData(0, body, true)
	}
}

func localReplyHeaders(status int, body []byte, extra httpfilter.Headers) httpfilter.Headers {
	h := httpfilter.Headers{{Key: ":status", Value: strconv.Itoa(status)}}
	h = append(h, httpfilter.Header{Key: "content-length", Value: strconv.Itoa(len(body))})
	if len(body) > 0 {
		if _, ok := extra.Get("content-type"); !ok {
			h = append(h, httpfilter.Header{Key: "content-type", Value: "text/plain"})
		}
	}
	for _, e := range extra {
		if e.Key == ":status" || e.Key == "content-length" {
			continue
		}
		h = append(h, httpfilter.Header{Key: strings.ToLower(e.Key), Value: e.Value})
	}
	return h
}

// writeDirect sends a reply to the client bypassing the filters.
func (s *stream) writeDirect(status int, body []byte, extra httpfilter.Headers, details string) {
	s.info.ResponseDetails = details
	h := localReplyHeaders(status, body, extra)
	s.respHeaders = &h
	s.writeHeaders(len(body) == 0)
	if len(body) > 0 && !s.done {
		s.writeData(body, true)
	}
}

type downstreamTerminal struct{ s *stream }

func (t downstreamTerminal) headers(end bool)        { t.s.writeHeaders(end) }
func (t downstreamTerminal) data(b []byte, end bool) { t.s.writeData(b, end) }
func (t downstreamTerminal) trailers()               { t.s.writeTrailers() }

func (s *stream) writeHeaders(end bool) {
	h := *s.respHeaders
	status, err := strconv.Atoi(firstValue(h, ":status"))
	if err != nil || status < 100 || status > 999 {
		status = 502
	}
	wh := s.w.Header()
	for k := range wh {
		delete(wh, k)
	}
	for _, e := range h {
		if strings.HasPrefix(e.Key, ":") || hopByHop[e.Key] {
			continue
		}
		k := http.CanonicalHeaderKey(e.Key)
		wh[k] = append(wh[k], e.Value)
	}
	if _, ok := wh["Content-Type"]; !ok {
		wh["Content-Type"] = nil // forward as is: no content sniffing
	}
	wh["Server"] = []string{s.l.cfg.ServerName}
	if !s.reqComplete {
		// A response before the whole request arrived: HTTP/1.1 cannot
		// reuse the connection, so Envoy sends "connection: close" and
		// closes it rather than read the rest of the body as a request.
		s.l.rqBeforeComplete.Add(1)
		if s.r.ProtoMajor < 2 {
			wh["Connection"] = []string{"close"}
		}
	}
	if wc, _ := s.r.Context().Value(wireConnKey{}).(*wireConn); wc != nil && s.r.ProtoMajor == 1 {
		wc.lowerNext() // Envoy's HTTP/1 codec writes lowercase names
	}
	s.w.WriteHeader(status)
	s.downstreamStarted = true
	s.info.ResponseCode = status
	s.l.countResponse(status)
	if end {
		s.done = true
		return
	}
	// Sent when the stream next waits (flushHeaders), with whatever this
	// event writes after them: a body a filter held goes in the same
	// write, as Envoy's codec writes what a dispatch produced at its end.
	s.headersUnflushed = true
}

// flushHeaders sends headers that are still buffered, before the stream
// waits for its next event.
func (s *stream) flushHeaders() {
	if !s.headersUnflushed {
		return
	}
	s.headersUnflushed = false
	if err := s.rc.Flush(); err != nil {
		s.downstreamGone()
	}
}

func (s *stream) writeData(b []byte, end bool) {
	if len(b) > 0 {
		n, err := s.w.Write(b)
		s.info.ResponseSize += int64(n)
		if err != nil {
			s.downstreamGone()
			return
		}
		if !end {
			s.headersUnflushed = false // flushed with the data
			if err := s.rc.Flush(); err != nil {
				s.downstreamGone()
				return
			}
		}
	}
	if end {
		s.done = true
	}
}

func (s *stream) writeTrailers() {
	if s.respTrailers != nil {
		for _, e := range *s.respTrailers {
			s.w.Header().Add(http.TrailerPrefix+e.Key, e.Value)
		}
	}
	s.done = true
}

func (s *stream) downstreamGone() {
	s.info.ResponseDetails = "downstream_remote_disconnect"
	s.done = true
}

func firstValue(h httpfilter.Headers, k string) string {
	v, _ := h.Get(k)
	return v
}
