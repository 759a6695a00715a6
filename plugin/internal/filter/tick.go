package filter

import (
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// OnTick refreshes the NTP offset from the host (docs/time.md#ntp), so a request
// that fails open still gets a corrected time tag. A host that is down is
// counted, logged at debug, and asked again next tick.
// OnPluginDone sends the touches this root context has not sent (its VM
// replaced at start or after a fault, its configuration removed: else the
// host takes those sessions for idle since their previous touch) and
// finishes once the host answered, whatever the answer. It lets go of
// what one call cannot carry: the memos holding them serve the root
// contexts that stay.
func (p *pluginContext) OnPluginDone() bool {
	defer p.gen.dropTouches()
	return !p.flushTouches(func() { _ = proxywasm.PluginDone() })
}

func (p *pluginContext) OnTick() {
	now := p.now()
	p.reportFailOpen(now)
	p.flushTouches(nil)
	if p.cfg.SkipPrepare {
		p.startPoll() // skip.go: it brings the NTP view too
		return
	}
	// One refresh at a time; a call the host never answered is given up
	// after two periods (the host always answers, by timeout at worst).
	if !p.stateCallAt.IsZero() && now.Sub(p.stateCallAt) < 2*statePeriod {
		return
	}
	if !p.stateAnsweredAt.IsZero() && now.Sub(p.stateAnsweredAt) < statePeriod {
		return
	}
	err := p.callHost(hostapi.PathState, nil, backgroundTimeoutMs, func(numHeaders, bodySize, _ int) {
		p.stateCallAt, p.stateAnsweredAt = time.Time{}, p.now()
		var st hostapi.StateResponse
		if failure := readAnswer(numHeaders, bodySize, &st); failure != "" {
			p.hostFailures.inc()
			proxywasm.LogDebugf("chime: state refresh failed: %s", failure)
			return
		}
		p.learnNTP(st.NTP)
		p.hostAnswered()
	})
	if err != nil {
		p.hostFailures.inc()
		proxywasm.LogDebugf("chime: cannot send state refresh: %v", err)
		return
	}
	p.stateCallAt = now
}

// failOpenLogPeriod is how often fail-open is reported at info.
const failOpenLogPeriod = time.Minute

// noteFailOpen counts a request that failed open. The first one, and then
// at most one per failOpenLogPeriod, is logged at info with the count
// since the last line: a struggling host is visible without a log line
// per request (docs/failures.md).
func (p *pluginContext) noteFailOpen(reason string) {
	p.failOpens++
	p.failOpenReason = reason
	p.reportFailOpen(p.now())
}

// reportFailOpen logs the pending count once the period has passed (the
// tick flushes a count no later request would).
func (p *pluginContext) reportFailOpen(now time.Time) {
	if p.failOpens == 0 || (!p.failOpenLogged.IsZero() && now.Sub(p.failOpenLogged) < failOpenLogPeriod) {
		return
	}
	proxywasm.LogInfof("chime: %d request(s) failed open (host prepare failed; last: %s)", p.failOpens, p.failOpenReason)
	p.failOpens, p.failOpenLogged = 0, now
}
