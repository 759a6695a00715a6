package filter

import (
	"strconv"
	"strings"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// httpContext is one stream. Only POSTs on an LLM protocol path are
// handled; everything else continues at once.
//
// Request headers are readable only while their callback runs (or the
// stream is paused there), so everything the later phases need is copied
// here when they arrive.
type httpContext struct {
	proxywasm.DefaultHttpContext
	plugin *pluginContext

	handled  bool // an LLM protocol request that is not a followup
	bodyDone bool // the whole body arrived and was dealt with
	awaiting bool // counted in plugin.awaitingPrepare
	protocol llm.Protocol

	requestID      string      // made by id, when first needed
	timezone       string      // the x-chime-timezone header, raw
	sessionHeaders [][2]string // the llm.SessionHeaders() present, name and value
	// sessionHeadersRoom holds the usual one or two without an allocation.
	sessionHeadersRoom [2][2]string

	req *llm.Request // the parsed body while prepare is pending
	// prepareTimeoutMs is this request's prepare timeout (loadtimeout.go).
	prepareTimeoutMs int64
	// The body as received and as rebuilt: large ones go back to
	// proxywasm.RecycleBuffer when the stream is done (recycleBodies).
	bodyIn, bodyOut []byte
	zone            *time.Location

	reserved        bool // the host reserved reminders for this request
	outcomeSent     bool
	outcomePending  bool // the response waits for the host to acknowledge the outcome
	responseStarted bool
	streamDone      bool

	// What the response path needs, captured while it is readable
	// (request data is gone in response callbacks).
	path string // :path as the client sent it
	// reentry is the listener address, for followups (docs/architecture.md);
	// read when a turn is reported (reentryAddress), not on every request.
	reentry        string
	reentryRead    bool
	requestHeaders [][2]string // the client's, for followupHeaders
	sessionID      string
	pinnedRoute    string // the session's pinned route as this request knows it (route.go)
	routePending   bool   // held headers wait for the body to settle the route (route.go)
	streaming      bool   // the client asked for SSE
	sentBody       []byte // the body as forwarded upstream; nil = not ours to resolve
	mayContinue    bool   // prepare said a stop/length finish is worth a resolve
	wantTemplate   bool   // prepare asked for this request as the session's wake template
	// serverTools are the tools injected into this request, sorted: the
	// calls the response path withholds from the client and resolves.
	serverTools []string

	// asked is set when the request asks the host (prepare): most skip
	// it, and a context of more than 512 bytes takes the allocator's
	// path for objects with a header, code nothing else a request does
	// runs (TestContextSize).
	asked *asked

	resp response

	// followupPending: a followup waits for the host to accept its marker.
	followupPending bool
}

// OnHttpRequestHeaders is docs/architecture.md#request-path step 1.
func (h *httpContext) OnHttpRequestHeaders(_ int, endOfStream bool) proxywasm.Action {
	// One read of the whole map: each host call costs a round trip out of
	// the VM and a copy into guest memory, and most requests are POSTs.
	headers, err := proxywasm.GetHttpRequestHeaders()
	if err != nil {
		return h.headersUnread(err)
	}
	// One pass over the headers (names arrive lowercase from Envoy; the
	// fold covers a host that keeps the client's case).
	var method, path, marker, clientID string
	var hasPath, hasMarker, hasLength, hasEncoding, hasTimezone bool
	var session [maxSessionHeaders]string // by sessionHeaderNames index
	for _, kv := range headers {
		switch role := headerRoleOf(kv[0]); role {
		case roleNone:
		case roleMethod:
			if method == "" {
				method = kv[1]
			}
		case rolePath:
			if !hasPath {
				path, hasPath = kv[1], true
			}
		case roleMarker:
			if !hasMarker {
				marker, hasMarker = kv[1], true
			}
		case roleRequestID:
			if clientID == "" {
				clientID = kv[1]
			}
		case roleTimezone:
			if !hasTimezone {
				h.timezone, hasTimezone = kv[1], true
			}
		case roleLength:
			hasLength = true
		case roleEncoding:
			hasEncoding = true
		default:
			if i := role - roleSession; session[i] == "" {
				session[i] = kv[1]
			}
		}
	}
	if method != "POST" || !hasPath {
		return proxywasm.ActionContinue // docs/failures.md: unknown path or method passes through
	}
	proto := llm.DetectProtocol(path)
	if proto == llm.Unknown {
		return proxywasm.ActionContinue
	}
	p := h.plugin
	p.requests.inc()

	if hasMarker {
		if action, followup := h.takeMarker(marker); followup {
			return action
		}
	}

	h.handled, h.protocol, h.path = true, proto, path
	h.awaitPrepare() // loadtimeout.go
	// The body may change, so its length must not be pinned (docs/architecture.md).
	// The response must arrive uncompressed for the response path to read
	// it; a compressor filter downstream may still compress it for the client.
	// Only those present: a removal is a host call.
	for _, rm := range [...]struct {
		name    string
		present bool
	}{{"content-length", hasLength}, {"accept-encoding", hasEncoding}} {
		if !rm.present {
			continue
		}
		if err := proxywasm.RemoveHttpRequestHeader(rm.name); err != nil {
			proxywasm.LogDebugf("chime: remove %s: %v", rm.name, err)
		}
	}
	h.requestHeaders = headers // followupHeaders runs only if a resolve needs it
	// The client's x-request-id is only logged: a client-chosen id as the
	// reservation and resolve key would let one session roll back or
	// cancel another's (docs/failures.md). The filter's own id is made
	// when first needed (h.id): a request that skips prepare and needs no
	// resolve never needs one.
	if clientID != "" && proxywasm.LogDebugEnabled() {
		h.logClientID(clientID)
	}
	h.timezone = strings.TrimSpace(h.timezone)
	for i, v := range session {
		if strings.TrimSpace(v) != "" {
			if h.sessionHeaders == nil {
				h.sessionHeaders = h.sessionHeadersRoom[:0]
			}
			h.sessionHeaders = append(h.sessionHeaders, [2]string{sessionHeaderNames[i], v})
		}
	}
	if endOfStream {
		// No body: nothing to parse or edit (docs/failures.md#failure-table body).
		h.bodyDone = true
		h.forwardMalformed("empty body")
	}
	if h.routeAtHeaders(endOfStream) {
		// StopIteration (allowOnHeadersStopIteration): the body still
		// arrives; the headers go on when the request resumes.
		return proxywasm.ActionPause
	}
	return proxywasm.ActionContinue
}

// The paths of OnHttpRequestHeaders that most requests do not take are
// functions of their own (see bodyUnread).

// headersUnread passes a request whose headers cannot be read.
//
//go:noinline
func (h *httpContext) headersUnread(err error) proxywasm.Action {
	// Only an LLM request is counted and worth the warning.
	method, _ := proxywasm.GetHttpRequestHeader(":method")
	if path, _ := proxywasm.GetHttpRequestHeader(":path"); method == "POST" && llm.DetectProtocol(path) != llm.Unknown {
		h.plugin.requests.inc()
		proxywasm.LogWarnf("chime: cannot read request headers: %v", err)
	}
	return proxywasm.ActionContinue
}

// takeMarker removes the followup marker, which is ours alone and never
// reaches the provider; a valid one makes the request a followup.
//
//go:noinline
func (h *httpContext) takeMarker(marker string) (action proxywasm.Action, followup bool) {
	if err := proxywasm.RemoveHttpRequestHeader(hostapi.HeaderFollowup); err != nil {
		proxywasm.LogWarnf("chime: remove %s: %v", hostapi.HeaderFollowup, err)
	}
	if id, ok := hostapi.VerifyFollowupMarker(h.plugin.cfg.Token, marker, h.plugin.hostNow()); ok {
		return h.acceptFollowup(id, marker), true
	}
	proxywasm.LogDebugf("chime: invalid %s marker removed; treating the request as a normal one", hostapi.HeaderFollowup)
	return proxywasm.ActionContinue, false
}

// logClientID logs the client's own request id, at debug only.
//
//go:noinline
func (h *httpContext) logClientID(clientID string) {
	proxywasm.LogDebugf("chime: request %s: client x-request-id %q", h.id(), clientID)
}

// OnHttpRequestBody is docs/architecture.md#request-path step 2: buffer to the end of
// the stream, strip directives, and ask the host to prepare.
func (h *httpContext) OnHttpRequestBody(bodySize int, endOfStream bool) proxywasm.Action {
	if h.followupPending {
		return proxywasm.ActionPause // buffered until the host accepts the marker
	}
	if !h.handled || h.bodyDone {
		return proxywasm.ActionContinue
	}
	if !endOfStream {
		return proxywasm.ActionPause // keep buffering until the whole body is here
	}
	h.bodyDone = true
	body, err := proxywasm.GetHttpRequestBody(0, bodySize)
	if err != nil {
		return h.bodyUnread(err)
	}
	h.bodyIn = body
	spare := h.plugin.spareRequest()
	req, err := llm.ParseRequestWith(spare, &h.plugin.toolsMemo, h.protocol, body)
	if err != nil {
		return h.bodyMalformed(spare, err)
	}
	h.req = req
	// Until the host names what it injects, withhold the calls of every
	// tool this filter may inject, except the client's own of that name: a
	// request that fails open may still get a call of a tool an earlier
	// request offered.
	h.serverTools = h.plugin.injectable(req)
	h.zone = h.plugin.zoneFor(h.timezone)
	h.streaming = req.Stream()
	h.sessionID = h.sessionOf(req)
	h.prepareTimeoutMs = h.plugin.prepareTimeoutMs() // grows with the load (loadtimeout.go)
	now := h.plugin.now()                            // one clock read for the request (two WASI calls in the guest)
	var dirs []hostapi.HostDirective
	if d := req.Directives(); len(d) > 0 { // most requests have none
		dirs = h.hostDirectives(d)
	}
	req.StripDirectives() // even when the host is down (docs/architecture.md#fail-open)
	if len(dirs) == 0 {
		// A session with kept directives is never quiet (storeQuiet,
		// keepDirectives), so a quiet one needs no read of them.
		if e, ok := h.plugin.quietFor(h.sessionID, now); ok {
			h.skip(e, now) // skip.go: the session is quiet, nothing to ask
			return proxywasm.ActionContinue
		}
	}
	return h.askHost(req, dirs, now)
}

// The paths of OnHttpRequestBody that most requests do not take are
// functions of their own: a request under load runs its code cold, so
// code beside the path taken costs too (docs/performance.md).

// bodyUnread forwards a body the filter could not read.
//
//go:noinline
func (h *httpContext) bodyUnread(err error) proxywasm.Action {
	proxywasm.LogWarnf("chime: request %s: cannot read body: %v", h.id(), err)
	h.prepareSettled()
	h.routeWithoutAnswer("")
	return proxywasm.ActionContinue
}

// bodyMalformed forwards a body that does not parse, unmodified.
//
//go:noinline
func (h *httpContext) bodyMalformed(spare *llm.Request, err error) proxywasm.Action {
	h.plugin.doneWith(spare)
	h.prepareSettled()
	h.routeWithoutAnswer("")
	h.forwardMalformed(err.Error())
	return proxywasm.ActionContinue
}

// askHost sends the prepare of a request that cannot skip it.
//
//go:noinline
func (h *httpContext) askHost(req *llm.Request, dirs []hostapi.HostDirective, now time.Time) proxywasm.Action {
	prep := hostapi.PrepareRequest{
		RequestID:  h.id(),
		Protocol:   h.protocol.String(),
		SessionID:  h.sessionID,
		Timezone:   h.zone.String(),
		Directives: dirs,
		// Positions restart with each stored response (docs/directives.md).
		PreviousResponseID: req.PreviousResponseID(),
		// After this the prepare must not reserve (docs/failures.md): the filter
		// fails open and rolls the id back.
		DeadlineMs: now.UnixMilli() + h.plugin.ntpOffsetMs + h.prepareTimeoutMs,
	}
	h.asked = &asked{}
	prep.Kept, h.asked.keptAll = h.plugin.keptFor(h.sessionID)
	return h.prepare(prep)
}

// asked is what a request that asks the host keeps of the asking.
type asked struct {
	// prep is the prepare sent, whose directives are kept if the host
	// cannot be reached; keptAll what was kept for the session before it
	// (keep.go).
	prep    hostapi.PrepareRequest
	built   time.Time // when prep was made: its quiet entry's start (skip.go)
	sentAt  time.Time // when the call went out (loadtimeout.go)
	keptAll []hostapi.KeptDirectives
}

// sessionOf is req.SessionID over the session headers. h.sessionHeaders
// holds, in llm's priority order, only the headers whose value is not
// blank, so the first of them is the one SessionID would pick.
func (h *httpContext) sessionOf(req *llm.Request) string {
	if len(h.sessionHeaders) > 0 {
		return strings.TrimSpace(h.sessionHeaders[0][1])
	}
	return req.SessionID(nil)
}

// id is the filter's id of this request: the reservation and resolve key
// the host knows it by, and the name it has in the logs.
func (h *httpContext) id() string {
	if h.requestID == "" {
		h.requestID = newRequestID()
	}
	return h.requestID
}

// reentryAddress is the destination.address property: the listener the
// host's followups re-enter. It is read from a response callback, when a
// turn is reported: stream properties last as long as the stream.
func (h *httpContext) reentryAddress() string {
	if !h.reentryRead {
		h.reentryRead = true
		if addr, err := proxywasm.GetProperty([]string{"destination", "address"}); err == nil {
			h.reentry = string(addr)
		} else {
			proxywasm.LogDebugf("chime: no destination.address property (followups use the host's default): %v", err)
		}
	}
	return h.reentry
}

// injectable is cfg.injectable(req); the shared list, never written, when
// the request names none of the tools.
func (p *pluginContext) injectable(req *llm.Request) []string {
	for _, name := range p.injectableAll {
		if req.HasToolNamed(name) {
			return p.cfg.injectable(req)
		}
	}
	return p.injectableAll
}

// forwardMalformed lets a body the filter cannot edit safely through
// unmodified (docs/failures.md), counted and logged at debug.
func (h *httpContext) forwardMalformed(reason string) {
	h.plugin.malformed.inc()
	proxywasm.LogDebugf("chime: request %s: forwarding unmodified %s body: %s", h.id(), h.protocol, reason)
}

// hostDirectives converts the parsed directives of the new user input for
// the host (docs/directives.md), positions included: malformed ones (Err set) and
// unknown ones are stripped but not sent, and so are those past
// hostapi.MaxDirectivesPerRequest. Malformed and capped ones are counted
// and logged once per request (docs/failures.md).
func (h *httpContext) hostDirectives(dirs []llm.Directive) []hostapi.HostDirective {
	var out []hostapi.HostDirective
	dropped := 0
	var first error
	for _, d := range dirs {
		kind := hostapi.DirectiveKind(d.Kind)
		if d.Err != nil || (kind != "" && len(out) == hostapi.MaxDirectivesPerRequest) {
			dropped++
			if first == nil {
				first = d.Err
			}
			continue
		}
		if kind == "" {
			continue
		}
		out = append(out, hostapi.HostDirective{
			Kind: kind, Text: d.Text, MaxRepeats: d.MaxRepeats, Clock: d.Clock, Route: d.Route,
			EveryMs: d.Every.Milliseconds(), Position: d.Position,
		})
	}
	if dropped > 0 {
		h.plugin.directivesDropped.add(dropped)
		why := "over the cap of " + strconv.Itoa(hostapi.MaxDirectivesPerRequest)
		if first != nil {
			why = first.Error()
		}
		proxywasm.LogInfof("chime: request %s: %d directive(s) stripped but not applied (first: %s)", h.id(), dropped, why)
	}
	return out
}

// followupHeaders picks the client's request headers the host repeats on
// followups (hostapi.ResolveRequest.Headers): provider credentials and API
// versions, session and zone headers. Left out: pseudo-headers (the
// authority travels as "host"), framing and hop-by-hop headers,
// accept-encoding (the host reads the followup's answer), the proxy's own
// x-envoy-*/x-forwarded-* and the request id (a followup is a new request).
func followupHeaders(headers [][2]string) map[string]string {
	out := make(map[string]string, len(headers))
	for _, kv := range headers {
		name := strings.ToLower(kv[0])
		switch {
		case name == ":authority":
			name = "host"
		case strings.HasPrefix(name, ":"), strings.HasPrefix(name, "x-envoy-"), strings.HasPrefix(name, "x-forwarded-"):
			continue
		}
		switch name {
		case "content-length", "transfer-encoding", "connection", "keep-alive", "te", "trailer", "upgrade",
			"proxy-connection", "expect", "accept-encoding", "x-request-id", hostapi.HeaderFollowup:
			continue
		}
		if prev, ok := out[name]; ok {
			out[name] = prev + ", " + kv[1]
			continue
		}
		out[name] = kv[1]
	}
	return out
}

// sessionHeader is the value of the session header name, or "".
func (h *httpContext) sessionHeader(name string) string {
	return (*sessionHeaderList)(&h.sessionHeaders).Get(name)
}

// sessionHeaderList is an llm.HeaderGetter over the session headers; a
// pointer to it converts to the interface without an allocation.
type sessionHeaderList [][2]string

func (l *sessionHeaderList) Get(name string) string {
	for _, kv := range *l {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// maxSessionHeaders bounds llm.SessionHeaders (TestSessionHeadersFit).
const maxSessionHeaders = 8

// sessionHeaderNames is llm.SessionHeaders(), read once per VM.
var sessionHeaderNames = llm.SessionHeaders()
