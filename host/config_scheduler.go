package host

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/storage"
)

// Defaults of docs/scheduler.md#runs.
const (
	DefaultHistoryTurns   = 6
	DefaultMaxRunsPerHour = 60
	DefaultAfterIdle      = 60 * time.Second
)

// WakeConfig is the wake section (docs/scheduler.md#runs).
type WakeConfig struct {
	// Disabled stops every wake run; heartbeats and jobs then only queue.
	Disabled bool
	// MaxConcurrentRuns bounds runs across sessions (default 8).
	MaxConcurrentRuns int
	// HistoryTurns is how many user turns of the template a run sends.
	HistoryTurns int
	// AfterIdle defers a session's wakes (all but manual and hook) until
	// its client has sent no request for this long: while the client is
	// around, what comes due reaches its next request (default 60 s; 0
	// wakes at once).
	AfterIdle time.Duration
	// MaxRunsPerHour bounds a session's runs that are not manual, so a
	// model that keeps scheduling itself cannot run up a bill.
	MaxRunsPerHour int
	// Headers are added to every wake, and RouteHeaders to the wakes of a
	// pinned route: provider credentials for sessions whose client has
	// not come back since a restart. Values expand ${VAR} from the
	// environment, so keys stay out of the file.
	Headers      map[string]string
	RouteHeaders map[string]map[string]string
}

// heartbeatSection is the default heartbeat of every session.
type heartbeatSection struct {
	Enabled         bool                `yaml:"enabled"`
	Every           time.Duration       `yaml:"every"`
	Prompt          string              `yaml:"prompt"`
	AckToken        string              `yaml:"ackToken"`
	AckMaxChars     int                 `yaml:"ackMaxChars"`
	ActiveHours     storage.ActiveHours `yaml:"activeHours"`
	OnlyWhenPending bool                `yaml:"onlyWhenPending"`
}

func (s *heartbeatSection) from(cfg Config) {
	h := cfg.Heartbeat
	*s = heartbeatSection{h.Enabled, h.Every, h.Prompt, h.AckToken, h.AckMaxChars, h.ActiveHours, h.OnlyWhenPending}
}

func (s *heartbeatSection) check(c *checker) {
	if err := s.heartbeat().Check(); err != nil {
		field, _, _ := strings.Cut(err.Error(), ":")
		c.bad("heartbeat."+field, err.Error())
	}
}

func (s *heartbeatSection) heartbeat() scheduler.Heartbeat {
	return scheduler.Heartbeat{Enabled: s.Enabled, Every: s.Every, Prompt: s.Prompt, AckToken: s.AckToken,
		AckMaxChars: s.AckMaxChars, ActiveHours: s.ActiveHours, OnlyWhenPending: s.OnlyWhenPending}
}

func (s *heartbeatSection) apply(cfg *Config) { cfg.Heartbeat = s.heartbeat() }

// wakeSection is WakeConfig in the file.
type wakeSection struct {
	Enabled           bool                        `yaml:"enabled"`
	MaxConcurrentRuns int                         `yaml:"maxConcurrentRuns"`
	HistoryTurns      int                         `yaml:"historyTurns"`
	AfterIdle         time.Duration               `yaml:"afterIdle"`
	MaxRunsPerHour    int                         `yaml:"maxRunsPerHour"`
	Headers           map[string]string           `yaml:"headers"`
	Routes            map[string]wakeRouteSection `yaml:"routes"`
}

type wakeRouteSection struct {
	Headers map[string]string `yaml:"headers"`
}

func (s *wakeSection) from(cfg Config) {
	w := cfg.Wake
	*s = wakeSection{Enabled: !w.Disabled, MaxConcurrentRuns: w.MaxConcurrentRuns, HistoryTurns: w.HistoryTurns, AfterIdle: w.AfterIdle,
		MaxRunsPerHour: w.MaxRunsPerHour, Headers: map[string]string{}, Routes: map[string]wakeRouteSection{}}
	for k, v := range w.Headers {
		s.Headers[k] = v
	}
	for name, h := range w.RouteHeaders {
		s.Routes[name] = wakeRouteSection{Headers: h}
	}
}

func (s *wakeSection) check(c *checker) {
	if s.MaxConcurrentRuns < 1 || s.MaxConcurrentRuns > 1024 {
		c.bad("wake.maxConcurrentRuns", fmt.Sprintf("%d: must be from 1 to 1024", s.MaxConcurrentRuns))
	}
	if s.HistoryTurns < 1 || s.HistoryTurns > 1000 {
		c.bad("wake.historyTurns", fmt.Sprintf("%d: must be from 1 to 1000", s.HistoryTurns))
	}
	if s.AfterIdle < 0 {
		c.bad("wake.afterIdle", fmt.Sprintf("%s: must not be negative", s.AfterIdle))
	}
	if s.MaxRunsPerHour < 1 {
		c.bad("wake.maxRunsPerHour", fmt.Sprintf("%d: must be at least 1", s.MaxRunsPerHour))
	}
	checkHeaders(c, "wake.headers", s.Headers)
	for name, r := range s.Routes {
		checkHeaders(c, "wake.routes."+name+".headers", r.Headers)
	}
}

func checkHeaders(c *checker, path string, h map[string]string) {
	for k, v := range h {
		if k == "" || strings.ContainsAny(k, " :\r\n") || strings.ContainsAny(v, "\r\n") {
			c.bad(path, fmt.Sprintf("header %q: not a valid header name or value", k))
		}
	}
}

func (s *wakeSection) apply(cfg *Config) {
	cfg.Wake = WakeConfig{Disabled: !s.Enabled, MaxConcurrentRuns: s.MaxConcurrentRuns, HistoryTurns: s.HistoryTurns, AfterIdle: s.AfterIdle,
		MaxRunsPerHour: s.MaxRunsPerHour, Headers: map[string]string{}, RouteHeaders: map[string]map[string]string{}}
	for k, v := range s.Headers {
		cfg.Wake.Headers[k] = v
	}
	for name, r := range s.Routes {
		cfg.Wake.RouteHeaders[name] = r.Headers
	}
}

// wakeHeaders are the configured headers for a route, ${VAR} expanded.
func (w WakeConfig) wakeHeaders(route string) map[string]string {
	out := map[string]string{}
	for k, v := range w.Headers {
		out[strings.ToLower(k)] = os.ExpandEnv(v)
	}
	for k, v := range w.RouteHeaders[route] {
		out[strings.ToLower(k)] = os.ExpandEnv(v)
	}
	return out
}
