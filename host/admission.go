package host

import (
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
