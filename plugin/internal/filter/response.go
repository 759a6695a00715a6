package filter

import (
	"bytes"
	"cmp"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/internal/memeq"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// The response path (docs/architecture.md): watch the finish and tool calls of a 2xx
// JSON or SSE answer, withhold server-tool calls from the client, ask the
// host to resolve (run the tools, hold, stopMessage) and splice its
// continuation into the same response. Followups and anything the filter
// cannot read pass untouched.

// spliceOptions render continuations: the text is complete already, so it
// goes out in large deltas rather than token-sized ones.
var spliceOptions = llm.RenderOptions{ChunkBytes: 512}

type responseMode uint8

const (
	respPass  responseMode = iota // not watched: every byte passes untouched
	respJSON                      // buffered to the end, then decided
	respSSE                       // events forwarded or withheld one by one
	respDrain                     // SSE after an unreadable event: the client's stream is closed, the rest dropped
)

// response is the response-path state of one stream.
type response struct {
	mode responseMode
	// The flags, together (TestContextSize).
	withholding bool // SSE: a server-tool call started: everything after it is withheld
	holdingTail bool // SSE: the text's close, a finish or terminal was withheld: so is everything after it
	// headersHeld: the headers of a JSON answer wait for its end
	// (OnHttpResponseHeaders), to leave with its content-length.
	headersHeld bool
	hasLength   bool // length holds the content-length the held headers carry
	pending     bool // a resolve call is in flight
	cancelled   bool // the host was told to cancel it

	orig *llm.Turn // the upstream turn, once complete

	// SSE.
	reader  *llm.StreamReader
	splicer *llm.Splicer
	turn    *llm.TurnBuilder
	held    []byte // raw withheld events, replayed untouched when nothing was spliced
	// forwardedCalls is how many tool calls the client saw start before
	// forwarding stopped (all client calls).
	forwardedCalls int
	paused         []byte // bytes left in the paused buffer while resolving

	// length is the content-length the held headers carry, when
	// hasLength: the upstream's, kept as long as the answer is unchanged.
	length int
}

// startResponse picks how to watch the response once its headers are in:
// only 2xx, uncompressed JSON or SSE answers to a request the filter
// forwarded itself. The body may change, so content-length goes, unless
// the headers are held (hold, for a JSON answer) until the body is known.
func (h *httpContext) startResponse(rh *responseHeaders, ok2xx, endOfStream, hold bool) {
	if !ok2xx || endOfStream || h.sentBody == nil {
		h.sentBody = nil
		return
	}
	if enc := rh.encoding; enc != "" && !strings.EqualFold(strings.TrimSpace(enc), "identity") {
		h.passEncoded(enc)
		return
	}
	switch {
	case isMediaType(rh.contentType, "application/json"):
		h.resp.mode = respJSON
	case isMediaType(rh.contentType, "text/event-stream"):
		h.startStream()
	default:
		h.sentBody = nil
		return
	}
	if !rh.hasLength {
		return // absent: no host call
	}
	if hold && h.resp.mode == respJSON {
		// The headers wait for the answer's end (headersHeld): its
		// length stays unless the answer changes (setLength).
		h.resp.length, h.resp.hasLength = parseLength(rh.length)
		return
	}
	if err := proxywasm.RemoveHttpResponseHeader("content-length"); err != nil {
		proxywasm.LogDebugf("chime: request %s: remove response content-length: %v", h.id(), err)
	}
}

// passEncoded lets a compressed answer through unread.
//
//go:noinline
func (h *httpContext) passEncoded(enc string) {
	proxywasm.LogDebugf("chime: request %s: %s-encoded response passes untouched", h.id(), enc)
	h.sentBody = nil
}

// startStream watches an SSE answer.
//
//go:noinline
func (h *httpContext) startStream() {
	h.resp.mode = respSSE
	h.resp.reader = llm.NewStreamReader(h.protocol)
	h.resp.splicer = llm.NewSplicer(h.protocol)
	h.resp.turn = new(llm.TurnBuilder)
}

// parseLength reads a content-length value; false when it is not one
// (setLength then writes the right one).
func parseLength(v string) (int, bool) {
	if v == "" || len(v) > 15 {
		return 0, false
	}
	n := 0
	for i := 0; i < len(v); i++ {
		if !isDigit(v[i]) {
			return 0, false
		}
		n = n*10 + int(v[i]-'0')
	}
	return n, true
}

// isMediaType reports whether a content-type value names the media type
// lower (lowercase), without ASCII case, before any parameters.
func isMediaType(ct, lower string) bool {
	ct = strings.TrimLeft(ct, " \t")
	if len(ct) < len(lower) || !equalFoldLower(ct, lower) {
		return false
	}
	rest := strings.TrimLeft(ct[len(lower):], " \t")
	return rest == "" || rest[0] == ';'
}

// responseHeaders are the response headers the filter reads: the first
// value of each, names compared without ASCII case.
type responseHeaders struct {
	status, contentType, encoding, length string
	hasLength                             bool
}

// responseHeaderNames are the names readResponseHeaders looks for, in
// the order of its result's fields.
var responseHeaderNames = [...]string{":status", "content-type", "content-encoding", "content-length"}

func readResponseHeaders(headers [][2]string) responseHeaders {
	var vals [len(responseHeaderNames)]string
	var seen [len(responseHeaderNames)]bool
	for _, kv := range headers {
		for i, name := range responseHeaderNames {
			if !seen[i] && len(kv[0]) == len(name) && equalFoldLower(kv[0], name) {
				vals[i], seen[i] = kv[1], true
				break
			}
		}
	}
	return responseHeaders{status: vals[0], contentType: vals[1], encoding: vals[2], length: vals[3], hasLength: seen[3]}
}

// OnHttpResponseBody is docs/architecture.md#response-path.
func (h *httpContext) OnHttpResponseBody(bodySize int, endOfStream bool) proxywasm.Action {
	if h.outcomePending && h.resp.mode == respPass {
		// The headers wait for the outcome's acknowledgement. With
		// allowOnHeadersStopIteration the body still reaches the filter,
		// and a Continue here would send the headers on with it: the
		// client could then race a rollback with its next request.
		return proxywasm.ActionPause
	}
	switch h.resp.mode {
	case respJSON:
		return h.jsonBody(bodySize, endOfStream)
	case respSSE:
		return h.sseBody(bodySize, endOfStream)
	case respDrain:
		h.emit(nil, nil, bodySize)
	}
	return proxywasm.ActionContinue
}

// responseBody reads the response body buffer (nil when empty).
func (h *httpContext) responseBody(size int) ([]byte, bool) {
	if size == 0 {
		return nil, true
	}
	b, err := proxywasm.GetHttpResponseBody(0, size)
	if err != nil {
		proxywasm.LogWarnf("chime: request %s: cannot read the response body: %v", h.id(), err)
		return nil, false
	}
	return b, true
}

// jsonBody buffers a JSON answer to its end, then resolves or passes it.
func (h *httpContext) jsonBody(size int, endOfStream bool) proxywasm.Action {
	if !endOfStream {
		return proxywasm.ActionPause
	}
	r := &h.resp
	r.mode = respPass // decided below; later callbacks pass
	body, ok := h.responseBody(size)
	if !ok {
		return proxywasm.ActionContinue
	}
	h.setLength(size) // the answer as it is, unless replaced below
	if !h.mayContinue && !mayNameServerTool(body, h.plugin.needles(h.serverTools)) {
		// Nothing to resolve or withhold: the answer passes as is, so
		// there is no need to parse it, unless it completes a template.
		if h.wantTemplate {
			h.templateOf(body)
		} else {
			proxywasm.RecycleBuffer(body) // read only here
		}
		return proxywasm.ActionContinue
	}
	return h.jsonTurn(body)
}

// templateOf sends the answer body as the session's wake template.
//
//go:noinline
func (h *httpContext) templateOf(body []byte) {
	if turn, err := llm.ParseResponse(h.protocol, body); err == nil {
		h.resp.orig = turn
		h.sendTemplate()
	}
}

// jsonTurn parses an answer that may call a server tool or be worth a
// continuation, and resolves or passes it: most answers need neither,
// so this is apart from jsonBody (see bodyUnread).
//
//go:noinline
func (h *httpContext) jsonTurn(body []byte) proxywasm.Action {
	r := &h.resp
	turn, err := llm.ParseResponse(h.protocol, body)
	if err != nil {
		proxywasm.LogDebugf("chime: request %s: response passes untouched: %v", h.id(), err)
		return proxywasm.ActionContinue
	}
	r.orig = turn
	if h.needsResolve(len(turn.ServerCalls(h.serverTools)), turn.Finish, true) && h.resolve(false) {
		return proxywasm.ActionPause
	}
	h.sendTemplate()
	if out, changed := h.jsonEnding(nil); changed {
		h.replaceResponse(out)
	}
	return proxywasm.ActionContinue
}

// needles is names without those that contain another of them: a body
// that holds "read_timer" holds "timer", so searching for "timer" alone
// finds both (seven server tools, two searches). The last answer is kept,
// for the shared lists most requests have.
func (p *pluginContext) needles(names []string) []string {
	if c := &p.needleCache; sameList(c.names, names) && c.names != nil {
		return c.needles
	}
	var out []string
	for i, n := range names {
		covered := false
		for j, m := range names {
			if j != i && strings.Contains(n, m) && (len(m) < len(n) || j < i) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, n)
		}
	}
	p.needleCache.names, p.needleCache.needles = names, out
	return out
}

