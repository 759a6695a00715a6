package host

import (
	"context"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// applyKept applies the directives of an earlier request that the filter
// kept while the host was unreachable (docs/failures.md, issue 17), as that
// request: its id and previous_response_id, so the applied-once digest is
// the one the original prepare would have claimed, and a directive that
// did reach the host then is not applied twice.
func (s *Service) applyKept(ctx context.Context, sid string, k hostapi.KeptDirectives, now time.Time, deadlineMs int64) {
	req := hostapi.PrepareRequest{RequestID: k.RequestID, SessionID: sid, PreviousResponseID: k.PreviousResponseID, DeadlineMs: deadlineMs}
	applied := 0
	for i, r := range s.applyDirectives(ctx, sid, req, k.Directives, now) {
		kind := directiveLabel(k.Directives[i].Kind)
		switch {
		case r.err != nil:
			s.metrics.DirectiveErrors.WithLabelValues(kind).Inc()
			s.log.Debug("kept directive skipped", "kind", kind, "index", i, "request", k.RequestID, "err", r.err)
		case r.duplicate:
			s.metrics.DirectiveDuplicates.WithLabelValues(kind).Inc()
		default:
			applied++
			s.metrics.Directives.WithLabelValues(kind).Inc()
		}
	}
	s.log.Info("directives kept by the filter while the host was unreachable applied",
		"request", k.RequestID, "applied", applied, "of", len(k.Directives), "keptMsAgo", max(now.UnixMilli()-k.KeptAtMs, 0))
}
