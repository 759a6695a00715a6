package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/delivery"
	"github.com/chimehq/chime/host/internal/directive"
	"github.com/chimehq/chime/host/route"
	"github.com/chimehq/chime/host/stopmessage"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
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
		defer s.events.Publish(sid)
	}
	for _, k := range req.Kept { // kept while this host was unreachable: older, so first
		s.applyKept(ctx, sid, k, now, req.DeadlineMs)
	}
	if n := len(req.Directives) - MaxDirectivesPerRequest; n > 0 {
		s.metrics.DirectivesIgnored.Add(float64(n))
		s.log.Info("directives over the per-request cap ignored", "request", req.RequestID, "cap", MaxDirectivesPerRequest, "ignored", n)
		req.Directives = req.Directives[:MaxDirectivesPerRequest]
	}
	if sid != "" {
		// A background timer that ended a moment ago has its notice in
		// place before the snapshot below reads the session (directives
		// do not touch timers).
		s.timers.CompleteDue(ctx, sid)
	}
	// One snapshot of what the answer needs, read in the directives'
	// transaction with the session's touch: a prepare waits for one
	// (group) commit, not one per step.
	var snap struct {
		tasks []storage.ClockTask
		stop  storage.StopMessage
		sess  storage.Session
	}
	var touched func()
	touch := !strings.HasPrefix(req.RequestID, "wake:")
	also := func(tx *storage.Tx) error {
		var err error
		if touch { // a proxied request: deliveries go to session injection
			if touched, err = s.delivery.TouchIn(tx, sid, delivery.Session, now.UnixMilli()); err != nil {
				return err
			}
		}
		if snap.tasks, err = tx.Tasks(sid); err != nil {
			return err
		}
		if snap.stop, _, err = tx.StopMessage(sid); err != nil {
			return err
		}
		snap.sess, _, err = tx.Session(sid)
		return err
	}
	results, serr := s.applyWith(ctx, sid, req, req.Directives, now, also)
	if serr != nil && sid != "" {
		// The transaction failed (storage, or past the deadline): touch
		// and read on their own.
		s.touchDelivery(req)
		touch, touched = false, nil
		serr = s.store.View(also)
	}
	if touched != nil {
		touched()
	}
	for i, r := range results {
		d := req.Directives[i]
		kind := directiveLabel(d.Kind)
		switch {
		case r.err != nil:
			s.metrics.DirectiveErrors.WithLabelValues(kind).Inc()
			// The error can quote directive text: debug only.
			s.log.Debug("directive skipped", "kind", kind, "index", i, "request", req.RequestID, "err", r.err)
		case r.duplicate:
			// A resent or retried message: already applied, not an error.
			s.metrics.DirectiveDuplicates.WithLabelValues(kind).Inc()
			s.log.Debug("directive already applied", "kind", kind, "index", i, "position", d.Position, "request", req.RequestID)
		default:
			s.metrics.Directives.WithLabelValues(kind).Inc()
		}
	}
	// Read before the state the answer reflects (skip.go).
	ans.Generation = s.gens.current()
	if sid == "" {
		ans.QuietMs = s.quietFor(sid, now, nil, &ans, true).Milliseconds()
		return ans
	}
	var pending bool
	late := s.pastDeadline(req)
	switch {
	case late > 0 || ctx.Err() != nil:
		// The filter has given up and failed open; reserving now would
		// strand the reminders until the reservation expires.
		s.metrics.LatePrepares.Inc()
		s.lateLog.note(s, "prepare after the filter's deadline; no reminders reserved", "request", req.RequestID, "late", late)
	case serr != nil:
		s.log.Warn("reading the session failed; no reminders injected", "err", serr)
	case !s.cfg.DisableClock || !s.cfg.DisableTimers:
		var rs []clock.Reminder
		var err error
		rs, pending, err = s.engine.ReserveAndPendingFrom(sid, req.RequestID, now, snap.tasks)
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
	ans.MayContinue = pending || stopmessage.IsActive(snap.stop) || s.noticeWithin(sid, now, s.cfg.HoldMax+responseAllowance)
	ans.Route = snap.sess.Route
	ans.Template = s.wantsTemplateGiven(sid, func() (bool, error) { return len(snap.tasks) > 0, serr })
	normal := late == 0 && ctx.Err() == nil && serr == nil
	ans.QuietMs = s.quietFor(sid, now, snap.tasks, &ans, normal).Milliseconds()
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

// directiveResult is what became of one directive of a request.
type directiveResult struct {
	duplicate bool  // applied before at its position: skipped
	err       error // not applied
}

// errPastDeadline aborts a prepare's directives when the filter has given
// up on the call (its deadline passed, or it went away): the filter failed
// open and keeps them for the session's next prepare.
var errPastDeadline = errors.New("the filter's deadline passed before the directives were applied; none applied (the filter keeps them for the session's next request)")

// applyDirectives applies the directives of one request atomically: every
// one of them, and the claims of their digests (docs/directives.md#applied-once),
// in one storage transaction, or none. A directive refused for its own
// content (directive.IsRejected) is skipped and not claimed, so a later
// copy is tried again; a duplicate is skipped. A storage failure, or the
// filter's deadline passing, undoes them all. What re-arms in-memory state
// (the scheduler) runs only after the commit. The result has one entry
// per directive.
func (s *Service) applyDirectives(ctx context.Context, sid string, req hostapi.PrepareRequest, ds []hostapi.HostDirective, now time.Time) []directiveResult {
	out, _ := s.applyWith(ctx, sid, req, ds, now, nil)
	return out
}

// applyWith is applyDirectives that also runs also (when not nil) in the
// same transaction, after the directives: it commits with them or not at
// all, and may run more than once. err is the transaction's failure.
func (s *Service) applyWith(ctx context.Context, sid string, req hostapi.PrepareRequest, ds []hostapi.HostDirective, now time.Time, also func(*storage.Tx) error) (_ []directiveResult, err error) {
	out := make([]directiveResult, len(ds))
	if sid == "" {
		for i := range out {
			out[i].err = errNoSession
		}
		return out, nil
	}
	if len(ds) == 0 && also == nil {
		return out, nil
	}
	var after []func()
	stage := func(tx *storage.Tx) error {
		clear(out)
		after = after[:0]
		claims, err := tx.DirectiveClaims(sid)
		if err != nil {
			return err
		}
		for i, d := range ds {
			if err := s.inTime(ctx, req); err != nil {
				return err
			}
			if s.stageFault != nil {
				if err := s.stageFault(i); err != nil {
					return err
				}
			}
			digest := directiveDigest(d, req.PreviousResponseID)
			if claims.Has(digest) {
				out[i].duplicate = true
				continue
			}
			hook, err := s.stageDirective(ctx, tx, sid, req.RequestID, d, now)
			if directive.IsRejected(err) {
				out[i].err = err
				continue
			}
			if err != nil {
				return err
			}
			claims.Claim(digest)
			if hook != nil {
				after = append(after, hook)
			}
		}
		if err := claims.Save(tx); err != nil {
			return err
		}
		if also != nil {
			if err := also(tx); err != nil {
				return err
			}
		}
		return s.inTime(ctx, req) // the last moment to give up cleanly
	}
	// Concurrent prepares share one transaction and one fsync
	// (storage.UpdateShared); each one's directives stay all or none.
	update := func() error { return s.store.UpdateShared(stage) }
	if slices.ContainsFunc(ds, func(d hostapi.HostDirective) bool {
		return d.Kind == hostapi.DirectiveClock || d.Kind == hostapi.DirectiveClockClear
	}) {
		// Clock directives read-modify-write the session's tasks: serialize
		// with the engine as its own writes are.
		update = func() error { return s.engine.Exclusive(func() error { return s.store.Update(stage) }) }
	}
	if err := update(); err != nil {
		if errors.Is(err, errPastDeadline) {
			s.lateLog.note(s, "prepare past the filter's deadline: its directives were not applied; the filter keeps them", "request", req.RequestID)
		} else {
			s.log.Warn("applying a request's directives failed; none applied", "request", req.RequestID, "directives", len(ds), "err", err)
		}
		for i := range out {
			if !out[i].duplicate && out[i].err == nil {
				out[i].err = err
			}
		}
		return out, err
	}
	for _, f := range after {
		f()
	}
	if len(after) > 0 {
		s.gens.bump() // in-memory state the hooks changed (skip.go)
	}
	return out, nil
}

// inTime fails with errPastDeadline once the filter no longer waits for
// the call.
func (s *Service) inTime(ctx context.Context, req hostapi.PrepareRequest) error {
	if ctx.Err() != nil || s.pastDeadline(req) > 0 {
		return errPastDeadline
	}
	return nil
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

// stageDirective hands one directive to the feature that owns its kind
// (docs/directives.md), to be written within tx; it returns what to run
// after the commit, if anything.
func (s *Service) stageDirective(ctx context.Context, tx *storage.Tx, sid, requestID string, d hostapi.HostDirective, now time.Time) (func(), error) {
	switch d.Kind {
	case hostapi.DirectiveStopMessage, hostapi.DirectiveStopMessageClear:
		return nil, stopmessage.Stage(tx, sid, d, now)
	case hostapi.DirectiveClock, hostapi.DirectiveClockClear:
		if err := s.engine.StageDirective(ctx, tx, sid, requestID, d); err != nil {
			return nil, err
		}
		return func() { s.noteTasksChanged(ctx, sid) }, nil
	case hostapi.DirectiveRoute, hostapi.DirectiveRouteClear:
		return nil, route.Stage(tx, sid, d, now)
	case hostapi.DirectiveHeartbeat, hostapi.DirectiveHeartbeatOff:
		return s.stageHeartbeatDirective(tx, sid, d)
	}
	return nil, directive.Rejectf("unknown directive kind %q", d.Kind)
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
