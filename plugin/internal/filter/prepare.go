package filter

import (
	"time"

	"slices"
	"strings"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// serverTools maps the tool names a prepare answer may list to the specs
// the filter injects (the filter owns the schemas, llm/hostapi.go).
var serverTools = func() map[string]llm.ToolSpec {
	m := map[string]llm.ToolSpec{hostapi.ClockToolName: hostapi.ClockToolSpec()}
	for _, spec := range hostapi.TimerToolSpecs() {
		m[spec.Name] = spec
	}
	return m
}()

// renderedTools is serverTools rendered per protocol, once per VM: a
// schema is a few KB that rendering and validating per request would
// copy and scan again (docs/performance.md).
var renderedTools = func() map[llm.Protocol]map[string]llm.RenderedTool {
	out := map[llm.Protocol]map[string]llm.RenderedTool{}
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		out[p] = map[string]llm.RenderedTool{}
		for name, spec := range serverTools {
			rt, err := spec.Render(p)
			if err != nil {
				panic("chime: server tool " + name + ": " + err.Error()) // the filter's own schemas: a build error
			}
			out[p][name] = rt
		}
	}
	return out
}()

// prepare sends the prepare call and pauses the request until the answer.
// If the call cannot be sent, the request is finished at once.
func (h *httpContext) prepare(prep hostapi.PrepareRequest) proxywasm.Action {
	a := h.asked
	a.prep, a.built = prep, h.plugin.now()
	body, err := encodePrepare(prep)
	if err == nil {
		err = h.plugin.callHost(hostapi.PathPrepare, body, h.prepareTimeoutMs, h.onPrepareAnswer)
	}
	if err == nil {
		a.sentAt = h.plugin.now()
	}
	if err != nil {
		h.prepareSettled()
		return h.prepareFailed("dispatch prepare: " + err.Error())
	}
	return proxywasm.ActionPause
}

// onPrepareAnswer runs when the host answers, fails or times out. The
// call belongs to the plugin context, so the stream may be gone by now.
func (h *httpContext) onPrepareAnswer(numHeaders, bodySize, _ int) {
	h.prepareSettled()
	var ans hostapi.PrepareResponse
	failure := readAnswer(numHeaders, bodySize, &ans)
	if failure == "" {
		defer h.plugin.hostAnswered() // after this request's own outcome, if any
		a := h.asked
		h.plugin.prepareAnswered(h.plugin.now().Sub(a.sentAt).Milliseconds())
		h.plugin.learnNTP(ans.NTP)
		h.plugin.keptDelivered(a.prep.SessionID, a.prep.Kept, a.keptAll)
		h.plugin.learnQuiet(a.prep.SessionID, a.built, &ans)
	}
	gone := h.streamDone || h.responseStarted // nothing left to edit or resume
	switch {
	case failure == "" && ans.Reserved && gone:
		h.plugin.sendOutcome(hostapi.PathRollback, h.id()) // a reservation must not linger
	case failure != "" && !hostRefused(numHeaders) && !neverSent(numHeaders):
		// A prepare without a usable answer may still have reserved
		// reminders this request never carries: a timeout reaches the
		// filter as the proxy's 504, a host killed mid-call as a 503 or a
		// reset, and a host that serves the call late still reserves.
		// Undo that; for an id it has not seen the host keeps a tombstone,
		// so the late prepare reserves nothing (docs/failures.md).
		h.plugin.sendOutcome(hostapi.PathRollback, h.id())
	}
	if gone {
		return
	}
	if failure != "" {
		if h.prepareFailed(failure) == proxywasm.ActionContinue {
			h.resume()
		}
		return
	}
	h.mayContinue = ans.MayContinue
	h.wantTemplate = ans.Template
	h.routeFromAnswer(ans.Route, true)
	delivered := h.rewrite(&ans)
	if ans.Reserved {
		if delivered {
			h.reserved = true
		} else {
			h.plugin.sendOutcome(hostapi.PathRollback, h.id())
		}
	}
	h.resume()
}

// hostRefused reports whether the call answer being delivered is the
// host's own refusal (a non-2xx JSON error: busy, body too large, bad
// token), given before it reserved anything. The proxy's own answers (a
// timeout's 504, a reset's 503) are plain text, and a reset has no
// headers at all: after those the host may have reserved.
func hostRefused(numHeaders int) bool {
	if numHeaders == 0 {
		return false
	}
	if status := httpCallStatus(); status >= 200 && status <= 299 {
		return false
	}
	hs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		return false
	}
	for _, kv := range hs {
		if strings.EqualFold(kv[0], "content-type") {
			return strings.HasPrefix(strings.ToLower(strings.TrimSpace(kv[1])), "application/json")
		}
	}
	return false
}

