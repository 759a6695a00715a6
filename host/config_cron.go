package host

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/chimehq/chime/host/cron"
)

// cronSection is the cron: section of the host config file (docs/cron.md#configuration).
type cronSection struct {
	Enabled       bool           `yaml:"enabled"`
	MaxPerSession int            `yaml:"maxPerSession"`
	Jobs          []cronJobEntry `yaml:"jobs"`
}

// cronJobEntry is one job the file declares.
type cronJobEntry struct {
	Session  string `yaml:"session"`
	Name     string `yaml:"name"`
	Kind     string `yaml:"kind"`
	Schedule string `yaml:"schedule"`
	TZ       string `yaml:"tz"`
	Text     string `yaml:"text"`
	Target   string `yaml:"target"`
}

func (e cronJobEntry) spec() cron.Spec {
	return cron.Spec{Session: e.Session, Name: e.Name, Kind: e.Kind, Schedule: e.Schedule, TZ: e.TZ, Text: e.Text, Target: e.Target}
}

func (s *cronSection) from(cfg Config) {
	s.Enabled, s.MaxPerSession = !cfg.DisableCron, cfg.CronMaxPerSession
	s.Jobs = nil
	for _, d := range cfg.CronJobs {
		s.Jobs = append(s.Jobs, cronJobEntry{d.Session, d.Name, d.Kind, d.Schedule, d.TZ, d.Text, d.Target})
	}
}

func (s *cronSection) check(c *checker) {
	if s.MaxPerSession < 1 {
		c.bad("cron.maxPerSession", fmt.Sprintf("%d: must be at least 1", s.MaxPerSession))
	}
	perSession := map[string]int{}
	for i, e := range s.Jobs {
		path := "cron.jobs[" + strconv.Itoa(i) + "]"
		sp, _, err := cron.Normalize(e.spec())
		var fe *cron.FieldError
		switch {
		case errors.As(err, &fe):
			c.bad(path+"."+fe.Field, fe.Msg)
			continue
		case err != nil:
			c.bad(path, err.Error())
			continue
		}
		if perSession[sp.Session]++; perSession[sp.Session] == s.MaxPerSession+1 {
			c.bad(path, fmt.Sprintf("session %q has more jobs than cron.maxPerSession (%d)", sp.Session, s.MaxPerSession))
		}
	}
}

func (s *cronSection) apply(cfg *Config) {
	cfg.DisableCron, cfg.CronMaxPerSession = !s.Enabled, s.MaxPerSession
	cfg.CronJobs = nil
	for i, e := range s.Jobs {
		cfg.CronJobs = append(cfg.CronJobs, cron.Declared{Spec: e.spec(), Path: "cron.jobs[" + strconv.Itoa(i) + "]"})
	}
}