// mayNameServerTool reports whether a JSON body could hold a call to a
// server tool: a tool name appears literally, or a \u escape could spell
// one (no other JSON escape yields a letter). names may be needles of the
// names (pluginContext.needles).
func mayNameServerTool(body []byte, names []string) bool {
	if len(names) == 0 {
		return false
	}
	if contains(body, `\u`) {
		return true
	}
	for _, name := range names {
		if contains(body, name) {
			return true
		}
	}
	return false
}

// contains is bytes.Contains for the short needles mayNameServerTool
// looks for, as a loop over IndexByte: bytes.Index's general code is
// several times the size, and a request under load runs it cold
// (docs/performance.md). The needles are a few bytes, so a byte that
// starts one often costs a compare of a few bytes.
func contains(body []byte, needle string) bool {
	if needle == "" {
		return true
	}
	for i := 0; ; i++ {
		j := bytes.IndexByte(body[i:], needle[0])
		if j < 0 || len(body)-i-j < len(needle) {
			return false
		}
		i += j
		if string(body[i:i+len(needle)]) == needle {
			return true
		}
	}
}

// sseBody forwards each complete event at once, except from the first
// server-tool call on and from the first event that closes the text or
// ends the turn (llm.Event.MustHold) on; at the end of the stream it
// resolves, or closes the stream with what was withheld.
func (h *httpContext) sseBody(size int, endOfStream bool) proxywasm.Action {
	r := &h.resp
	chunk, ok := h.responseBody(size)
	if !ok {
		return proxywasm.ActionContinue
	}
	evs, err := r.reader.Feed(chunk)
	// Built in a reused buffer; both go back once the host has the bytes.
	out := h.route(evs, proxywasm.BodyBuffer(len(chunk)))
	if err != nil {
		// The reader cannot go on (an event over llm.MaxEventBytes): end the
		// client's stream cleanly with what it has and drop the rest.
		proxywasm.LogWarnf("chime: request %s: unreadable SSE stream: %v", h.id(), err)
		r.orig = r.turn.Turn()
		out = append(out, h.sseEnding(nil)...)
		r.mode = respDrain
		h.emitAndRecycle(chunk, out, size)
		return proxywasm.ActionContinue
	}
	if !endOfStream {
		h.emitAndRecycle(chunk, out, size)
		return proxywasm.ActionContinue
	}
	r.mode = respPass
	last, err := r.reader.Close()
	if err != nil {
		proxywasm.LogDebugf("chime: request %s: SSE stream ended early: %v", h.id(), err)
	}
	out = h.route(last, out)
	complete := r.turn.Terminated() && r.turn.ErrorMessage() == ""
	// The whole turn is built only when something reads it: a resolve, a
	// template or withheld calls; an answer that thinks renders each
	// thinking block as JSON for it.
	if h.needsResolve(r.turn.CountCalls(h.serverTools), r.turn.Finish(), complete) {
		r.builtTurn()
		if h.resolve(true) {
			r.paused = out
			h.emit(chunk, out, size)
			proxywasm.RecycleBuffer(chunk)
			return proxywasm.ActionPause
		}
	}
	if complete {
		if h.wantTemplate {
			r.builtTurn()
		}
		h.sendTemplate()
	}
	if r.withholding {
		r.builtTurn()
	}
	out = append(out, h.sseEnding(nil)...)
	h.emitAndRecycle(chunk, out, size)
	return proxywasm.ActionContinue
}

