package filter

import (
	"encoding/json"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// hostNow is the host's clock as far as the filter knows it: the wall
// clock with the last NTP offset, as the host signs followup markers.
func (p *pluginContext) hostNow() time.Time {
	return p.now().Add(time.Duration(p.ntpOffsetMs) * time.Millisecond)
}

// acceptFollowup holds a followup whose marker verified until the host
// accepts the marker, which it does once: a captured marker cannot be
// replayed to skip the filter (docs/failures.md). The request then passes
// untouched.
func (h *httpContext) acceptFollowup(id, marker string) proxywasm.Action {
	p := h.plugin
	body, _ := json.Marshal(hostapi.FollowupRequest{Marker: marker}) // a struct of one string
	h.followupPending = true
	err := p.callHost(hostapi.PathFollowup, body, p.cfg.PrepareTimeoutMs, func(numHeaders, bodySize, _ int) {
		h.onFollowupAnswer(id, numHeaders, bodySize)
	})
	if err != nil {
		h.followupPending = false
		p.hostFailures.inc()
		return h.followupUnchecked(id, "dispatch: "+err.Error())
	}
	return proxywasm.ActionPause
}

func (h *httpContext) onFollowupAnswer(id string, numHeaders, bodySize int) {
	h.followupPending = false
	failure := readAnswer(numHeaders, bodySize, nil)
	status := 0
	if numHeaders != 0 {
		status = httpCallStatus()
	}
	if h.streamDone {
		return
	}
	switch {
	case failure == "":
		proxywasm.LogDebugf("chime: followup of %s passes untouched", id)
		h.resume()
	case status == 403:
		proxywasm.LogWarnf("chime: followup marker of %s refused by the host (already used or expired); request refused", id)
		err := proxywasm.SendHttpResponse(403, [][2]string{{"content-type", "application/json"}},
			[]byte(`{"error":{"type":"chime_followup_refused","message":"chime followup marker already used or expired"}}`), -1)
		if err != nil {
			proxywasm.LogWarnf("chime: followup of %s: send 403: %v", id, err)
		}
	default:
		h.plugin.hostFailures.inc()
		if h.followupUnchecked(id, failure) == proxywasm.ActionContinue {
			h.resume()
		}
	}
}

// followupUnchecked decides for a followup whose marker verified but the
// host could not be asked: with failOpen it passes (the marker is genuine
// and minutes old at most), otherwise it gets 503 as a prepare failure
// would.
func (h *httpContext) followupUnchecked(id, reason string) proxywasm.Action {
	proxywasm.LogDebugf("chime: followup of %s: host did not answer the marker check: %s", id, reason)
	if h.plugin.cfg.FailOpen {
		return proxywasm.ActionContinue
	}
	err := proxywasm.SendHttpResponse(503, [][2]string{{"content-type", "application/json"}},
		[]byte(`{"error":{"type":"chime_host_unavailable","message":"chime host unavailable"}}`), -1)
	if err != nil {
		proxywasm.LogWarnf("chime: followup of %s: send 503: %v", id, err)
	}
	return proxywasm.ActionPause
}
