package filter

import (
	"strconv"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// OnHttpResponseHeaders is docs/architecture.md#request-path step 3: the response
// starts to reach the client, so a reservation is committed on 2xx and
// rolled back otherwise. Only a response that carried reminders waits for
// the host's acknowledgement (bounded by prepareTimeoutMs): otherwise the
// client's next request could reach prepare before the outcome and miss a
// rolled-back reminder. Then the response path (response.go) decides
// whether to watch the body.
func (h *httpContext) OnHttpResponseHeaders(_ int, endOfStream bool) proxywasm.Action {
	if !h.handled {
		return proxywasm.ActionContinue
	}
	h.responseStarted = true
	status, _ := proxywasm.GetHttpResponseHeader(":status")
	n, err := strconv.Atoi(status)
	ok := err == nil && n >= 200 && n <= 299
	if h.reserved && !h.outcomeSent {
		path := hostapi.PathRollback
		if ok {
			path = hostapi.PathCommit
		}
		h.outcomeSent = true
		h.startResponse(ok, endOfStream)
		if h.plugin.reportOutcome(path, h.requestID, h.plugin.cfg.PrepareTimeoutMs, func() {
			if !h.streamDone {
				_ = proxywasm.ResumeHttpResponse()
			}
		}) {
			return proxywasm.ActionPause
		}
		return proxywasm.ActionContinue
	}
	h.startResponse(ok, endOfStream)
	return proxywasm.ActionContinue
}

// OnHttpStreamDone rolls back a reservation whose response never started:
// an upstream reset or a client that went away (docs/clock-tool.md). A resolve still
// pending means the client went away mid-hold: the host is told to cancel.
func (h *httpContext) OnHttpStreamDone() {
	h.streamDone = true
	if h.reserved && !h.outcomeSent {
		h.outcomeSent = true
		h.plugin.sendOutcome(hostapi.PathRollback, h.requestID)
	}
	h.cancelPendingResolve()
	h.recycleBodies()
}

// recycleBodies hands the request body buffers back for the next request
// once nothing of this stream can read them: the response is over, a
// resolve or template took its copy of sentBody when it was sent, and a
// late prepare answer finds the stream gone and edits nothing.
func (h *httpContext) recycleBodies() {
	h.req, h.sentBody = nil, nil
	for _, b := range [][]byte{h.bodyIn, h.bodyOut} {
		if b != nil {
			proxywasm.RecycleBuffer(b)
		}
	}
	h.bodyIn, h.bodyOut = nil, nil
}

// sendOutcome reports a reservation's outcome (hostapi.PathCommit,
// hostapi.PathRollback) or a cancel, fire and forget.
func (p *pluginContext) sendOutcome(path, requestID string) {
	p.reportOutcome(path, requestID, backgroundTimeoutMs, nil)
}

// reportOutcome sends path for requestID; failures are logged and counted.
// done, if not nil, runs when the host answered or the call failed. It
// reports whether the call was dispatched (so done will run).
func (p *pluginContext) reportOutcome(path, requestID string, timeoutMs int64, done func()) bool {
	body := encodeOutcome(requestID)
	err := p.callHost(path, body, timeoutMs, func(numHeaders, bodySize, _ int) {
		if failure := readAnswer(numHeaders, bodySize, nil); failure != "" {
			p.hostFailures.inc()
			proxywasm.LogWarnf("chime: request %s: %s failed: %s", requestID, path, failure)
		}
		if done != nil {
			done()
		}
	})
	if err != nil {
		p.hostFailures.inc()
		proxywasm.LogWarnf("chime: request %s: cannot send %s: %v", requestID, path, err)
		return false
	}
	return true
}