// builtTurn sets orig to the streamed turn, building it once.
func (r *response) builtTurn() {
	if r.orig == nil {
		r.orig = r.turn.Turn()
	}
}

// route decides for each event whether it goes to the client now and
// appends those to out.
func (h *httpContext) route(evs []llm.Event, out []byte) []byte {
	r := &h.resp
	for _, ev := range evs {
		if !r.withholding && h.startsServerCall(ev) {
			r.withholding = true
		}
		if ev.MustHold() {
			r.holdingTail = true
		}
		forward := !r.withholding && !r.holdingTail
		switch {
		case forward:
			out = append(out, ev.Raw...)
		case !r.withholding:
			r.held = append(r.held, ev.Raw...)
		}
		r.splicer.Add(ev, forward)
		r.turn.Add(ev)
		if forward {
			r.forwardedCalls = r.turn.NumCalls()
		}
	}
	return out
}

// startsServerCall reports whether withholding must begin at ev. Chat may
// split a tool name across chunks, so a call whose name so far is empty or
// could still grow into a server tool's name is withheld too; if it turns
// out to be a client call, the splicer re-renders it at the end.
func (h *httpContext) startsServerCall(ev llm.Event) bool {
	if ev.StartsToolCall(h.serverTools) {
		return true
	}
	if h.protocol != llm.Chat || !ev.Kind.Has(llm.KindToolCallStart) {
		return false
	}
	for _, c := range ev.Calls {
		if c.ID == "" && c.Name == "" {
			continue // an arguments fragment
		}
		for _, name := range h.serverTools {
			if strings.HasPrefix(name, c.Name) {
				return true
			}
		}
	}
	return false
}

