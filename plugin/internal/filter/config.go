package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// Config is the plugin configuration: JSON in the Envoy wasm filter's
// `configuration` (docs/configuration.md). Every field is optional.
type Config struct {
	// HostCluster is the Envoy cluster of the chime host (http_call target).
	HostCluster string `json:"hostCluster"`
	// HostAuthority is the :authority sent to the host.
	HostAuthority string `json:"hostAuthority"`
	// Token is the filter↔host shared secret (CHIME_HOST_TOKEN), sent as
	// a bearer token. Empty sends no authorization header.
	Token string `json:"token"`
	// TimeTag appends the docs/time.md#time-tag to every non-followup request.
	TimeTag bool `json:"timeTag"`
	// DefaultTimezone is the time tag's zone when the request has no valid
	// x-chime-timezone header (docs/time.md#time-tag). It must be an IANA zone.
	DefaultTimezone string `json:"defaultTimezone"`
	// FailOpen forwards requests when the host fails (docs/architecture.md). When false,
	// a host failure answers the request with 503.
	FailOpen bool `json:"failOpen"`
	// PrepareTimeoutMs bounds the prepare call (docs/failures.md: 200 ms).
	PrepareTimeoutMs int64 `json:"prepareTimeoutMs"`
	// PrepareTimeoutMaxMs caps the prepare timeout, which grows with the
	// requests waiting for their prepare and the recent prepare latency
	// (loadtimeout.go, docs/failures.md#overload). Default 5 000; never
	// below prepareTimeoutMs.
	PrepareTimeoutMaxMs int64 `json:"prepareTimeoutMaxMs"`
	// ResolveTimeoutMs bounds the resolve call of the response path. The
	// host answers when the whole chain is done, and it bounds every chain,
	// holds included, by its guards.maxChainDuration (docs/continuation.md, default
	// 15 min). Absent or 0, it is DefaultResolveTimeoutMs; a host whose
	// chain guard is above 16 min needs it raised (the host warns at start).
	ResolveTimeoutMs int64 `json:"resolveTimeoutMs"`
	// Tools switches the server-tool families the filter injects, by
	// family name (docs/configuration.md): "clock" and "timers", both on
	// when absent. The host may still leave a family out.
	Tools map[string]bool `json:"tools"`
	// AllowOnHeadersStopIteration must match the wasm PluginConfig field of
	// the same name (Envoy ≥ 1.35). When true the filter holds request
	// headers until the body is read, so a route directive routes the
	// request that carries it (docs/directives.md#routing); when false it routes from
	// the next request on. Set without the Envoy flag, requests would hang.
	AllowOnHeadersStopIteration bool `json:"allowOnHeadersStopIteration"`
	// SkipPrepare lets a request of a quiet session go without a prepare
	// call (docs/architecture.md#skipping-prepare): on by default. Off,
	// every request asks the host.
	SkipPrepare bool `json:"skipPrepare"`
}

// ToolFamilies maps each server-tool family of the plugin configuration to
// its tools (docs/timers.md, docs/clock-tool.md).
var ToolFamilies = map[string][]string{
	"clock":  {hostapi.ClockToolName},
	"timers": hostapi.TimerToolNames(),
}

