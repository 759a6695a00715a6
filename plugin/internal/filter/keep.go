package filter

import (
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// Directives accepted while the host is unreachable (docs/failures.md, issue 17).
// The request fails open and gets its 200, and its tags are stripped, so
// without the host the directive would vanish. The filter keeps it in
// proxy shared data (visible to every worker's VM), under the session, and
// sends it with that session's next prepare that the host answers; the
// host applies it as the original request, so a copy that did reach the
// host is not applied twice. What cannot be kept (no session, a bound
// reached, no shared data, too old) is logged at info and counted by kind.
const (
	keptKeyPrefix = "chime.kept.s."
	// keptCountKey holds how many sessions have kept directives, to bound
	// the shared data a flood of sessions can fill while the host is down.
	keptCountKey      = "chime.kept.count"
	maxKeptSessions   = 256
	maxKeptPerSession = 32
	maxKeptSessionLen = 256
	// maxKeptAgeMs drops what waited too long: a stopMessage or route
	// meant for an hour-old conversation state is no longer what the user
	// wants applied silently.
	maxKeptAgeMs = 60 * 60 * 1000
	casRetries   = 4
)

// directiveKindsDropped names the per-kind drop counters.
var directiveKindsDropped = []string{
	hostapi.DirectiveStopMessage, hostapi.DirectiveStopMessageClear,
	hostapi.DirectiveClock, hostapi.DirectiveClockClear,
	hostapi.DirectiveRoute, hostapi.DirectiveRouteClear,
	hostapi.DirectiveHeartbeat, hostapi.DirectiveHeartbeatOff,
}

// MetricDirectivesKept counts directives kept for a later prepare;
// MetricDirectivesDroppedPrefix + kind (":" as "_") + "_total" those lost.
const (
	MetricDirectivesKept          = "chime_directives_kept_total"
	MetricDirectivesDroppedPrefix = "chime_directives_dropped_"
)

func droppedMetricName(kind string) string {
	return MetricDirectivesDroppedPrefix + strings.ToLower(strings.ReplaceAll(kind, ":", "_")) + "_total"
}

// keptCounters are defined at plugin start.
type keptCounters struct {
	kept    counter
	dropped map[string]counter
}

func defineKeptCounters() keptCounters {
	k := keptCounters{kept: defineCounter(MetricDirectivesKept), dropped: map[string]counter{}}
	for _, kind := range directiveKindsDropped {
		k.dropped[kind] = defineCounter(droppedMetricName(kind))
	}
	return k
}

// dropDirectives logs and counts directives that will never reach the host.
func (p *pluginContext) dropDirectives(requestID string, ds []hostapi.HostDirective, why string) {
	kinds := make([]string, 0, len(ds))
	for _, d := range ds {
		kinds = append(kinds, d.Kind)
		p.keptMetrics.dropped[d.Kind].inc() // unknown kind: the zero counter ignores it
	}
	proxywasm.LogInfof("chime: request %s: %d directive(s) lost while the host is unreachable (%s): %s",
		requestID, len(ds), why, strings.Join(kinds, ", "))
}

func keptKey(sid string) string { return sessionKey(keyKept, sid) }

// loadKept reads a session's kept directives and the CAS token to replace
// them with.
func loadKept(sid string) ([]hostapi.KeptDirectives, uint32, error) {
	raw, cas, err := proxywasm.GetSharedData(keptKey(sid))
	if errors.Is(err, proxywasm.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil || len(raw) == 0 {
		return nil, cas, err
	}
	var ks []hostapi.KeptDirectives
	if err := json.Unmarshal(raw, &ks); err != nil {
		return nil, cas, nil // unreadable: overwritten by the next store
	}
	return ks, cas, nil
}

func storeKept(sid string, ks []hostapi.KeptDirectives, cas uint32) error {
	var raw []byte
	if len(ks) > 0 {
		var err error
		if raw, err = json.Marshal(ks); err != nil {
			return err
		}
	}
	return proxywasm.SetSharedData(keptKey(sid), raw, cas) // empty = cleared (no delete in the ABI)
}

// addKeptSessions moves the count of sessions with kept directives by d,
// refusing to pass maxKeptSessions.
func addKeptSessions(d int) bool {
	for range casRetries {
		raw, cas, err := proxywasm.GetSharedData(keptCountKey)
		if err != nil && !errors.Is(err, proxywasm.ErrNotFound) {
			return false
		}
		n, _ := strconv.Atoi(string(raw))
		if d > 0 && n+d > maxKeptSessions {
			return false
		}
		n = max(n+d, 0)
		if proxywasm.SetSharedData(keptCountKey, []byte(strconv.Itoa(n)), cas) == nil {
			return true
		}
	}
	return false
}

// keepDirectives keeps prep's directives for the session's next prepare.
func (p *pluginContext) keepDirectives(prep hostapi.PrepareRequest) {
	if len(prep.Directives) == 0 {
		return
	}
	sid := prep.SessionID
	switch {
	case sid == "":
		p.dropDirectives(prep.RequestID, prep.Directives, "no session id to keep them under")
		return
	case len(sid) > maxKeptSessionLen:
		p.dropDirectives(prep.RequestID, prep.Directives, "session id too long to key them by")
		return
	}
	batch := hostapi.KeptDirectives{RequestID: prep.RequestID, PreviousResponseID: prep.PreviousResponseID,
		Directives: prep.Directives, KeptAtMs: p.now().UnixMilli()}
	for range casRetries {
		ks, cas, err := loadKept(sid)
		if err != nil {
			p.dropDirectives(prep.RequestID, prep.Directives, "no proxy shared data: "+err.Error())
			return
		}
		n := len(prep.Directives)
		for _, k := range ks {
			n += len(k.Directives)
		}
		if n > maxKeptPerSession {
			p.dropDirectives(prep.RequestID, prep.Directives, "the session already has the most directives kept")
			return
		}
		if len(ks) == 0 && !addKeptSessions(1) {
			p.dropDirectives(prep.RequestID, prep.Directives, "too many sessions have directives kept")
			return
		}
		err = storeKept(sid, append(ks, batch), cas)
		if err == nil {
			endQuiet(sid) // its next request must ask the host (storeQuiet)
			p.keptMetrics.kept.add(len(prep.Directives))
			proxywasm.LogInfof("chime: request %s: host unreachable; %d directive(s) kept for the session's next request", prep.RequestID, len(prep.Directives))
			return
		}
		if len(ks) == 0 {
			addKeptSessions(-1)
		}
	}
	p.dropDirectives(prep.RequestID, prep.Directives, "shared data kept changing under concurrent requests")
}

// hasKept reports whether session sid has directives kept.
func hasKept(sid string) bool {
	if sid == "" || len(sid) > maxKeptSessionLen {
		return false
	}
	ks, _, err := loadKept(sid)
	return err == nil && len(ks) > 0
}

// keptFor returns the session's kept directives: fresh, to send with
// the prepare, and all, to clear once the host answered (the stale ones
// are reported then).
func (p *pluginContext) keptFor(sid string) (fresh, all []hostapi.KeptDirectives) {
	if sid == "" || len(sid) > maxKeptSessionLen {
		return nil, nil
	}
	all, _, err := loadKept(sid)
	if err != nil || len(all) == 0 {
		return nil, nil
	}
	now := p.now().UnixMilli()
	for _, k := range all {
		if now-k.KeptAtMs <= maxKeptAgeMs {
			fresh = append(fresh, k)
		}
	}
	return fresh, all
}

// keptDelivered clears what the host has now received and reports the
// batches that were too old to send.
func (p *pluginContext) keptDelivered(sid string, fresh, all []hostapi.KeptDirectives) {
	if len(all) == 0 {
		return
	}
	for _, k := range all {
		if !slices.ContainsFunc(fresh, func(f hostapi.KeptDirectives) bool { return f.RequestID == k.RequestID }) {
			p.dropDirectives(k.RequestID, k.Directives, "kept for over an hour")
		}
	}
	p.clearKept(sid, all)
}

// clearKept removes the batches the host has now received.
func (p *pluginContext) clearKept(sid string, sent []hostapi.KeptDirectives) {
	for range casRetries {
		ks, cas, err := loadKept(sid)
		if err != nil || len(ks) == 0 {
			return
		}
		left := slices.DeleteFunc(slices.Clone(ks), func(k hostapi.KeptDirectives) bool {
			return slices.ContainsFunc(sent, func(s hostapi.KeptDirectives) bool { return s.RequestID == k.RequestID })
		})
		if len(left) == len(ks) {
			return
		}
		if storeKept(sid, left, cas) == nil {
			if len(left) == 0 {
				addKeptSessions(-1)
			}
			return
		}
	}
}
