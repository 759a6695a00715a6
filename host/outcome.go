package host

import (
	"context"
	"strings"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/internal/metrics"
	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/host/ui"
)

// The outcome of a request's reservation (docs/architecture.md#request-path, step 3;
// docs/clock-tool.md#reservation-commit-and-rollback/commit): the filter reports whether the response
// started to reach the client. Reminders are the only reserved injection
// so far; the clock engine keeps their reservations.

// Commit records delivery of requestID's reserved reminders (the response
// started to reach the client, docs/clock-tool.md). An unknown id commits nothing.
func (s *Service) Commit(ctx context.Context, requestID string) (int, error) {
	n, err := s.engine.Commit(ctx, requestID)
	if err == nil && n > 0 {
		s.metrics.Reservations.WithLabelValues(metrics.Committed).Inc()
		s.log.Info("reminders committed", "request", requestID, "count", n)
		s.events.Publish(ui.AllSessions)
	}
	return n, err
}

// Rollback releases requestID's reserved reminders (upstream failure or a
// reset before the response started, docs/clock-tool.md) so a later request gets them.
func (s *Service) Rollback(ctx context.Context, requestID string) (int, error) {
	n, err := s.engine.Rollback(ctx, requestID)
	if err == nil && n > 0 {
		s.metrics.Reservations.WithLabelValues(metrics.RolledBack).Inc()
		s.log.Info("reminders rolled back", "request", requestID, "count", n)
	}
	return n, err
}

// ownedByProcess: a reservation only this host process settles, a hold's
// followup or a wake run; the next process releases one left by a process
// that died at once (docs/clock-tool.md#reservation-commit-and-rollback).
func ownedByProcess(requestID string) bool {
	return strings.HasPrefix(requestID, clock.WakePrefix) || resolve.IsFollowupID(requestID)
}
