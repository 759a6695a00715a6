package host

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/delivery"
	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/storage"
)

// A session that only speaks MCP (docs/host-api.md#mcp) sends no proxied
// request: there is no template to wake the model from, and no next
// request for a reminder to ride on. Its due reminders go out as they
// are: through the delivery queue (never the session connector), and as
// an MCP log notification on its open connection.

// noteMCPSession remembers the session's latest MCP connection; a first
// call arms its task alarm.
func (s *Service) noteMCPSession(sid string, ss *mcp.ServerSession) {
	if sid == "" || ss == nil {
		return
	}
	s.wake.mu.Lock()
	first := s.wake.mcp[sid] == nil
	s.wake.mcp[sid] = ss
	s.wake.mu.Unlock()
	if first {
		s.noteTasksChanged(context.Background(), sid)
	}
}

func (s *Service) mcpSession(sid string) *mcp.ServerSession {
	s.wake.mu.Lock()
	defer s.wake.mu.Unlock()
	return s.wake.mcp[sid]
}

// deliverDueToMCP delivers an MCP session's due reminders.
func (s *Service) deliverDueToMCP(ctx context.Context, sid string, reason scheduler.Reason, start time.Time) scheduler.Outcome {
	runID, _ := s.nextRunID(sid)
	rs, err := s.engine.Reserve(ctx, sid, runID, start)
	if err != nil {
		s.log.Warn("reserving an MCP session's reminders failed", "session", sid, "err", err)
		return scheduler.Outcome{Failed: true}
	}
	if len(rs) == 0 {
		s.noteTasksChanged(ctx, sid)
		return scheduler.Outcome{}
	}
	text := clock.RenderReminders(rs)
	rec := storage.WakeRun{ID: runID, Reason: string(reason), StartedAt: start.UnixMilli(), Reminders: len(rs), Status: RunSent,
		Why: "an MCP session: its reminders were delivered as they were"}
	if err := s.Deliver(ctx, delivery.Item{Session: sid, RunID: runID, Reason: string(reason), Text: text, At: start, NotVia: delivery.Session}); err != nil {
		if _, rerr := s.Rollback(ctx, runID); rerr != nil {
			s.log.Warn("rolling back an MCP session's reminders failed", "session", sid, "err", rerr)
		}
		rec.Status, rec.Error = RunFailed, "delivery: "+err.Error()
		s.recordRun(sid, rec)
		return scheduler.Outcome{Failed: true}
	}
	if _, err := s.Commit(ctx, runID); err != nil {
		s.log.Warn("committing an MCP session's reminders failed", "session", sid, "err", err)
	}
	if ss := s.mcpSession(sid); ss != nil {
		// Only a client that asked for log messages gets one; the queue
		// has the text either way. MCP logging is deprecated (SEP-2577)
		// but still the one notification clients show; it stays while
		// the protocol keeps it.
		//lint:ignore SA1019 MCP logging is the notification clients show today (deprecated, still supported)
		if err := ss.Log(ctx, &mcp.LoggingMessageParams{Level: "notice", Logger: "chime", Data: text}); err != nil {
			s.log.Debug("MCP notification not sent", "session", sid, "err", err)
		}
	}
	rec.DurationMs = s.now().Sub(start).Milliseconds()
	s.recordRun(sid, rec)
	s.metrics.WakeRuns.WithLabelValues(string(reason), RunSent).Inc()
	s.noteTasksChanged(ctx, sid)
	return scheduler.Outcome{}
}