// needsResolve is docs/architecture.md's test, counting the server-tool calls on the
// way: a server-tool call, or a stop/length finish the host may continue.
// An incomplete or failed upstream turn is never continued.
func (h *httpContext) needsResolve(serverCalls int, finish llm.Finish, complete bool) bool {
	h.plugin.serverToolCalls.add(serverCalls)
	if !complete {
		return false
	}
	if serverCalls > 0 {
		return true
	}
	return h.mayContinue && (finish.Reason == llm.FinishStop || finish.Reason == llm.FinishLength)
}

// resolve sends the resolve call. It reports false when the call could not
// be sent; the caller then fails open at once.
func (h *httpContext) resolve(streaming bool) bool {
	p, r := h.plugin, &h.resp
	body, err := h.turnReport(streaming)
	if err == nil {
		err = p.callHost(hostapi.PathResolve, body, p.cfg.ResolveTimeoutMs, h.onResolveAnswer)
	}
	h.sentBody = nil
	if err != nil {
		p.resolveFailures.inc()
		p.hostFailures.inc()
		proxywasm.LogWarnf("chime: request %s: cannot send resolve: %v", h.id(), err)
		return false
	}
	p.resolves.inc()
	r.pending = true
	return true
}

// turnReport is the ResolveRequest of this request and its answer, as
// JSON: PathResolve and PathTemplate take the same body.
func (h *httpContext) turnReport(streaming bool) ([]byte, error) {
	req := hostapi.ResolveRequest{
		RequestID:   h.id(),
		SessionID:   h.sessionID,
		Protocol:    h.protocol.String(),
		Path:        h.path,
		Reentry:     h.reentryAddress(),
		Headers:     h.followupHeaders(),
		Request:     json.RawMessage("null"),
		Turn:        h.resp.orig,
		ServerTools: h.serverTools,
		Streaming:   h.streaming || streaming,
		Timezone:    h.zone.String(),
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	// The request goes in byte for byte: json.Marshal would re-encode
	// (compact and escape) a body of megabytes. The first
	// `"request":null` is the field: the ones before it hold only strings.
	return bytes.Replace(body, []byte(`"request":null`), append([]byte(`"request":`), h.sentBody...), 1), nil
}

// sendTemplate hands the host this request and its answer as the
// session's wake template when the prepare answer asked for it
// (docs/scheduler.md#templates). Nobody waits for the answer: a lost
// template only means a wake is built from an older one.
func (h *httpContext) sendTemplate() {
	if !h.wantTemplate || h.sentBody == nil || h.sessionID == "" || h.resp.orig == nil {
		return
	}
	h.wantTemplate = false
	p := h.plugin
	body, err := h.turnReport(false)
	if err == nil {
		err = p.callHost(hostapi.PathTemplate, body, p.cfg.PrepareTimeoutMs, func(numHeaders, bodySize, _ int) {
			if failure := readAnswer(numHeaders, bodySize, nil); failure != "" {
				p.hostFailures.inc()
				proxywasm.LogDebugf("chime: template of a request not kept by the host: %s", failure)
			}
		})
	}
	if err != nil {
		p.hostFailures.inc()
		proxywasm.LogDebugf("chime: request %s: cannot send template: %v", h.id(), err)
	}
}

// onResolveAnswer finishes the paused response with the host's verdict.
// The call belongs to the plugin context: the client may be gone by now.
func (h *httpContext) onResolveAnswer(numHeaders, bodySize, _ int) {
	p, r := h.plugin, &h.resp
	r.pending = false
	if h.streamDone {
		return // the client went away; the host was told to cancel
	}
	var ans hostapi.ResolveResponse
	if failure := readAnswer(numHeaders, bodySize, &ans); failure != "" {
		p.resolveFailures.inc()
		p.hostFailures.inc()
		proxywasm.LogWarnf("chime: request %s: resolve failed, showing the original turn: %s", h.id(), failure)
		ans = hostapi.ResolveResponse{}
	}
	// The chain's tools may have changed the session (skip.go); after a
	// failure the generation it ended with is unknown.
	raiseQuietFloor(h.sessionID, cmp.Or(ans.Generation, p.gen.known))
	proxywasm.LogDebugf("chime: request %s: resolved: continued %v, reason %q, %d hops", h.id(), ans.Continued, ans.Reason, ans.Hops)
	if r.reader != nil {
		h.replaceResponse(append(r.paused, h.sseEnding(&ans)...))
		r.paused = nil
	} else if out, changed := h.jsonEnding(&ans); changed {
		h.replaceResponse(out)
	}
	if err := proxywasm.ResumeHttpResponse(); err != nil {
		proxywasm.LogWarnf("chime: request %s: resume response: %v", h.id(), err)
	}
}

// cancelPendingResolve tells the host, once, that the client of a pending
// resolve went away (docs/architecture.md#disconnect), so it stops holds and followups.
func (h *httpContext) cancelPendingResolve() {
	r := &h.resp
	if !r.pending || r.cancelled {
		return
	}
	r.cancelled = true
	proxywasm.LogDebugf("chime: request %s: client gone while resolving; cancelling", h.id())
	h.plugin.sendOutcome(hostapi.PathCancel, h.id())
}

// continuation is the answer's continuation, or nil when there is none.
func continuation(ans *hostapi.ResolveResponse) *llm.Turn {
	if ans == nil || !ans.Continued {
		return nil
	}
	return ans.Continuation
}

// jsonEnding renders the client's JSON body: the merged turn when the host
// continued, else the original turn minus server-tool calls. It reports
// false when the original bytes can stay.
func (h *httpContext) jsonEnding(ans *hostapi.ResolveResponse) ([]byte, bool) {
	orig := h.resp.orig
	clientCalls := orig.ClientCalls(h.serverTools)
	if cont := continuation(ans); cont != nil {
		merged := llm.Merge(withoutServerCalls(orig, h.serverTools), cont)
		merged.ToolCalls = append(clientCalls, newCalls(clientCalls, cont.ToolCalls)...)
		merged.Finish = finishFor(merged.Finish, len(merged.ToolCalls))
		return llm.RenderJSON(h.protocol, merged), true
	}
	if len(clientCalls) == len(orig.ToolCalls) {
		return nil, false
	}
	return llm.RenderJSON(h.protocol, withoutServerCalls(orig, h.serverTools)), true
}

// sseEnding renders what follows the forwarded events: the spliced
// continuation, or the withheld part of the original minus server-tool
// calls, or, when nothing was withheld but the held finish and terminal,
// those events byte for byte.
func (h *httpContext) sseEnding(ans *hostapi.ResolveResponse) []byte {
	r := &h.resp
	if ans == nil && !r.withholding {
		if r.turn.CountCalls(h.serverTools) > 0 {
			proxywasm.LogWarnf("chime: request %s: a server-tool call reached the client unrecognised", h.id())
		}
		return r.held
	}
	seen := r.orig.ToolCalls[:min(r.forwardedCalls, len(r.orig.ToolCalls))]
	withheld := llm.Turn{ToolCalls: r.orig.ToolCalls[len(seen):]}
	withheldClient := withheld.ClientCalls(h.serverTools)
	if cont := continuation(ans); cont != nil {
		rest := *cont
		rest.ToolCalls = append(withheldClient, newCalls(r.orig.ClientCalls(h.serverTools), cont.ToolCalls)...)
		rest.Finish = finishFor(rest.Finish, len(seen)+len(rest.ToolCalls))
		return r.splicer.Continue(&rest, spliceOptions)
	}
	if !r.withholding {
		if len(r.orig.ServerCalls(h.serverTools)) > 0 {
			proxywasm.LogWarnf("chime: request %s: a server-tool call reached the client unrecognised", h.id())
		}
		return r.held
	}
	rest := &llm.Turn{ToolCalls: withheldClient, Finish: finishFor(r.orig.Finish, len(seen)+len(withheldClient))}
	return r.splicer.Continue(rest, spliceOptions)
}

// withoutServerCalls is t as the client may see it (docs/architecture.md: a client
// never sees a server-tool call).
func withoutServerCalls(t *llm.Turn, serverTools []string) *llm.Turn {
	out := *t
	out.ToolCalls = t.ClientCalls(serverTools)
	out.Finish = finishFor(t.Finish, len(out.ToolCalls))
	return &out
}

// newCalls returns the continuation's calls that do not repeat one of the
// original's client calls (by id). The host's continuation may carry the
// original's client calls of a mixed turn (docs/architecture.md#mixed-calls), or not;
// either way the client gets each once.
func newCalls(orig, cont []llm.ToolCall) []llm.ToolCall {
	var out []llm.ToolCall
	for _, c := range cont {
		if c.ID != "" && slices.ContainsFunc(orig, func(o llm.ToolCall) bool { return o.ID == c.ID }) {
			continue
		}
		out = append(out, c)
	}
	return out
}

// finishFor keeps a finish consistent with the calls the client gets: a
// tool_calls finish without calls becomes stop, and calls after a stop
// finish make it tool_calls.
func finishFor(f llm.Finish, calls int) llm.Finish {
	switch {
	case calls == 0 && f.Reason == llm.FinishToolCalls:
		return llm.Finish{Reason: llm.FinishStop}
	case calls > 0 && (f.Reason == llm.FinishStop || f.Reason == llm.FinishNone):
		return llm.Finish{Reason: llm.FinishToolCalls}
	}
	return f
}

// emit makes the current chunk buffer hold out, the bytes the client gets
// now, instead of chunk.
func (h *httpContext) emit(chunk, out []byte, size int) {
	if len(chunk) == size && memeq.Equal(chunk, out) {
		return
	}
	h.replaceResponse(out)
}

// emitAndRecycle is emit, then hands chunk and out back for reuse: the
// reader copied what it keeps of chunk, and the host has out.
func (h *httpContext) emitAndRecycle(chunk, out []byte, size int) {
	h.emit(chunk, out, size)
	proxywasm.RecycleBuffer(chunk)
	proxywasm.RecycleBuffer(out)
}

func (h *httpContext) replaceResponse(b []byte) {
	if err := proxywasm.ReplaceHttpResponseBody(b); err != nil {
		proxywasm.LogWarnf("chime: request %s: cannot replace the response body: %v", h.id(), err)
		return
	}
	h.setLength(len(b))
}

// setLength gives held headers (headersHeld) the content-length of the
// whole answer as it will leave.
func (h *httpContext) setLength(n int) {
	r := &h.resp
	if !r.headersHeld || r.reader != nil || r.hasLength && r.length == n {
		return // not held, or the length they carry is right
	}
	if err := proxywasm.ReplaceHttpResponseHeader("content-length", strconv.Itoa(n)); err != nil {
		proxywasm.LogDebugf("chime: request %s: set response content-length: %v", h.id(), err)
		return
	}
	r.length, r.hasLength = n, true
}
