// The router: the decoder chain's terminal, which picks the route and
// sends the request upstream, and the upstream response events.

package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

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
	s.info.RouteName, s.info.RouteMatched, s.info.RouteMetadata = "", false, nil
	if s.route != nil {
		s.info.RouteName, s.info.RouteMatched, s.info.RouteMetadata = s.route.Name, true, s.route.Metadata
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
		s.timeout, s.perTryTimeout = routerTimeouts(s.reqHeaders, s.route.Timeout)
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
	if t := s.timeout; t > 0 {
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
	if len(s.reqBody) > 0 {
		// The body came in the same read as the headers and waits to be
		// dispatched: Envoy's codec encodes both before its connection
		// writes, so they go upstream together.
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
	} else if n, ok := declaredLength(*s.reqHeaders); ok && len(s.declaredTrailers) == 0 {
		// A streamed body keeps the content-length the router sees, as
		// Envoy's HTTP/1 encoder writes it: chunked only without one.
		length = n
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

// routerTimeouts is what Envoy's router does with the x-envoy timeout
// headers (FilterUtility::finalTimeout, without retries): a filter may set
// the timeout with x-envoy-upstream-rq-timeout-ms and a shorter one with
// x-envoy-upstream-rq-per-try-timeout-ms (both are read and removed; a
// client's never get here, cleanInternalHeaders); the upstream is told the
// result in x-envoy-expected-rq-timeout-ms, unless there is none. The
// router's suppress_envoy_headers is not supported, so it is always sent.
func routerTimeouts(h *httpfilter.Headers, route time.Duration) (time.Duration, bool) {
	global, perTry := route, time.Duration(0)
	if hasEnvoyHeader(*h) {
		global = takeTimeout(h, "x-envoy-upstream-rq-timeout-ms", global)
		perTry = takeTimeout(h, "x-envoy-upstream-rq-per-try-timeout-ms", 0)
		h.Del("x-envoy-upstream-alt-stat-name")
		h.Del("x-envoy-hedge-on-per-try-timeout")
	}
	if perTry >= global && global != 0 {
		perTry = 0
	}
	expected := perTry
	if expected == 0 {
		expected = global
	}
	if expected > 0 {
		h.Set("x-envoy-expected-rq-timeout-ms", strconv.FormatInt(expected.Milliseconds(), 10))
	}
	// One attempt: the per-try timeout, when shorter, ends it first.
	return expected, perTry > 0
}

// takeTimeout removes header k and returns its milliseconds, or def when
// it is absent or not a number.
func takeTimeout(h *httpfilter.Headers, k string, def time.Duration) time.Duration {
	v, ok := h.Get(k)
	if !ok {
		return def
	}
	h.Del(k)
	ms, err := strconv.ParseUint(v, 10, 32)
	if err != nil {
		return def
	}
	return time.Duration(ms) * time.Millisecond
}

// declaredLength is the request's content-length header, when it is one
// decimal number.
func declaredLength(h httpfilter.Headers) (int64, bool) {
	v, ok := h.Get("content-length")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || v[0] == '+' {
		return 0, false
	}
	return n, true
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
	left := resp.ContentLength // -1 when unknown
	for {
		buf := make([]byte, readSize(left))
		n, err := resp.Body.Read(buf)
		left -= int64(n)
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

// readSize is the buffer for the next read of a body with left bytes to
// come (negative when unknown): 32 KiB, or what is left when less, so a
// small body does not allocate and clear 32 KiB. net/http returns io.EOF
// with a sized body's last bytes, so one read takes a small body whole.
func readSize(left int64) int {
	if left > 0 && left < 32<<10 {
		return int(left)
	}
	return 32 << 10
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
		body, details := resetBeforeHeaders(ev.err)
		s.localReply(503, []byte(body), nil, "upstream_reset_before_response_started{"+details+"}")
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

// resetBeforeHeaders is Envoy's router local-reply body for an upstream
// that failed before response headers (a connect failure or a reset), and
// its response-details reason.
func resetBeforeHeaders(err error) (body, details string) {
	reason, details := "connection termination", "connection_termination"
	var ce *connectError
	if errors.As(err, &ce) {
		reason = ce.resetReason()
		details = strings.ReplaceAll(reason, " ", "_")
		if ce.transport != "" {
			reason += ", transport failure reason: " + ce.transport
			details += "," + strings.ReplaceAll(ce.transport, " ", "_")
		}
	}
	return "upstream connect error or disconnect/reset before headers. reset reason: " + reason, details
}
