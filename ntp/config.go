// Package ntp keeps the host's clock offset from SNTP servers (docs/time.md#ntp).
// A Tracker syncs in the background, validates every response, persists its
// state and never blocks a caller: Now and Snapshot only read memory.
package ntp

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Defaults of docs/time.md#ntp, docs/configuration.md.
var DefaultServers = []string{"time.google.com", "time.cloudflare.com", "pool.ntp.org"}

const (
	DefaultStaleAfter    = 6 * time.Hour
	DefaultInterval      = 15 * time.Minute
	DefaultRetryInterval = time.Minute
	DefaultTimeout       = 5 * time.Second
)

// Config controls a Tracker. Use ConfigFromEnv or DefaultConfig.
type Config struct {
	Enabled    bool
	Servers    []string      // "host" or "host:port"; tried in order
	StaleAfter time.Duration // a good offset older than this is "stale"
	Interval   time.Duration // between successful syncs
	Retry      time.Duration // after a failed sync
	Timeout    time.Duration // per server query
}

// DefaultConfig is NTP on, with the default servers and timings.
func DefaultConfig() Config {
	return Config{
		Enabled:    true,
		Servers:    append([]string(nil), DefaultServers...),
		StaleAfter: DefaultStaleAfter,
		Interval:   DefaultInterval,
		Retry:      DefaultRetryInterval,
		Timeout:    DefaultTimeout,
	}
}

// ConfigFromEnv reads CHIME_NTP, CHIME_NTP_SERVERS and CHIME_NTP_STALE_AFTER
// (docs/configuration.md) on top of DefaultConfig. A bad value is an error naming it.
func ConfigFromEnv() (Config, error) { return ApplyEnv(DefaultConfig()) }

// ApplyEnv overrides cfg with the CHIME_NTP* variables that are set, so
// that they win over the host config file (docs/configuration.md).
func ApplyEnv(cfg Config) (Config, error) { return applyLookup(cfg, os.LookupEnv) }

func configFromLookup(lookup func(string) (string, bool)) (Config, error) {
	return applyLookup(DefaultConfig(), lookup)
}

func applyLookup(cfg Config, lookup func(string) (string, bool)) (Config, error) {
	if v, ok := lookup("CHIME_NTP"); ok {
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "", "1", "true", "on", "yes":
		case "0", "false", "off", "no":
			cfg.Enabled = false
		default:
			return Config{}, fmt.Errorf("CHIME_NTP=%q: want 1/true/on or 0/false/off", v)
		}
	}
	if v, ok := lookup("CHIME_NTP_SERVERS"); ok && strings.TrimSpace(v) != "" {
		servers, err := ParseServers(v)
		if err != nil {
			return Config{}, fmt.Errorf("CHIME_NTP_SERVERS: %w", err)
		}
		cfg.Servers = servers
	}
	if v, ok := lookup("CHIME_NTP_STALE_AFTER"); ok && strings.TrimSpace(v) != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			return Config{}, fmt.Errorf("CHIME_NTP_STALE_AFTER=%q: want a Go duration such as 6h: %w", v, err)
		}
		if d <= 0 {
			return Config{}, fmt.Errorf("CHIME_NTP_STALE_AFTER=%q: must be positive", v)
		}
		cfg.StaleAfter = d
	}
	return cfg, nil
}

// ParseServers splits a comma list of "host" or "host:port" entries
// ("[v6]:port" for IPv6 with a port). Empty entries are skipped.
func ParseServers(list string) ([]string, error) {
	var out []string
	for _, raw := range strings.Split(list, ",") {
		s := strings.TrimSpace(raw)
		if s == "" {
			continue
		}
		if err := checkServer(s); err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no servers in %q", list)
	}
	return out, nil
}

func checkServer(s string) error {
	if strings.ContainsAny(s, " \t/") {
		return fmt.Errorf("server %q: want host or host:port", s)
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			if !strings.HasSuffix(s, "]") {
				return fmt.Errorf("server %q: %w", s, err)
			}
			h = strings.Trim(s, "[]")
		}
		host, port = h, p
	case strings.Count(s, ":") == 1:
		h, p, err := net.SplitHostPort(s)
		if err != nil {
			return fmt.Errorf("server %q: %w", s, err)
		}
		host, port = h, p
	}
	if host == "" {
		return fmt.Errorf("server %q: empty host", s)
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("server %q: port must be 1..65535", s)
		}
	}
	return nil
}
