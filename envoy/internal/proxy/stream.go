// The stream loop: one goroutine per request/response exchange owns every
// filter call and every write to the client (envoy/RATIONALE.md).

package proxy

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

var streamIDs atomic.Uint64

// stream is one HTTP request/response exchange: Envoy's ActiveStream. All
// filter calls and all writes to the client happen on the handler
// goroutine (run); other goroutines only send it events or signals.
type stream struct {
	l      *listener
	w      http.ResponseWriter
	r      *http.Request
	rc     *http.ResponseController
	ctx    context.Context // Callbacks.Context: cancelled when the stream ends
	cancel context.CancelFunc
	info   httpfilter.StreamInfo
	limit  int

	filters []httpfilter.Filter
	cbs     []*callbacks
	dec     *chain
	enc     *chain

	reqHeaders, reqTrailers, respHeaders, respTrailers *httpfilter.Headers

	// Signals from Callbacks (any goroutine).
	mu         sync.Mutex
	pending    []signal
	wake       chan struct{}
	closed     bool
	routeDirty bool
	urgent     atomic.Bool // a local reply or reset is pending

	reqBody          chan bodyEvent // client body chunks; nil when none or ignored
	reqComplete      bool           // the whole request arrived from the client
	bodyArrived      bool           // the whole body came with the headers (bodyInHand)
	declaredTrailers []string       // request trailer names announced by the client

	// Router state.
	route         *config.Route
	routeMatched  bool
	routerGotHdr  bool // router received request headers
	upStarted     bool
	upEnd         bool         // request end reached the router
	upQueue       *bodyQueue   // request body toward the upstream
	upTrailers    http.Header  // request trailers toward the upstream
	upEvents      chan upEvent // upstream response events; nil when none/ignored
	upCancel      context.CancelFunc
	upStart       time.Time
	upGotHeaders  bool
	timeout       time.Duration // the route's, or as the x-envoy timeout headers set it (routerTimeouts)
	perTryTimeout bool          // timeout is the per-try one
	routeTimer    *time.Timer
	routeTimeout  <-chan time.Time
	idleTimer     *time.Timer

	downstreamStarted bool // response headers written to the client
	headersUnflushed  bool // written but not yet flushed (flushHeaders)
	done              bool
	reset             bool
}

type bodyEvent struct {
	data     []byte
	end      bool
	trailers http.Header
	err      error
}

func newStream(l *listener, w http.ResponseWriter, r *http.Request) *stream {
	s := &stream{l: l, w: w, r: r, rc: http.NewResponseController(w), limit: l.cfg.BufferLimit, wake: make(chan struct{}, 1)}
	s.ctx, s.cancel = context.WithCancel(r.Context())
	worker, _ := r.Context().Value(workerKey{}).(int)
	connID, _ := r.Context().Value(connIDKey{}).(uint64)
	local := ""
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(interface{ String() string }); ok {
		local = a.String()
	}
	s.info = httpfilter.StreamInfo{
		ID:              streamIDs.Add(1),
		Worker:          worker,
		StartTime:       time.Now(),
		Protocol:        r.Proto,
		SourceAddress:   r.RemoteAddr,
		DestinationAddr: local,
		ListenerName:    l.cfg.Name,
		ConnectionID:    connID,
	}
	return s
}

// run drives the stream to completion.
func (s *stream) run() {
	defer s.finish()
	_ = s.rc.EnableFullDuplex() // read the request body while responding (SSE, early replies)

	h, end := s.requestHeaders()
	s.reqHeaders = &h
	s.matchRoute()

	for i, f := range s.l.factories {
		cb := &callbacks{s: s, idx: i}
		flt, err := f.NewFilter(cb)
		if err != nil {
			s.l.log.Error("creating http filter", "listener", s.l.cfg.Name, "filter", i, "err", err)
			s.writeDirect(500, []byte("Internal Server Error"), nil, "filter_creation_failed")
			return
		}
		s.filters = append(s.filters, flt)
		s.cbs = append(s.cbs, cb)
	}
	s.dec = newChain(s, false, s.filters, routerTerminal{s})
	s.enc = newChain(s, true, s.filters, downstreamTerminal{s})

	s.reqComplete = end
	if !end {
		for k := range s.r.Trailer { // read before the body reader may fill it
			s.declaredTrailers = append(s.declaredTrailers, k)
		}
		if s.bodyArrived {
			s.reqBody = make(chan bodyEvent, 1)
			s.reqBody <- s.bodyInHand()
		} else {
			s.reqBody = make(chan bodyEvent)
			go s.readRequestBody(s.reqBody)
		}
	}
	if t := s.l.cfg.StreamIdleTimeout; t > 0 {
		s.idleTimer = time.NewTimer(t)
	}
	s.dec.pushHeaders(0, end)
	s.loop()
}

