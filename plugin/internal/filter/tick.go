package filter

import (
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// OnTick refreshes the NTP offset from the host (docs/time.md#ntp), so a request
// that fails open still gets a corrected time tag. A host that is down is
// counted, logged at debug, and asked again next tick.
func (p *pluginContext) OnTick() {
	now := p.now()
	// One refresh at a time; a call the host never answered is given up
	// after two periods (the host always answers, by timeout at worst).
	if !p.stateCallAt.IsZero() && now.Sub(p.stateCallAt) < 2*tickPeriodMs*time.Millisecond {
		return
	}
	err := p.callHost(hostapi.PathState, nil, backgroundTimeoutMs, func(numHeaders, bodySize, _ int) {
		p.stateCallAt = time.Time{}
		var st hostapi.StateResponse
		if failure := readAnswer(numHeaders, bodySize, &st); failure != "" {
			p.hostFailures.inc()
			proxywasm.LogDebugf("chime: state refresh failed: %s", failure)
			return
		}
		p.learnNTP(st.NTP)
	})
	if err != nil {
		p.hostFailures.inc()
		proxywasm.LogDebugf("chime: cannot send state refresh: %v", err)
		return
	}
	p.stateCallAt = now
}
