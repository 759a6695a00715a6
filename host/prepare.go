package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/route"
	"github.com/chimehq/chime/hostapi"
)

var errNoSession = errors.New("no session id on the request")

// MaxDirectivesPerRequest is hostapi.MaxDirectivesPerRequest (docs/failures.md).
const MaxDirectivesPerRequest = hostapi.MaxDirectivesPerRequest

// Prepare is the request-path call of docs/architecture.md: it touches the session,
// applies the directives in order, reserves the session's due reminders for
// req.RequestID and tells the filter what to inject. A failing directive is
// logged and skipped; Prepare itself never fails.
func (s *Service) Prepare(ctx context.Context, req hostapi.PrepareRequest) hostapi.PrepareResponse {
	now := s.now()
	ctx = clock.WithLocation(ctx, s.location(req.Timezone))
	ans := hostapi.PrepareResponse{NowMs: now.UnixMilli(), NTP: s.ntpInfo()}
	ans.Tools = s.tools.enabled()
	sid := req.SessionID
	if sid != "" {
		s.touches.Touch(sid, now.UnixMilli())
		s.touchDelivery(req) // a proxied request: deliveries go to session injection
		defer s.events.Publish(sid)
	}
	for _, k := range req.Kept { // kept while this host was unreachable: older, so first
		s.applyKept(ctx, sid, k, now)
	}
	if n := len(req.Directives) - MaxDirectivesPerRequest; n > 0 {
		s.metrics.DirectivesIgnored.Add(float64(n))
		s.log.Info("directives over the per-request cap ignored", "request", req.RequestID, "cap", MaxDirectivesPerRequest, "ignored", n)
		req.Directives = req.Directives[:MaxDirectivesPerRequest]
	}
	for i, d := range req.Directives {
		kind := directiveLabel(d.Kind)
		applied, err := s.applyOnce(ctx, sid, req, d, now)
		switch {
		case err != nil:
			s.metrics.DirectiveErrors.WithLabelValues(kind).Inc()
			// The error can quote directive text: debug only.
			s.log.Debug("directive skipped", "kind", kind, "index", i, "request", req.RequestID, "err", err)
		case !applied:
			// A resent or retried message: already applied, not an error.
			s.metrics.DirectiveDuplicates.WithLabelValues(kind).Inc()
			s.log.Debug("directive already applied", "kind", kind, "index", i, "position", d.Position, "request", req.RequestID)
		default:
			s.metrics.Directives.WithLabelValues(kind).Inc()
		}
	}
	if sid == "" {
		return ans
	}
	var pending bool
	// A background timer that ended a moment ago has its notice in place
	// before the reservation reads the session.
	s.timers.CompleteDue(ctx, sid)
	if late := s.pastDeadline(req); late > 0 {
		// The filter has given up and failed open; reserving now would
		// strand the reminders until the reservation expires.
		s.metrics.LatePrepares.Inc()
		s.log.Info("prepare after the filter's deadline; no reminders reserved", "request", req.RequestID, "late", late)
	} else if !s.cfg.DisableClock || !s.cfg.DisableTimers {
		var rs []clock.Reminder
		var err error
		rs, pending, err = s.engine.ReserveAndPending(ctx, sid, req.RequestID, now)
		switch {
		case errors.Is(err, clock.ErrNoRequestID):
			s.log.Debug("prepare without request id: no reminders reserved", "session", sid)
		case err != nil:
			s.log.Warn("reserving due reminders failed; none injected", "err", err)
		case len(rs) > 0:
			ans.Reminders = clock.RenderReminders(rs)
			ans.Reserved = true
			s.metrics.RemindersInjected.Add(float64(len(rs)))
			s.log.Info("reminders reserved", "request", req.RequestID, "count", len(rs))
		}
	}
	ans.MayContinue = pending || s.stops.Active(sid) || s.noticeWithin(sid, now, s.cfg.HoldMax+responseAllowance)
	var err error
	if ans.Route, err = route.Pinned(s.store, sid); err != nil {
		s.log.Warn("reading session record failed", "err", err)
	}
	ans.Template = s.wantsTemplate(sid)
	return ans
}

