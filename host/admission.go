package host

import (
	"context"
	"sync"
	"time"
)

// DefaultMaxConcurrentPrepares bounds the prepare calls the host works on
// at once (Config.MaxConcurrentPrepares; docs/failures.md).
const DefaultMaxConcurrentPrepares = 64

// periodicLog logs a line at most once per minute, with how many times it
// happened since the last line: overload must be visible without flooding.
type periodicLog struct {
	mu     sync.Mutex
	count  int
	logged time.Time
}

func (l *periodicLog) note(s *Service, msg string, args ...any) {
	l.mu.Lock()
	l.count++
	now := s.now()
	if !l.logged.IsZero() && now.Sub(l.logged) < time.Minute {
		l.mu.Unlock()
		return
	}
	n := l.count
	l.count, l.logged = 0, now
	l.mu.Unlock()
	s.log.Info(msg, append(args, "count", n)...)
}

// DefaultPrepareQueueWait is how long a prepare call waits at most for a
// free slot when MaxConcurrentPrepares are in flight
// (Config.PrepareQueueWait): the filter's default prepareTimeoutMaxMs.
// A call waits in arrival order while its caller waits: the filter's
// prepare timeout grows with its calls in flight, so a burst is served
// in order rather than shed, and a call whose caller gave up leaves the
// queue at once (docs/failures.md#overload).
const DefaultPrepareQueueWait = 5 * time.Second

// maxPrepareWaitersPerSlot bounds the calls waiting for a slot; past it
// a call is shed at once. A waiting call has not read its body yet, so it
// holds a goroutine and a connection buffer, no more.
const maxPrepareWaitersPerSlot = 16

// admitPrepare takes a prepare slot, waiting at most PrepareQueueWait
// (first come, first served) while the caller is still there. It reports
// false when the call must be shed; otherwise the caller frees the slot
// with releasePrepare.
func (s *Service) admitPrepare(ctx context.Context) bool {
	select {
	case s.prepareSlots <- struct{}{}:
		return true
	default:
	}
	if s.cfg.PrepareQueueWait <= 0 {
		return false
	}
	if n := s.prepareWaiting.Add(1); n > int64(maxPrepareWaitersPerSlot*cap(s.prepareSlots)) {
		s.prepareWaiting.Add(-1)
		return false
	}
	defer s.prepareWaiting.Add(-1)
	t := s.clock.NewTimer(s.cfg.PrepareQueueWait)
	defer t.Stop()
	select {
	case s.prepareSlots <- struct{}{}:
		return true
	case <-t.Chan():
		return false
	case <-ctx.Done():
		return false
	}
}

func (s *Service) releasePrepare() { <-s.prepareSlots }
