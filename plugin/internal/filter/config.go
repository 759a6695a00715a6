package filter

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/chimehq/chime/llm"
)

// Config is the plugin configuration: JSON in the Envoy wasm filter's
// `configuration` (SPEC §12). Every field is optional.
type Config struct {
	// HostCluster is the Envoy cluster of the chime host (http_call target).
	HostCluster string `json:"hostCluster"`
	// HostAuthority is the :authority sent to the host.
	HostAuthority string `json:"hostAuthority"`
	// Token is the filter↔host shared secret (CHIME_HOST_TOKEN), sent as
	// a bearer token. Empty sends no authorization header.
	Token string `json:"token"`
	// TimeTag appends the SPEC §5 time tag to every non-followup request.
	TimeTag bool `json:"timeTag"`
	// DefaultTimezone is the time tag's zone when the request has no valid
	// x-chime-timezone header (SPEC §5). It must be an IANA zone.
	DefaultTimezone  string `json:"defaultTimezone"`
	DueWindowMs      int64  `json:"dueWindowMs"`
	RetentionMs      int64  `json:"retentionMs"`
	HoldMaxMs        int64  `json:"holdMaxMs"`
	HoldNonStreaming bool   `json:"holdNonStreaming"`
	// FailOpen forwards requests when the host fails (SPEC §1). When false,
	// a host failure answers the request with 503.
	FailOpen bool `json:"failOpen"`
	// PrepareTimeoutMs bounds the prepare call (SPEC §14: 200 ms).
	PrepareTimeoutMs int64 `json:"prepareTimeoutMs"`
	// ResolveTimeoutMs bounds the resolve call of the response path. The
	// host answers only when the whole chain is done: a hold (up to
	// holdMaxMs, SPEC §8) plus followups (up to 15 min, SPEC §7). Absent
	// or 0, it is holdMaxMs + 16 min.
	ResolveTimeoutMs int64 `json:"resolveTimeoutMs"`
}

// resolveGuardMs is what the default resolve timeout adds to holdMaxMs:
// the §7 followup wall-time guard (15 min) plus a minute of slack.
const resolveGuardMs = 16 * 60 * 1000

// DefaultConfig returns the configuration used for absent fields.
func DefaultConfig() Config {
	return Config{
		HostCluster:      "chime_host",
		HostAuthority:    "chime-host",
		TimeTag:          true,
		DefaultTimezone:  "UTC",
		DueWindowMs:      60_000,
		RetentionMs:      1_200_000,
		HoldMaxMs:        60_000,
		HoldNonStreaming: true,
		FailOpen:         true,
		PrepareTimeoutMs: 200,
		ResolveTimeoutMs: 60_000 + resolveGuardMs,
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
	if _, set := fields["resolveTimeoutMs"]; !set || cfg.ResolveTimeoutMs == 0 {
		// Derived, so that raising holdMaxMs alone keeps holds answerable.
		cfg.ResolveTimeoutMs = min(cfg.HoldMaxMs+resolveGuardMs, maxTimeoutMs)
	}
	var warnings []string
	known := knownFields()
	for name := range fields {
		if !slices.Contains(known, name) {
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
	return []string{"hostCluster", "hostAuthority", "token", "timeTag", "defaultTimezone", "dueWindowMs",
		"retentionMs", "holdMaxMs", "holdNonStreaming", "failOpen", "prepareTimeoutMs", "resolveTimeoutMs"}
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
	if _, err := llm.LoadTimezone(c.DefaultTimezone); err != nil {
		errs = append(errs, fmt.Errorf("defaultTimezone %q is not an IANA zone", c.DefaultTimezone))
	}
	for _, r := range []struct {
		name  string
		v, lo int64
	}{
		{"dueWindowMs", c.DueWindowMs, 0},
		{"retentionMs", c.RetentionMs, 1},
		{"holdMaxMs", c.HoldMaxMs, 0},
		{"prepareTimeoutMs", c.PrepareTimeoutMs, 1},
		{"resolveTimeoutMs", c.ResolveTimeoutMs, 1},
	} {
		if r.v < r.lo || r.v > maxTimeoutMs {
			errs = append(errs, fmt.Errorf("%s %d out of range [%d, %d]", r.name, r.v, r.lo, maxTimeoutMs))
		}
	}
	return errors.Join(errs...)
}