// neverSent reports whether the call answer being delivered is the proxy
// saying the call never left it: no connection to the host could be made
// (the host is down), or the cluster's circuit breaker overflowed. Such a
// prepare reserved nothing, and a rollback for it would only add a write to
// a host that is just coming back.
func neverSent(numHeaders int) bool {
	if numHeaders == 0 || httpCallStatus() != 503 {
		return false
	}
	body, _ := proxywasm.GetHttpCallResponseBody(0, 512)
	b := string(body)
	return strings.Contains(b, "reset reason: connection failure") ||
		strings.Contains(b, "reset reason: remote connection failure") ||
		strings.Contains(b, "reset reason: overflow")
}

// prepareFailed finishes a request whose prepare call failed. With
// failOpen (docs/architecture.md) the tags are still stripped and the time tag still
// added from the filter's clock and last known NTP offset, and the
// request continues; otherwise it is answered with 503.
func (h *httpContext) prepareFailed(reason string) proxywasm.Action {
	p := h.plugin
	p.hostFailures.inc()
	proxywasm.LogDebugf("chime: request %s: host prepare failed: %s", h.id(), reason)
	if !p.cfg.FailOpen {
		p.doneWith(h.req)
		h.req = nil
		err := proxywasm.SendHttpResponse(503, [][2]string{{"content-type", "application/json"}},
			[]byte(`{"error":{"type":"chime_host_unavailable","message":"chime host unavailable"}}`), -1)
		if err != nil {
			proxywasm.LogWarnf("chime: request %s: send 503: %v", h.id(), err)
		}
		return proxywasm.ActionPause
	}
	p.failOpen.inc()
	p.noteFailOpen(reason)
	h.routeWithoutAnswer(h.sessionID)
	if h.asked != nil {
		p.keepDirectives(h.asked.prep) // the client gets its 200: the directives must not vanish
	}
	h.rewrite(nil)
	return proxywasm.ActionContinue
}

// rewrite applies docs/architecture.md#request-path's injections to the stripped body and
// replaces the buffered body: the server tools the host named, then the
// time tag, then the reminders. ans is nil when failing open. It reports
// whether the host's reminders (if any) reached the body.
func (h *httpContext) rewrite(ans *hostapi.PrepareResponse) (remindersDelivered bool) {
	return h.rewriteAt(ans, h.plugin.now())
}

// rewriteAt is rewrite with the time tag at now.
func (h *httpContext) rewriteAt(ans *hostapi.PrepareResponse, now time.Time) (remindersDelivered bool) {
	req, p := h.req, h.plugin
	h.req = nil
	if req == nil {
		return false
	}
	// The body is built into a buffer of its own (or is the one read):
	// nothing refers to req after this.
	defer p.doneWith(req)
	if ans != nil {
		h.injectTools(req, ans.Tools)
	}
	if p.cfg.TimeTag {
		p.tagBuf = p.tagger.Append(p.tagBuf[:0], now, h.zone, p.ntpOffsetMs)
		if err := req.AppendUserText(string(p.tagBuf)); err != nil {
			h.logFailed(proxywasm.LogDebugf, "time tag not added", err)
		}
	}
	remindersDelivered = true
	if ans != nil && ans.Reminders != "" {
		remindersDelivered = h.addReminders(req, ans.Reminders)
	}
	if !req.Edited() {
		h.sentBody = req.Bytes()
		return remindersDelivered
	}
	// Built in one pass into a reused buffer (no fresh megabyte per request).
	out := req.AppendBytes(proxywasm.BodyBuffer(req.Size()))
	h.bodyOut = out
	if err := proxywasm.ReplaceHttpRequestBody(out); err != nil {
		h.logFailed(proxywasm.LogWarnf, "cannot replace the body", err)
		return false
	}
	h.sentBody = out // the response path hands it to resolve
	return remindersDelivered
}

// addReminders appends the reminders the host delivers with a prepare
// answer (most answers have none: apart from rewriteAt, see bodyUnread).
//
//go:noinline
func (h *httpContext) addReminders(req *llm.Request, reminders string) bool {
	if err := req.AppendUserText(reminders); err != nil {
		h.logFailed(proxywasm.LogWarnf, "reminders not added", err)
		return false
	}
	return true
}

