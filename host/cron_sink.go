package host

import (
	"context"

	"github.com/chimehq/chime/host/cron"
	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/storage"
)

// cronSink is where firing cron jobs go (docs/cron.md#targets): target
// main queues the job's text as a system event and wakes the session
// through the scheduler; target isolated runs the model in a session of its
// own (RunIsolated, docs/scheduler.md).
func (s *Service) cronSink() cron.Sink { return serviceCronSink{s} }

type serviceCronSink struct{ s *Service }

func (k serviceCronSink) EnqueueEvent(ctx context.Context, sessionID, contextKey, text string) error {
	return k.s.EnqueueEvent(ctx, sessionID, storage.SystemEvent{ContextKey: contextKey, Text: text, Source: "cron"})
}

func (k serviceCronSink) Wake(sessionID, _ string) { k.s.RequestWake(sessionID, scheduler.ReasonCron) }

func (k serviceCronSink) RunIsolated(ctx context.Context, sessionID, jobID, text string) error {
	return k.s.RunIsolated(ctx, sessionID, jobID, text)
}
