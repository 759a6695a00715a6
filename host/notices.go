package host

import (
	"context"

	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/host/timers"
)

// timerNotice queues a background timer's completion for its session
// (docs/timers.md#notices): a notice in the clock engine, which reserves it
// into the session's next request or a hold like a due reminder. Its id
// derives from the timer's, so a completion replayed after a crash is one
// notice. It also wakes the session (docs/scheduler.md), whose client may
// be gone.
func (s *Service) timerNotice(ctx context.Context, n timers.Notice) error {
	if err := s.engine.AddNotice(ctx, n.SessionID, noticeID(n.TimerID), n.Text, n.At); err != nil {
		return err
	}
	s.metrics.TimerNotices.Inc()
	s.RequestWake(n.SessionID, scheduler.ReasonTimer)
	s.deliverAway(ctx, n.SessionID, "timer:"+n.TimerID, "timer", n.Text, n.At)
	s.log.Info("timer completed in the background; notice queued", "session", n.SessionID, "timer", n.TimerID)
	return nil
}

// noticeID is the clock-task id of a timer's completion notice.
func noticeID(timerID string) string { return "ntc_" + timerID }
