package filter

// Load-scaled prepare timeout (docs/failures.md#overload). A burst of
// requests reaches the host as a burst of prepare calls, which the host
// answers in order, group-committed: the last of them waits for those
// before it, and the proxy itself, busy with the burst, is slow to send
// and deliver them. A fixed timeout fails that tail open although the
// host serves it; a timeout that grows with the requests this worker has
// waiting for their prepare lets it through, up to prepareTimeoutMaxMs,
// so a host that does not answer still costs a request no more than that.

// prepareCallsPerStep is how many requests waiting for their prepare
// (besides the one asking) add one more prepareTimeoutMs to the timeout
// (in proportion: 2 add half of it). 8 left a few requests at the
// start of a 1 000-request burst to fail open; 4 lets them all through
// (docs/failures.md#overload). A request waits from its headers on:
// in a burst the headers of many arrive before the first body.
const prepareCallsPerStep = 4

// awaitPrepare counts a request that will send a prepare call.
func (h *httpContext) awaitPrepare() {
	if !h.awaiting {
		h.awaiting = true
		h.plugin.awaitingPrepare++
	}
}

// prepareSettled uncounts it: its prepare was answered, failed or will
// not be sent, or the stream ended.
func (h *httpContext) prepareSettled() {
	if h.awaiting {
		h.awaiting = false
		h.plugin.awaitingPrepare--
	}
}

// answeredLatencyFactor: a call gets at least this many times the recent
// latency of answered prepare calls. When the proxy itself is the slow
// part, few calls are in flight but each takes long; the host answering
// them at all says more time serves them.
const answeredLatencyFactor = 3

// prepareTimeoutMs is the timeout of a prepare call sent now: the larger
// of prepareTimeoutMs × (1 + waiting/4) and 3 × the recent latency of
// answered calls, at most prepareTimeoutMaxMs (and never below
// prepareTimeoutMs). Calls that time out teach nothing: a host that does
// not answer gets no more time for it.
func (p *pluginContext) prepareTimeoutMs() int64 {
	base := p.cfg.PrepareTimeoutMs
	t := base + base*int64(max(p.awaitingPrepare-1, 0))/prepareCallsPerStep
	t = max(t, answeredLatencyFactor*p.prepareLatencyMs)
	return max(min(t, p.cfg.PrepareTimeoutMaxMs), base)
}

// prepareAnswered notes how long an answered prepare call took: a moving
// average over about the last four.
func (p *pluginContext) prepareAnswered(tookMs int64) {
	p.prepareLatencyMs += (max(tookMs, 0) - p.prepareLatencyMs) / 4
}