// injectable names the server tools the configuration allows that req
// does not define itself, sorted.
func (c Config) injectable(req *llm.Request) []string {
	// req nil: the list for a request that names none of the tools.
	var out []string
	for _, names := range ToolFamilies {
		for _, name := range names {
			if c.ToolEnabled(name) && (req == nil || !req.HasToolNamed(name)) {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// ToolEnabled reports whether the configuration lets the filter inject the
// server tool name.
func (c Config) ToolEnabled(name string) bool {
	for family, names := range ToolFamilies {
		if slices.Contains(names, name) {
			on, set := c.Tools[family]
			return on || !set
		}
	}
	return false
}

// DefaultResolveTimeoutMs is a default hold (60 s) plus the §7 chain guard
// (15 min) plus a minute of slack: 17 min. It is a constant, not learnt
// from the host: the host bounds every chain, holds included, by its
// guards.maxChainDuration, so only that setting can outlast the timeout,
// and the host warns at start when it does. Learning it would need a new
// host API field and a fallback for a resolve before any answer anyway.
// host.FilterResolveTimeout mirrors it.
const DefaultResolveTimeoutMs = (60 + 16*60) * 1000

// hostSettings are plugin fields that moved to the host config file
// (docs/configuration.md): set here they do nothing, so they get a warning naming
// where they live now.
var hostSettings = map[string]string{
	"dueWindowMs":      "clock.dueWindow",
	"retentionMs":      "clock.retention",
	"holdMaxMs":        "holds.max",
	"holdNonStreaming": "holds.nonStreaming",
}

// DefaultConfig returns the configuration used for absent fields.
func DefaultConfig() Config {
	return Config{
		HostCluster:         "chime_host",
		HostAuthority:       "chime-host",
		TimeTag:             true,
		DefaultTimezone:     "UTC",
		FailOpen:            true,
		PrepareTimeoutMs:    200,
		PrepareTimeoutMaxMs: 5_000,
		ResolveTimeoutMs:    DefaultResolveTimeoutMs,
		SkipPrepare:         true,
	}
}

// maxTimeoutMs caps millisecond settings at one day: larger values are
// almost certainly unit mistakes (seconds vs ms would be 1000× off).
const maxTimeoutMs = 24 * 60 * 60 * 1000

// ParseConfig reads the plugin configuration over the defaults. Empty input
// gives the defaults. It returns warnings for unknown fields (kept lenient
// so a newer envoy.yaml does not break an older filter) and an error for
// invalid JSON or out-of-range values.
func ParseConfig(raw []byte) (Config, []string, error) {
	cfg := DefaultConfig()
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return cfg, nil, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return Config{}, nil, fmt.Errorf("plugin configuration is not a JSON object: %w", err)
	}
	if err := json.Unmarshal(raw, &cfg); err != nil {
		return Config{}, nil, fmt.Errorf("plugin configuration: %w", err)
	}
	if cfg.ResolveTimeoutMs == 0 {
		cfg.ResolveTimeoutMs = DefaultResolveTimeoutMs
	}
	var warnings []string
	known := knownFields()
	for name := range fields {
		switch where, moved := hostSettings[name]; {
		case moved:
			warnings = append(warnings, fmt.Sprintf("plugin configuration: %q is a host setting now (%s in the host config file); ignored here", name, where))
		case !slices.Contains(known, name):
			warnings = append(warnings, fmt.Sprintf("plugin configuration: unknown field %q ignored", name))
		}
	}
	slices.Sort(warnings)
	if err := cfg.validate(); err != nil {
		return Config{}, warnings, fmt.Errorf("plugin configuration: %w", err)
	}
	return cfg, warnings, nil
}

func knownFields() []string {
	return []string{"hostCluster", "hostAuthority", "token", "timeTag", "defaultTimezone",
		"failOpen", "prepareTimeoutMs", "prepareTimeoutMaxMs", "resolveTimeoutMs", "tools", "allowOnHeadersStopIteration", "skipPrepare"}
}

func (c Config) validate() error {
	var errs []error
	if strings.TrimSpace(c.HostCluster) == "" {
		errs = append(errs, errors.New("hostCluster must not be empty"))
	}
	if strings.TrimSpace(c.HostAuthority) == "" || strings.ContainsAny(c.HostAuthority, " \t\r\n/") {
		errs = append(errs, fmt.Errorf("hostAuthority %q must be a host[:port]", c.HostAuthority))
	}
	if strings.ContainsAny(c.Token, "\r\n\x00") {
		errs = append(errs, errors.New("token must not contain line breaks or NUL"))
	}
	for family := range c.Tools {
		if _, ok := ToolFamilies[family]; !ok {
			errs = append(errs, fmt.Errorf("tools.%s: unknown tool family; known: clock, timers", family))
		}
	}
	if _, err := llm.LoadTimezone(c.DefaultTimezone); err != nil {
		errs = append(errs, fmt.Errorf("defaultTimezone %q is not an IANA zone", c.DefaultTimezone))
	}
	for _, r := range []struct {
		name  string
		v, lo int64
	}{
		{"prepareTimeoutMs", c.PrepareTimeoutMs, 1},
		{"prepareTimeoutMaxMs", c.PrepareTimeoutMaxMs, 1},
		{"resolveTimeoutMs", c.ResolveTimeoutMs, 1},
	} {
		if r.v < r.lo || r.v > maxTimeoutMs {
			errs = append(errs, fmt.Errorf("%s %d out of range [%d, %d]", r.name, r.v, r.lo, maxTimeoutMs))
		}
	}
	return errors.Join(errs...)
}