// logFailed logs a failed step of rewriteAt at logf's level, apart from
// it (see bodyUnread).
//
//go:noinline
func (h *httpContext) logFailed(logf func(string, ...any), what string, err error) {
	logf("chime: request %s: %s: %v", h.id(), what, err)
}

// injectTools adds the schemas of the server tools the host enabled and
// the plugin configuration allows, and remembers their names: only their
// calls are withheld from the client.
func (h *httpContext) injectTools(req *llm.Request, names []string) {
	plan := h.plugin.toolPlanFor(h.protocol, names)
	injected := plan.injected
	var err error
	switch {
	case len(plan.specs) == 0:
	// A plan holds only injectable tools; when the request's own tools
	// hide none of those (h.serverTools is then the shared injectableAll),
	// they hide none of the plan's either.
	case sameList(h.serverTools, h.plugin.injectableAll) ||
		!slices.ContainsFunc(plan.specs, func(t llm.RenderedTool) bool { return req.HasToolNamed(t.Name()) }):
		err = req.InjectSet(plan.set) // pieces joined once, for every request
	default:
		injected, err = h.injectUnhidden(req, plan)
	}
	if err != nil {
		proxywasm.LogDebugf("chime: request %s: tools not injected: %v", h.id(), err)
		return
	}
	h.serverTools = injected // the plan's when nothing was hidden: shared, never written
}

// injectUnhidden injects the plan's tools but those the client has a tool
// of the same name of: that tool's calls are the client's, and its
// schema stays. Rare, so the lists are built (and kept out of
// injectTools, whose code every request runs).
//
//go:noinline
func (h *httpContext) injectUnhidden(req *llm.Request, plan *toolPlan) (injected []string, err error) {
	var specs []llm.RenderedTool
	for _, spec := range plan.specs {
		if req.HasToolNamed(spec.Name()) {
			proxywasm.LogDebugf("chime: request %s: the client's own tool %q hides the server tool", h.id(), spec.Name())
			continue
		}
		specs = append(specs, spec)
		injected = append(injected, spec.Name())
	}
	slices.Sort(injected)
	if len(specs) > 0 {
		err = req.InjectRendered(specs...)
	}
	return injected, err
}

// sameList reports whether a and b are the same slice, not merely equal.
func sameList(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// toolPlan is what a host's list of tool names comes to for one protocol:
// the rendered tools that are known and enabled, in the host's order, and
// their names sorted (h.serverTools). A session's requests get the same
// list again and again, so the last plan per protocol is kept.
type toolPlan struct {
	names    []string
	specs    []llm.RenderedTool
	set      *llm.ToolSet // specs, for InjectSet
	injected []string     // never written: shared by the requests
}

func (p *pluginContext) toolPlanFor(proto llm.Protocol, names []string) *toolPlan {
	if proto < 0 || int(proto) >= len(p.toolPlans) {
		return &toolPlan{} // not a protocol a body is parsed as
	}
	if plan := p.toolPlans[proto]; plan != nil && slices.Equal(plan.names, names) {
		return plan
	}
	plan := p.newToolPlan(proto, names)
	p.toolPlans[proto] = plan
	return plan
}

// newToolPlan makes the plan of names, outside toolPlanFor: a request
// under load runs its code cold, and nearly every request finds the plan
// made (docs/performance.md).
//
//go:noinline
func (p *pluginContext) newToolPlan(proto llm.Protocol, names []string) *toolPlan {
	plan := &toolPlan{names: slices.Clone(names)}
	for _, name := range names {
		spec, ok := renderedTools[proto][name]
		switch {
		case !ok:
			proxywasm.LogDebugf("chime: host named unknown tool %q", name)
			continue
		case !slices.Contains(p.injectableAll, name): // cfg.ToolEnabled, precomputed
			continue
		}
		plan.specs = append(plan.specs, spec)
		plan.injected = append(plan.injected, name)
	}
	slices.Sort(plan.injected)
	if slices.Equal(plan.injected, p.injectableAll) {
		plan.injected = p.injectableAll
	}
	set, err := llm.NewToolSet(proto, plan.specs...)
	if err != nil { // the rendered tools are proto's: cannot happen
		proxywasm.LogWarnf("chime: tool set: %v", err)
		set, _ = llm.NewToolSet(proto)
	}
	plan.set = set
	return plan
}

func (h *httpContext) resume() {
	if err := proxywasm.ResumeHttpRequest(); err != nil {
		proxywasm.LogDebugf("chime: request %s: resume: %v", h.id(), err)
	}
}
