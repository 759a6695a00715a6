package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
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
	declaredTrailers []string       // request trailer names announced by the client

	// Router state.
	route        *config.Route
	routeMatched bool
	routerGotHdr bool // router received request headers
	upStarted    bool
	upEnd        bool         // request end reached the router
	upQueue      *bodyQueue   // request body toward the upstream
	upTrailers   http.Header  // request trailers toward the upstream
	upEvents     chan upEvent // upstream response events; nil when none/ignored
	upCancel     context.CancelFunc
	upStart      time.Time
	upGotHeaders bool
	routeTimer   *time.Timer
	routeTimeout <-chan time.Time
	idleTimer    *time.Timer

	downstreamStarted bool // response headers written to the client
	done              bool
	reset             bool
}

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

type bodyEvent struct {
	data     []byte
	end      bool
	trailers http.Header
	err      error
}

type upEventKind int

const (
	upHeaders upEventKind = iota
	upData
	upEnd
	upFailed
)

type upEvent struct {
	kind     upEventKind
	resp     *http.Response
	data     []byte
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

	if !end {
		for k := range s.r.Trailer { // read before the body reader may fill it
			s.declaredTrailers = append(s.declaredTrailers, k)
		}
		s.reqBody = make(chan bodyEvent)
		go s.readRequestBody()
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
			s.l.clusters.byName[s.route.Cluster].rqTimeout.Add(1)
			s.localReply(504, []byte("upstream request timeout"), nil, "upstream_response_timeout")
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
// pseudo-headers first, then the rest (sorted: Go does not keep wire
// order), plus x-forwarded-proto and x-request-id when missing.
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
	h = appendHeaderMap(h, r.Header)
	h.Del("expect") // Envoy answers 100-continue itself
	h.Del("host")
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

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// readRequestBody feeds client body chunks to the stream goroutine. The
// channel is unbuffered, so the loop's gating is the flow control.
func (s *stream) readRequestBody() {
	send := func(ev bodyEvent) bool {
		select {
		case s.reqBody <- ev:
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	for {
		buf := make([]byte, 32<<10)
		n, err := s.r.Body.Read(buf)
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

// --- signals -------------------------------------------------------------

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

// --- router (decoder terminal) --------------------------------------------

type routerTerminal struct{ s *stream }

func (t routerTerminal) headers(end bool) { t.s.routerHeaders(end) }
func (t routerTerminal) data(b []byte, end bool) {
	s := t.s
	if s.upQueue != nil {
		s.upQueue.write(b)
	}
	if end {
		s.routerEnd()
	}
}
func (t routerTerminal) trailers() {
	s := t.s
	if s.reqTrailers != nil {
		s.upTrailers = http.Header{}
		for _, e := range *s.reqTrailers {
			s.upTrailers.Add(e.Key, e.Value)
		}
		if s.upQueue != nil {
			s.upQueue.setTrailers(s.upTrailers)
		}
	}
	s.routerEnd()
}

// matchRoute (re)selects the route from the current request headers.
func (s *stream) matchRoute() {
	s.route = s.l.cfg.MatchRoute(*s.reqHeaders)
	s.routeMatched = true
	s.info.RouteName = ""
	if s.route != nil {
		s.info.RouteName = s.route.Name
	}
}

func (s *stream) routerHeaders(end bool) {
	s.mu.Lock()
	dirty := s.routeDirty
	s.routeDirty = false
	s.mu.Unlock()
	if dirty || !s.routeMatched {
		s.matchRoute()
	}
	s.routerGotHdr = true
	switch {
	case s.route == nil:
		s.queueLocalReply(404, nil, nil, "route_not_found")
	case s.route.Direct != nil:
		s.queueLocalReply(s.route.Direct.Status, s.route.Direct.Body, nil, "direct_response")
	default:
		s.info.ClusterName = s.route.Cluster
		s.upQueue = newBodyQueue(s.limit, func() {
			select {
			case s.wake <- struct{}{}:
			default:
			}
		})
		if end {
			s.routerEnd()
		}
	}
}

// routerEnd is the whole request having reached the router: the route
// timeout starts now, as in Envoy.
func (s *stream) routerEnd() {
	if s.upEnd || s.upQueue == nil {
		return
	}
	s.upEnd = true
	s.upQueue.close()
	if t := s.route.Timeout; t > 0 {
		s.routeTimer = time.NewTimer(t)
		s.routeTimeout = s.routeTimer.C
	}
}

// startUpstream sends the request once the router has its headers. It runs
// after each event so a body that is already complete goes out with a
// content-length instead of chunked.
func (s *stream) startUpstream() {
	if !s.routerGotHdr || s.upStarted || s.upQueue == nil || s.dec.dead {
		return
	}
	s.upStarted = true
	cl := s.l.clusters.byName[s.route.Cluster]
	ctx, cancel := context.WithCancel(s.ctx)
	s.upCancel = cancel
	var body io.Reader = s.upQueue
	length := int64(-1)
	if s.upEnd && s.upTrailers == nil {
		b := s.upQueue.drain()
		body, length = bytes.NewReader(b), int64(len(b))
	}
	ep := cl.pick()
	// Host rewrites happen in the router, after the decoder filters, on the
	// stream's own headers (later readers such as on_log see them).
	if s.route.HostRewrite != "" {
		setAuthority(s.reqHeaders, s.route.HostRewrite)
	} else if s.route.AutoHostRewrite && ep.hostname != "" {
		setAuthority(s.reqHeaders, ep.hostname)
	}
	req, err := cl.newUpstreamRequest(ctx, ep, *s.reqHeaders, body, length)
	if err != nil {
		s.localReply(503, []byte("upstream connect error or disconnect/reset before headers. reset reason: "+err.Error()), nil, "upstream_reset_before_response_started{invalid_request}")
		return
	}
	if length < 0 {
		req.Trailer = http.Header{}
		for _, k := range s.declaredTrailers {
			req.Trailer[k] = nil
		}
		s.upQueue.trailerDst = req.Trailer
		if s.upTrailers != nil {
			s.upQueue.setTrailers(s.upTrailers)
		}
	}
	cl.rq.Add(1)
	s.upStart = time.Now()
	s.upEvents = make(chan upEvent)
	go runUpstream(ctx, cl, req, s.upEvents)
}

// setAuthority replaces :authority where it is, keeping pseudo-headers first.
func setAuthority(h *httpfilter.Headers, v string) {
	for i := range *h {
		if (*h)[i].Key == ":authority" {
			(*h)[i].Value = v
			return
		}
	}
	*h = append(httpfilter.Headers{{Key: ":authority", Value: v}}, *h...)
}

func runUpstream(ctx context.Context, cl *cluster, req *http.Request, out chan<- upEvent) {
	send := func(ev upEvent) bool {
		select {
		case out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	resp, err := cl.transport.RoundTrip(req)
	if err != nil {
		send(upEvent{kind: upFailed, err: err})
		return
	}
	defer resp.Body.Close()
	if !send(upEvent{kind: upHeaders, resp: resp}) {
		return
	}
	for {
		buf := make([]byte, 32<<10)
		n, err := resp.Body.Read(buf)
		if n > 0 && !send(upEvent{kind: upData, data: buf[:n]}) {
			return
		}
		if err == io.EOF {
			send(upEvent{kind: upEnd, trailers: resp.Trailer})
			return
		}
		if err != nil {
			send(upEvent{kind: upFailed, err: err})
			return
		}
	}
}

func (s *stream) stopUpstream() {
	if s.upCancel != nil {
		s.upCancel()
	}
	if s.upQueue != nil {
		s.upQueue.abort(context.Canceled)
	}
	s.upEvents = nil
	s.routeTimeout = nil
	if s.routeTimer != nil {
		s.routeTimer.Stop()
	}
}

func (s *stream) onUpstream(ev upEvent) {
	switch ev.kind {
	case upFailed:
		if s.upGotHeaders {
			s.stopUpstream()
			s.doReset("upstream_reset_after_response_started")
			return
		}
		reason, details := "connection termination", "connection_termination"
		var ce *connectError
		if errors.As(ev.err, &ce) {
			reason = ce.resetReason()
			details = strings.ReplaceAll(reason, " ", "_")
			if ce.transport != "" {
				reason += ", transport failure reason: " + ce.transport
				details += "," + strings.ReplaceAll(ce.transport, " ", "_")
			}
		}
		s.localReply(503, []byte("upstream connect error or disconnect/reset before headers. reset reason: "+reason),
			nil, "upstream_reset_before_response_started{"+details+"}")
	case upHeaders:
		s.upGotHeaders = true
		h := responseHeaders(ev.resp)
		h = append(h, httpfilter.Header{Key: "x-envoy-upstream-service-time", Value: strconv.FormatInt(time.Since(s.upStart).Milliseconds(), 10)})
		s.respHeaders = &h
		s.info.ResponseDetails = "via_upstream"
		end := ev.resp.ContentLength == 0 && s.r.Method != http.MethodHead || s.r.Method == http.MethodHead
		if end {
			s.upstreamDone()
		}
		s.enc.pushHeaders(0, end)
	case upData:
		s.enc.pushData(0, ev.data, false)
	case upEnd:
		s.upstreamDone()
		var trailers httpfilter.Headers
		for k, vs := range ev.trailers {
			for _, v := range vs {
				trailers = append(trailers, httpfilter.Header{Key: strings.ToLower(k), Value: v})
			}
		}
		if len(trailers) > 0 {
			s.respTrailers = &trailers
			s.enc.pushTrailers(0)
			return
		}
		s.enc.pushData(0, nil, true)
	}
}

// upstreamDone: the upstream response is complete; the route timeout no
// longer applies.
func (s *stream) upstreamDone() {
	s.upEvents = nil
	s.routeTimeout = nil
	if s.routeTimer != nil {
		s.routeTimer.Stop()
	}
}

// --- downstream writer (encoder terminal) --------------------------------

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
	s.w.WriteHeader(status)
	s.downstreamStarted = true
	s.info.ResponseCode = status
	s.l.countResponse(status)
	if end {
		s.done = true
		return
	}
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

// --- callbacks -------------------------------------------------------------

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

// --- request body queue ----------------------------------------------------

// bodyQueue carries request body bytes from the stream goroutine to the
// upstream transport without blocking the stream goroutine.
type bodyQueue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	buf        []byte
	closed     bool
	err        error
	limit      int
	onDrain    func()
	trailerDst http.Header
	trailers   http.Header
}

func newBodyQueue(limit int, onDrain func()) *bodyQueue {
	q := &bodyQueue{limit: limit, onDrain: onDrain}
	q.cond = sync.NewCond(&q.mu)
	return q
}

func (q *bodyQueue) write(b []byte) {
	q.mu.Lock()
	q.buf = append(q.buf, b...)
	q.mu.Unlock()
	q.cond.Broadcast()
}

func (q *bodyQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

func (q *bodyQueue) abort(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	q.cond.Broadcast()
}

// setTrailers records request trailers; the transport sends them after the
// body's EOF, so they are copied in before close.
func (q *bodyQueue) setTrailers(t http.Header) {
	q.mu.Lock()
	q.trailers = t
	q.mu.Unlock()
}

func (q *bodyQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

// drain takes everything queued (used when the body is complete before
// the request is sent).
func (q *bodyQueue) drain() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.buf
	q.buf = nil
	return b
}

func (q *bodyQueue) Read(p []byte) (int, error) {
	q.mu.Lock()
	for len(q.buf) == 0 && !q.closed && q.err == nil {
		q.cond.Wait()
	}
	if q.err != nil {
		q.mu.Unlock()
		return 0, q.err
	}
	if len(q.buf) == 0 {
		if q.trailerDst != nil {
			for k, v := range q.trailers {
				q.trailerDst[k] = v
			}
		}
		q.mu.Unlock()
		return 0, io.EOF
	}
	wasOver := len(q.buf) > q.limit
	n := copy(p, q.buf)
	q.buf = q.buf[n:]
	nowUnder := len(q.buf) <= q.limit
	q.mu.Unlock()
	if wasOver && nowUnder {
		q.onDrain()
	}
	return n, nil
}