func (s *stream) loop() {
	for {
		s.processSignals()
		if s.done {
			return
		}
		s.startUpstream()
		if s.done {
			return
		}
		s.flushHeaders()
		if s.done {
			return
		}
		var reqCh chan bodyEvent
		if s.reqBody != nil && s.dec.heldBytes() <= s.limit && (s.upQueue == nil || s.upQueue.len() <= s.limit) {
			reqCh = s.reqBody
		}
		var upCh chan upEvent
		if s.upEvents != nil && s.enc.heldBytes() <= s.limit {
			upCh = s.upEvents
		}
		var idle <-chan time.Time
		if s.idleTimer != nil {
			idle = s.idleTimer.C
		}
		select {
		case <-s.wake:
		case ev := <-reqCh:
			s.touch()
			s.onRequestBody(ev)
		case ev := <-upCh:
			s.touch()
			s.onUpstream(ev)
		case <-s.routeTimeout:
			s.routeTimeout = nil
			if cl := s.l.clusters.byName[s.route.Cluster]; s.perTryTimeout {
				cl.perTryTimeout.Add(1)
				s.localReply(504, []byte("upstream request timeout"), nil, "upstream_per_try_timeout")
			} else {
				cl.rqTimeout.Add(1)
				s.localReply(504, []byte("upstream request timeout"), nil, "upstream_response_timeout")
			}
		case <-idle:
			s.localReply(408, []byte("stream timeout"), nil, "stream_idle_timeout")
		case <-s.ctx.Done():
			// The client went away: cancel everything, write nothing.
			s.info.ResponseDetails = "downstream_remote_disconnect"
			s.done = true
		}
	}
}

// touch restarts the stream idle timer on activity.
func (s *stream) touch() {
	if s.idleTimer != nil {
		s.idleTimer.Reset(s.l.cfg.StreamIdleTimeout)
	}
}

// finish ends the stream: cancels its context and the upstream, then calls
// OnStreamComplete once per filter (proxy_on_log/on_done/on_delete).
func (s *stream) finish() {
	s.mu.Lock()
	s.closed = true
	s.pending = nil
	s.mu.Unlock()
	s.cancel()
	if s.upCancel != nil {
		s.upCancel()
	}
	if s.upQueue != nil {
		s.upQueue.abort(context.Canceled)
	}
	if s.dec != nil {
		s.dec.dead, s.enc.dead = true, true
	}
	if s.routeTimer != nil {
		s.routeTimer.Stop()
	}
	if s.idleTimer != nil {
		s.idleTimer.Stop()
	}
	for _, f := range s.filters {
		f.OnStreamComplete()
	}
	s.l.rqActive.Add(-1)
	if s.reset {
		// Abort the connection: the client sees a reset or a truncated body.
		panic(http.ErrAbortHandler)
	}
}

// requestHeaders presents the client request the way Envoy does:
// pseudo-headers first, then the rest in the order received (HTTP/1, from
// the connection's wire bytes; HTTP/2 and anything not found there
// sorted), plus x-forwarded-proto and x-request-id when missing.
func (s *stream) requestHeaders() (httpfilter.Headers, bool) {
	r := s.r
	path := r.RequestURI
	if path == "" || !strings.HasPrefix(path, "/") && path != "*" {
		path = r.URL.RequestURI()
	}
	h := httpfilter.Headers{
		{Key: ":authority", Value: r.Host},
		{Key: ":path", Value: path},
		{Key: ":method", Value: r.Method},
		{Key: ":scheme", Value: "http"},
	}
	if names, after, ok := s.wireOrder(); ok {
		h = orderHeaders(h, r, names)
		s.bodyArrived = r.ContentLength > 0 && len(r.TransferEncoding) == 0 && r.ContentLength <= int64(after)
	} else {
		h = appendHeaderMap(h, r.Header)
		if teTrailers(r.Header["Te"]) {
			h = append(h, httpfilter.Header{Key: "te", Value: "trailers"})
		}
	}
	h.Del("expect") // Envoy answers 100-continue itself
	h.Del("host")
	// forward_client_cert_details is SANITIZE by default (and not taken
	// here): a client's x-forwarded-client-cert never passes.
	if _, ok := h.Get("x-forwarded-client-cert"); ok {
		h.Del("x-forwarded-client-cert")
	}
	cleanInternalHeaders(&h)
	if r.ContentLength > 0 {
		if _, ok := h.Get("content-length"); !ok {
			h = append(h, httpfilter.Header{Key: "content-length", Value: strconv.FormatInt(r.ContentLength, 10)})
		}
	}
	if _, ok := h.Get("x-forwarded-proto"); !ok {
		h = append(h, httpfilter.Header{Key: "x-forwarded-proto", Value: "http"})
	}
	if _, ok := h.Get("x-request-id"); !ok && s.l.cfg.GenerateRequestID {
		h = append(h, httpfilter.Header{Key: "x-request-id", Value: newUUID()})
	}
	end := r.ContentLength == 0 && len(r.TransferEncoding) == 0
	return h, end
}

