package host

import (
	"context"
	"time"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/internal/metrics"
	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/hostapi"
)

// maxResolveBody bounds a resolve request: it carries the whole captured
// request, and coding agents send 1–2 MB routinely.
const maxResolveBody = 64 << 20

// newResolver wires the response path (docs/architecture.md, docs/continuation.md, docs/continuation.md#holds) to the service.
// The order of the steps is docs/continuation.md's priority: server tools, then
// stopMessage, then a clock hold.
func (s *Service) newResolver() (*resolve.Resolver, error) {
	tools, err := resolve.NewToolStep(s, s.log)
	if err != nil {
		return nil, err
	}
	hold, err := resolve.NewHoldStep(resolve.HoldConfig{
		Reminders:      holdReminders{s},
		Max:            s.cfg.HoldMax,
		NoNonStreaming: s.cfg.DisableHoldNonStreaming,
		Count:          func(outcome string) { s.metrics.Holds.WithLabelValues(outcome).Inc() },
		Logger:         s.log,
	})
	if err != nil {
		return nil, err
	}
	return resolve.New(resolve.Config{
		Token:           s.cfg.Token,
		Steps:           []resolve.Step{tools, s.stops.Step(s.log), hold},
		Observer:        observer{s.metrics},
		Clock:           s.clock,
		Location:        s.location,
		MaxHops:         s.cfg.MaxHops,
		MaxDuration:     s.cfg.MaxChainDuration,
		Client:          s.cfg.FollowupClient,
		FollowupTimeout: s.cfg.FollowupTimeout,
		DefaultReentry:  s.cfg.Reentry,
		Finished:        s.chainFinished,
		Logger:          s.log,
	})
}

// Resolve runs the followup chain of one finished upstream turn (POST
// /v1/filter/resolve; docs/host-api.md). The error wraps
// resolve.ErrBadRequest for invalid input.
func (s *Service) Resolve(ctx context.Context, req hostapi.ResolveRequest) (hostapi.ResolveResponse, error) {
	return s.resolver.Resolve(ctx, req)
}

// Cancel stops the chain of requestID, now or when its resolve arrives
// within a few minutes (POST /v1/filter/cancel; docs/architecture.md#disconnect).
func (s *Service) Cancel(requestID string) { s.resolver.Cancel(requestID) }

// holdReminders adapts the clock engine for holds.
type holdReminders struct{ s *Service }

// NextDue is the earlier of the next reminder and the next background
// timer end (its notice, docs/timers.md#notices).
func (h holdReminders) NextDue(ctx context.Context, sid, requestID string) (time.Time, bool) {
	due, ok := time.Time{}, false
	if !h.s.cfg.DisableClock {
		due, ok = h.s.engine.NextDue(ctx, sid, requestID)
	}
	if at, tok := h.s.timers.NextNotice(sid); tok && (!ok || at.Before(due)) {
		due, ok = at, true
	}
	return due, ok
}

func (h holdReminders) Reserve(ctx context.Context, sid, requestID string, now time.Time) (string, error) {
	h.s.timers.CompleteDue(ctx, sid) // the scheduler may be a tick behind the hold
	rs, err := h.s.engine.Reserve(ctx, sid, requestID, now)
	if err != nil || len(rs) == 0 {
		return "", err
	}
	return h.render(requestID, rs), nil
}

func (h holdReminders) render(requestID string, rs []clock.Reminder) string {
	h.s.metrics.RemindersInjected.Add(float64(len(rs)))
	h.s.log.Info("reminders reserved for a hold", "request", requestID, "count", len(rs))
	return clock.RenderReminders(rs)
}

func (h holdReminders) Commit(ctx context.Context, requestID string) (int, error) {
	return h.s.Commit(ctx, requestID)
}

func (h holdReminders) Rollback(ctx context.Context, requestID string) (int, error) {
	return h.s.Rollback(ctx, requestID)
}

// observer feeds the chain counters of /metrics.
type observer struct{ m *metrics.Metrics }

func (o observer) Followup(kind string) { o.m.Followups.WithLabelValues(kind).Inc() }
func (o observer) FollowupFailed(kind, code string) {
	o.m.FollowupFailures.WithLabelValues(kind, code).Inc()
}
func (o observer) Chain(reason string) { o.m.Chains.WithLabelValues(reason).Inc() }