// deadlineSlack tolerates clock skew between the filter's clock and the
// host's; a rollback tombstone covers a prepare late by less.
const deadlineSlack = time.Second

// pastDeadline reports how late past the filter's deadline (plus slack)
// the prepare is being served, 0 when in time or without a deadline.
func (s *Service) pastDeadline(req hostapi.PrepareRequest) time.Duration {
	if req.DeadlineMs <= 0 {
		return 0
	}
	late := time.Duration(s.now().UnixMilli()-req.DeadlineMs)*time.Millisecond - deadlineSlack
	return max(late, 0)
}

// applyOnce applies d unless the session already applied the same
// directive at the same position (docs/directives.md#applied-once). It claims the
// directive's digest before applying it, so two copies of one request
// racing each other apply it once, and releases the claim when applying
// fails, so a later request may try again. It reports false, nil for a
// duplicate.
func (s *Service) applyOnce(ctx context.Context, sid string, req hostapi.PrepareRequest, d hostapi.HostDirective, now time.Time) (bool, error) {
	if sid == "" {
		return false, errNoSession
	}
	digest := directiveDigest(d, req.PreviousResponseID)
	claimed, err := s.store.ClaimDirective(sid, digest)
	if err != nil || !claimed {
		return false, err
	}
	if err := s.applyDirective(ctx, sid, req.RequestID, d, now); err != nil {
		if rerr := s.store.ReleaseDirective(sid, digest); rerr != nil {
			s.log.Warn("forgetting a failed directive failed; it will not be retried", "err", rerr)
		}
		return false, err
	}
	return true, nil
}

// directiveDigest identifies a directive at its position: SHA-256 over its
// canonical JSON form (kind, parsed arguments and position, in the field
// order of hostapi.HostDirective, so spacing inside the tag does not matter)
// and the Responses previous_response_id its position counts from.
func directiveDigest(d hostapi.HostDirective, previousResponseID string) string {
	canon, err := json.Marshal(d)
	if err != nil {
		panic(err) // a plain struct of strings and numbers
	}
	h := sha256.New()
	h.Write(canon)
	h.Write([]byte{0})
	h.Write([]byte(previousResponseID))
	return hex.EncodeToString(h.Sum(nil))
}

// applyDirective hands one directive to the feature that owns its kind
// (docs/directives.md); every write is synchronous (docs/clock-tool.md#persistence).
func (s *Service) applyDirective(ctx context.Context, sid, requestID string, d hostapi.HostDirective, now time.Time) error {
	if sid == "" {
		return errNoSession
	}
	switch d.Kind {
	case hostapi.DirectiveStopMessage, hostapi.DirectiveStopMessageClear:
		return s.stops.ApplyDirective(sid, d, now)
	case hostapi.DirectiveClock, hostapi.DirectiveClockClear:
		err := s.engine.ApplyDirective(ctx, sid, requestID, d)
		s.noteTasksChanged(ctx, sid)
		return err
	case hostapi.DirectiveRoute, hostapi.DirectiveRouteClear:
		return route.ApplyDirective(s.store, sid, d, now)
	case hostapi.DirectiveHeartbeat, hostapi.DirectiveHeartbeatOff:
		return s.applyHeartbeatDirective(sid, d)
	}
	return fmt.Errorf("unknown directive kind %q", d.Kind)
}

// directiveLabel bounds the metric label set to the known kinds.
func directiveLabel(kind string) string {
	switch kind {
	case hostapi.DirectiveStopMessage, hostapi.DirectiveStopMessageClear, hostapi.DirectiveClock, hostapi.DirectiveClockClear,
		hostapi.DirectiveRoute, hostapi.DirectiveRouteClear, hostapi.DirectiveHeartbeat, hostapi.DirectiveHeartbeatOff:
		return kind
	}
	return "unknown"
}

// noticeWithin reports whether a background timer of the session ends
// within d: its notice can still continue this request's response.
func (s *Service) noticeWithin(sid string, now time.Time, d time.Duration) bool {
	at, ok := s.timers.NextNotice(sid)
	return ok && !at.After(now.Add(d))
}