// externalOnlyRemoved are the x-envoy request headers Envoy's connection
// manager removes from a request that is not internal
// (ConnectionManagerUtility::cleanInternalHeaders). No request is
// internal here: with use_remote_address off, Envoy ≥ 1.36 takes the
// client's address from x-forwarded-for and counts none as internal
// without an internal_address_config, which this runtime does not take.
var externalOnlyRemoved = [...]string{
	"x-envoy-retriable-status-codes", "x-envoy-retriable-header-names",
	"x-envoy-retry-on", "x-envoy-retry-grpc-on", "x-envoy-max-retries",
	"x-envoy-upstream-alt-stat-name", "x-envoy-upstream-rq-timeout-ms",
	"x-envoy-upstream-rq-per-try-timeout-ms", "x-envoy-upstream-rq-timeout-alt-response",
	"x-envoy-expected-rq-timeout-ms", "x-envoy-force-trace", "x-envoy-ip-tags",
	"x-envoy-original-url", "x-envoy-hedge-on-per-try-timeout",
}

// cleanInternalHeaders drops what a client may not tell Envoy: the
// x-envoy-internal marker always, the control headers of an external
// request (they would set the router's timeouts and retries).
func cleanInternalHeaders(h *httpfilter.Headers) {
	if !hasEnvoyHeader(*h) {
		return
	}
	h.Del("x-envoy-internal")
	for _, k := range externalOnlyRemoved {
		h.Del(k)
	}
}

func hasEnvoyHeader(h httpfilter.Headers) bool {
	for _, e := range h {
		if strings.HasPrefix(e.Key, "x-envoy-") {
			return true
		}
	}
	return false
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// readRequestBody feeds client body chunks to the stream goroutine. The
// channel is unbuffered, so the loop's gating is the flow control. It
// takes the channel as an argument: the loop sets s.reqBody to nil when it
// stops listening (localReply), and this goroutine must not read the field.
func (s *stream) readRequestBody(reqBody chan<- bodyEvent) {
	send := func(ev bodyEvent) bool {
		select {
		case reqBody <- ev:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	left := s.r.ContentLength // -1 when unknown
	for {
		buf := make([]byte, readSize(left))
		n, err := s.r.Body.Read(buf)
		left -= int64(n)
		if err == io.EOF {
			send(bodyEvent{data: buf[:n], end: true, trailers: s.r.Trailer})
			return
		}
		if err != nil {
			send(bodyEvent{err: err})
			return
		}
		if n > 0 && !send(bodyEvent{data: buf[:n]}) {
			return
		}
	}
}

// bodyInHand reads a body that came in the same reads as its headers: the
// bytes wait in net/http's buffer, so reading them here does not block, and
// the loop hands them to the filters right after the headers, as Envoy's
// codec dispatches headers and data parsed from one read. A goroutine and
// a 32 KiB buffer per request are saved.
func (s *stream) bodyInHand() bodyEvent {
	buf := make([]byte, s.r.ContentLength)
	if _, err := io.ReadFull(s.r.Body, buf); err != nil {
		return bodyEvent{err: err}
	}
	return bodyEvent{data: buf, end: true}
}

func (s *stream) onRequestBody(ev bodyEvent) {
	if ev.err != nil {
		// Downstream reset mid-request.
		s.info.ResponseDetails = "downstream_remote_disconnect"
		s.done = true
		return
	}
	s.info.RequestSize += int64(len(ev.data))
	if ev.end {
		s.reqBody = nil
		s.reqComplete = true
	}
	var trailers httpfilter.Headers
	for k, vs := range ev.trailers {
		for _, v := range vs {
			if v != "" {
				trailers = append(trailers, httpfilter.Header{Key: strings.ToLower(k), Value: v})
			}
		}
	}
	if len(trailers) > 0 {
		s.reqTrailers = &trailers
		if len(ev.data) > 0 {
			s.dec.pushData(0, ev.data, false)
		}
		s.dec.pushTrailers(0)
		return
	}
	s.dec.pushData(0, ev.data, ev.end)
}

// wireOrder is the request's header names in wire order (HTTP/1 only),
// and how many bytes past them the connection had already read.
func (s *stream) wireOrder() ([]string, int, bool) {
	wc, _ := s.r.Context().Value(wireConnKey{}).(*wireConn)
	if wc == nil || s.r.ProtoMajor != 1 {
		return nil, 0, false
	}
	return wc.wireOrder(s.r)
}
