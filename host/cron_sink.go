package host

import (
	"context"
	"log/slog"

	"github.com/chimehq/chime/host/cron"
)

// cronSink is where firing cron jobs go (docs/cron.md). Until the
// scheduler (requestWake, the system event queue, isolated runs) is wired
// in, it is a placeholder that delivers nothing and logs at debug level:
// replace this file's body with the scheduler's adapter.
func (s *Service) cronSink() cron.Sink { return logCronSink{log: s.log} }

// logCronSink accepts every run and only logs it (without the job's text).
type logCronSink struct{ log *slog.Logger }

func (k logCronSink) EnqueueEvent(_ context.Context, sessionID, contextKey, _ string) error {
	k.log.Debug("cron: system event (no scheduler wired yet)", "session", sessionID, "contextKey", contextKey)
	return nil
}

func (k logCronSink) Wake(sessionID, reason string) {
	k.log.Debug("cron: wake (no scheduler wired yet)", "session", sessionID, "reason", reason)
}

func (k logCronSink) RunIsolated(_ context.Context, sessionID, jobID, _ string) error {
	k.log.Debug("cron: isolated run (no scheduler wired yet)", "session", cron.IsolatedSession(sessionID, jobID))
	return nil
}
