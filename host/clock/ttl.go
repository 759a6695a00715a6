package clock

import (
	"slices"
	"sync"
	"time"
)

// A reservation blocks a due reminder from other requests until the
// filter commits or rolls it back (docs/clock-tool.md#reservation-commit-and-rollback). When that answer never comes
// (the host stalled past the filter's deadline, a kill between reserve and
// answer, a lost callout) the reminder waits for the reservation to
// expire. The expiry is measured: twice the p99 of the reserve→outcome
// times the host has seen, within [MinReservationTTL, DefaultReservationTTL];
// InitialReservationTTL until there are ttlMinSamples of them.
const (
	MinReservationTTL     = 10 * time.Second
	InitialReservationTTL = 30 * time.Second
	ttlWindow             = 512
	ttlMinSamples         = 20
)

// ttlMeter keeps the last ttlWindow reserve→outcome durations.
type ttlMeter struct {
	mu      sync.Mutex
	samples []time.Duration // ring
	next    int
	ttl     time.Duration // cached; recomputed on every sample
}

func (m *ttlMeter) observe(d time.Duration) {
	if d < 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.samples) < ttlWindow {
		m.samples = append(m.samples, d)
	} else {
		m.samples[m.next] = d
		m.next = (m.next + 1) % ttlWindow
	}
	m.ttl = 0
}

func (m *ttlMeter) current() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ttl != 0 {
		return m.ttl
	}
	if len(m.samples) < ttlMinSamples {
		m.ttl = InitialReservationTTL
		return m.ttl
	}
	s := slices.Clone(m.samples)
	slices.Sort(s)
	p99 := s[(len(s)*99)/100]
	m.ttl = min(max(2*p99, MinReservationTTL), DefaultReservationTTL)
	return m.ttl
}

// ReservationTTL is how long a reservation blocks other requests now:
// Config.ReservationTTL when set, else the measured expiry.
func (e *Engine) ReservationTTL() time.Duration {
	if e.cfg.ReservationTTL > 0 {
		return e.cfg.ReservationTTL
	}
	return e.ttl.current()
}
