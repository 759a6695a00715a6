package host

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/ntp"
)

// Defaults of SPEC §12 and §8.
const (
	DefaultAddr    = "127.0.0.1:8787"
	DefaultDataDir = "./data"
	// DevToken is the shared secret of the product envoy.yaml; a host left on
	// it warns once at start.
	DevToken         = "dev-token"
	DefaultHoldMax   = 60 * time.Second
	DefaultTouchSync = 2 * time.Second
	// Loop guards of SPEC §7 for every followup chain.
	DefaultMaxHops          = 8
	DefaultMaxChainDuration = 15 * time.Minute
	// DefaultFollowupTimeout bounds one followup HTTP exchange; a
	// non-streaming LLM answer can take minutes.
	DefaultFollowupTimeout = 10 * time.Minute
	// DefaultReentry is the local proxy listener of SPEC §12.
	DefaultReentry = "127.0.0.1:10000"
)

// Config configures a Service. ConfigFromEnv gives the production
// defaults; in a Config built by hand, zero fields take the defaults below
// and a zero NTP field means NTP disabled.
type Config struct {
	// Addr is the HTTP listen address (SPEC §12), default DefaultAddr.
	Addr string
	// DataDir holds the Badger database (CHIME_DATA_DIR), default DefaultDataDir.
	DataDir string
	// Token is the filter↔host shared secret (CHIME_HOST_TOKEN). Empty means
	// DevToken, with a warning logged once.
	Token string
	// NTP configures the clock-offset tracker (SPEC §11).
	NTP ntp.Config
	// DueWindow and Retention are the clock task timings of SPEC §6
	// (defaults 60 s and 20 min).
	DueWindow time.Duration
	Retention time.Duration
	// HoldMax is holdMaxMs of SPEC §8 (default 60 s), for the response path.
	HoldMax time.Duration
	// DisableHoldNonStreaming is holdNonStreaming=false of SPEC §8: holds
	// only for streaming (SSE) clients. By default JSON clients are held too.
	DisableHoldNonStreaming bool
	// MaxHops and MaxChainDuration are the loop guards of SPEC §7
	// (defaults 8 followups and 15 min per chain).
	MaxHops          int
	MaxChainDuration time.Duration
	// Reentry is the proxy listener followups go to when the filter names
	// none (default DefaultReentry, SPEC §12).
	Reentry string
	// FollowupTimeout bounds one followup exchange (default 10 min).
	FollowupTimeout time.Duration
	// FollowupClient, when set, sends followups instead of the default
	// client (tests); FollowupTimeout then does not apply.
	FollowupClient *http.Client
	// DisableClock turns the clock feature off: prepare announces no tools
	// and reserves nothing, and the clock tool answers ok:false.
	DisableClock bool
	// TouchSync is how often session lastSeenAt updates are written
	// (default 2 s); see internal/touch.
	TouchSync time.Duration
	// Clock is the uncorrected wall clock and the source of every wait of
	// the host (default the real clock; tests pass a clockwork.FakeClock).
	// The NTP offset is applied on top of its Now (timesource, SPEC §11).
	Clock timesource.Clock
}

// ConfigFromEnv reads CHIME_DATA_DIR, CHIME_HOST_TOKEN and the CHIME_NTP*
// variables (SPEC §12) on top of the defaults. A bad value is an error
// naming the variable.
func ConfigFromEnv() (Config, error) {
	nc, err := ntp.ConfigFromEnv()
	if err != nil {
		return Config{}, err
	}
	cfg := Config{
		Addr:      DefaultAddr,
		DataDir:   DefaultDataDir,
		NTP:       nc,
		DueWindow: clock.DefaultDueWindow,
		Retention: clock.DefaultRetention,
		HoldMax:   DefaultHoldMax,
		TouchSync: DefaultTouchSync,

		MaxHops:          DefaultMaxHops,
		MaxChainDuration: DefaultMaxChainDuration,
		FollowupTimeout:  DefaultFollowupTimeout,
		Reentry:          DefaultReentry,
	}
	if v, ok := os.LookupEnv("CHIME_DATA_DIR"); ok && strings.TrimSpace(v) != "" {
		cfg.DataDir = strings.TrimSpace(v)
	}
	if v, ok := os.LookupEnv("CHIME_HOST_TOKEN"); ok {
		if v != strings.TrimSpace(v) {
			return Config{}, fmt.Errorf("CHIME_HOST_TOKEN has leading or trailing white space")
		}
		cfg.Token = v
	}
	return cfg, nil
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.DataDir == "" {
		c.DataDir = DefaultDataDir
	}
	if c.DueWindow <= 0 {
		c.DueWindow = clock.DefaultDueWindow
	}
	if c.Retention <= 0 {
		c.Retention = clock.DefaultRetention
	}
	if c.HoldMax <= 0 {
		c.HoldMax = DefaultHoldMax
	}
	if c.TouchSync <= 0 {
		c.TouchSync = DefaultTouchSync
	}
	if c.MaxHops <= 0 {
		c.MaxHops = DefaultMaxHops
	}
	if c.MaxChainDuration <= 0 {
		c.MaxChainDuration = DefaultMaxChainDuration
	}
	if c.FollowupTimeout <= 0 {
		c.FollowupTimeout = DefaultFollowupTimeout
	}
	if c.Reentry == "" {
		c.Reentry = DefaultReentry
	}
	c.Clock = timesource.OrReal(c.Clock)
	return c
}
