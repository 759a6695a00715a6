package filter

import (
	"slices"
	"time"

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
	// One read of the map and one pass over it: four headers matter.
	headers, _ := proxywasm.GetHttpResponseHeaders()
	rh := readResponseHeaders(headers)
	ok := is2xx(rh.status)
	if h.reserved && !h.outcomeSent {
		path := hostapi.PathRollback
		if ok {
			path = hostapi.PathCommit
		}
		h.outcomeSent = true
		h.startResponse(&rh, ok, endOfStream, false)
		if h.plugin.reportOutcome(path, h.id(), h.plugin.cfg.PrepareTimeoutMs, func() {
			h.outcomePending = false
			if !h.streamDone {
				_ = proxywasm.ResumeHttpResponse()
			}
		}) {
			h.outcomePending = true
			return proxywasm.ActionPause
		}
		return proxywasm.ActionContinue
	}
	h.startResponse(&rh, ok, endOfStream, h.plugin.cfg.AllowOnHeadersStopIteration)
	if h.resp.mode == respJSON && h.plugin.cfg.AllowOnHeadersStopIteration {
		// The answer is buffered to its end before a byte of it goes on:
		// its headers wait for it too, and leave with its length
		// (setLength) instead of a chunked body.
		h.resp.headersHeld = true
		return proxywasm.ActionPause
	}
	return proxywasm.ActionContinue
}

// is2xx reports whether an HTTP status (":status") is 200 to 299.
func is2xx(status string) bool {
	return len(status) == 3 && status[0] == '2' && isDigit(status[1]) && isDigit(status[2])
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// OnHttpStreamDone rolls back a reservation whose response never started:
// an upstream reset or a client that went away (docs/clock-tool.md). A resolve still
// pending means the client went away mid-hold: the host is told to cancel.
func (h *httpContext) OnHttpStreamDone() {
	h.streamDone = true
	h.prepareSettled()
	if h.reserved && !h.outcomeSent {
		h.outcomeSent = true
		h.plugin.sendOutcome(hostapi.PathRollback, h.id())
	}
	h.cancelPendingResolve()
	h.recycleBodies()
}

// recycleBodies hands the request body buffers back for the next request
// once nothing of this stream can read them: the response is over, a
// resolve or template took its copy of sentBody when it was sent, and a
// late prepare answer finds the stream gone and edits nothing.
func (h *httpContext) recycleBodies() {
	h.plugin.doneWith(h.req) // a prepare still pending edits nothing now
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

// reportOutcome sends path for requestID; failures are logged and counted,
// and an outcome the host did not take is kept to be sent again (keepUnsent).
// done, if not nil, runs when the host answered or the call failed. It
// reports whether the call was dispatched (so done will run).
func (p *pluginContext) reportOutcome(path, requestID string, timeoutMs int64, done func()) bool {
	return p.sendOutcomeAt(path, requestID, p.now(), timeoutMs, done)
}

// sendOutcomeAt is reportOutcome for an outcome first sent at first.
func (p *pluginContext) sendOutcomeAt(path, requestID string, first time.Time, timeoutMs int64, done func()) bool {
	body := encodeOutcome(requestID)
	err := p.callHost(path, body, timeoutMs, func(numHeaders, bodySize, _ int) {
		failure := readAnswer(numHeaders, bodySize, nil)
		if failure != "" {
			p.hostFailures.inc()
			proxywasm.LogWarnf("chime: request %s: %s failed: %s", requestID, path, failure)
			if !hostRefused(numHeaders) {
				p.keepUnsent(unsentOutcome{path: path, requestID: requestID, first: first})
			}
		}
		if done != nil {
			done()
		}
		if failure == "" {
			p.hostAnswered()
		}
	})
	if err != nil {
		p.hostFailures.inc()
		proxywasm.LogWarnf("chime: request %s: cannot send %s: %v", requestID, path, err)
		p.keepUnsent(unsentOutcome{path: path, requestID: requestID, first: first})
		return false
	}
	return true
}

// An outcome the host did not take (it was down, restarting or stalled)
// would leave its reservation to the expiry: a reminder the request never
// carried waits, and one it carried is injected again. The filter keeps
// such outcomes (bounded, per VM) and sends them again as soon as the host
// answers a call; commit and rollback are idempotent, and touch only tasks
// still reserved by that id (docs/failures.md).
const (
	maxUnsentOutcomes = 1024
	// maxUnsentAge: past the longest reservation expiry an outcome no
	// longer holds anything back.
	maxUnsentAge = 2 * time.Minute
	// MetricOutcomesResent counts outcomes sent again once the host
	// answered.
	MetricOutcomesResent = "chime_outcomes_resent_total"
)

type unsentOutcome struct {
	path, requestID string
	first           time.Time // when it was first sent
}

func (p *pluginContext) keepUnsent(o unsentOutcome) {
	if p.now().Sub(o.first) > maxUnsentAge {
		p.unsentDropped++
		return
	}
	if len(p.unsent) >= maxUnsentOutcomes {
		p.unsent = p.unsent[1:]
		p.unsentDropped++
	}
	p.unsent = append(p.unsent, o)
}

// resendBatch bounds the resent outcomes in flight: a host that has just
// restarted gets them a few at a time, each answer sending the next.
const resendBatch = 16

// hostAnswered runs when the host answered a call: what it missed is sent
// again, resendBatch at a time.
func (p *pluginContext) hostAnswered() {
	now := p.now()
	p.unsent = slices.DeleteFunc(p.unsent, func(o unsentOutcome) bool {
		old := now.Sub(o.first) > maxUnsentAge
		if old {
			p.unsentDropped++
		}
		return old
	})
	if p.unsentDropped > 0 {
		proxywasm.LogInfof("chime: %d commit/rollback call(s) could not be kept for the host (over %d waiting, or older than %v); their reservations expire on the host",
			p.unsentDropped, maxUnsentOutcomes, maxUnsentAge)
		p.unsentDropped = 0
	}
	for len(p.unsent) > 0 && p.resending < resendBatch {
		o := p.unsent[0]
		p.unsent = p.unsent[1:]
		p.outcomesRetry.inc()
		p.resending++
		if !p.sendOutcomeAt(o.path, o.requestID, o.first, backgroundTimeoutMs, func() { p.resending-- }) {
			p.resending--
			return // kept again; the next answer tries
		}
	}
	if len(p.unsent) == 0 {
		p.unsent = nil // let the backing array go
	}
}
