package host

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/cron"
	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/host/timers"
	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/ntp"
	"github.com/chimehq/chime/storage"
)

// Defaults of docs/configuration.md, docs/continuation.md#holds.
const (
	DefaultAddr    = "127.0.0.1:8787"
	DefaultDataDir = "./data"
	// DevToken is the shared secret of the product envoy.yaml; a host with
	// no token uses it on a loopback listener only (docs/failures.md).
	DevToken         = "dev-token"
	DefaultHoldMax   = 60 * time.Second
	DefaultTouchSync = 2 * time.Second
	// Loop guards of docs/continuation.md for every followup chain.
	DefaultMaxHops          = 8
	DefaultMaxChainDuration = 15 * time.Minute
	// DefaultFollowupTimeout bounds one followup HTTP exchange; a
	// non-streaming LLM answer can take minutes.
	DefaultFollowupTimeout = 10 * time.Minute
	// DefaultReentry is the local proxy listener of docs/configuration.md.
	DefaultReentry = "127.0.0.1:10000"
)

// Config configures a Service. DefaultConfig gives the production
// defaults and LoadConfig layers the config file and the environment on
// them (docs/configuration.md); in a Config built by hand, zero fields take the defaults below
// and a zero NTP field means NTP disabled.
type Config struct {
	// Addr is the HTTP listen address (docs/configuration.md), default DefaultAddr.
	Addr string
	// DataDir holds the Badger database (CHIME_DATA_DIR), default DefaultDataDir.
	DataDir string
	// MinFreeBytes is the free space the store keeps in DataDir
	// (CHIME_DATA_MIN_FREE, e.g. "64MiB"); below it writes are tool errors
	// and the host serves reads only (docs/failures.md). 0 means storage.DefaultMinFree.
	MinFreeBytes uint64
	// FreeSpace replaces statfs of DataDir (tests).
	FreeSpace storage.FreeSpaceFunc
	// Token is the filter↔host shared secret (CHIME_HOST_TOKEN). Empty means
	// DevToken on a loopback Addr; New refuses it on any other.
	Token string
	// NTP configures the clock-offset tracker (docs/time.md#ntp).
	NTP ntp.Config
	// DueWindow and Retention are the clock task timings of docs/clock-tool.md
	// (defaults 60 s and 20 min).
	DueWindow time.Duration
	Retention time.Duration
	// HoldMax is holds.max of docs/continuation.md#holds (default 60 s), for the response path.
	HoldMax time.Duration
	// DisableHoldNonStreaming is holds.nonStreaming=false of docs/continuation.md#holds: holds
	// only for streaming (SSE) clients. By default JSON clients are held too.
	DisableHoldNonStreaming bool
	// MaxHops and MaxChainDuration are the loop guards of docs/continuation.md
	// (defaults 8 followups and 15 min per chain).
	MaxHops          int
	MaxChainDuration time.Duration
	// Reentry is the proxy listener followups go to when the filter names
	// none (default DefaultReentry, docs/configuration.md).
	Reentry string
	// FollowupTimeout bounds one followup exchange (default 10 min).
	FollowupTimeout time.Duration
	// FollowupClient, when set, sends followups instead of the default
	// client (tests); FollowupTimeout then does not apply.
	FollowupClient *http.Client
	// DisableClock turns the clock feature off: prepare announces no tools
	// and reserves nothing, and the clock tool answers ok:false.
	DisableClock bool
	// DisableTimers turns the timer tools off (timers.enabled=false,
	// docs/timers.md): prepare does not announce them and calls answer
	// ok:false. Timers already running keep running.
	DisableTimers bool
	// TimerMaxWait is timers.maxWait, the longest one timer call is held
	// (default timers.DefaultMaxWait); TimerMaxPerSession and
	// TimerRetention bound a session's live timers and keep finished ones.
	TimerMaxWait       time.Duration
	TimerMaxPerSession int
	TimerRetention     time.Duration
	// DisableCron turns cron jobs off (cron.enabled=false, docs/cron.md):
	// stored jobs stay listed, none runs and none can be added.
	// CronMaxPerSession bounds a session's jobs; CronJobs are the jobs the
	// config file declares (cron.jobs).
	DisableCron       bool
	CronMaxPerSession int
	CronJobs          []cron.Declared
	// Heartbeat is the default heartbeat of every session
	// (docs/scheduler.md#heartbeat); a session's own setting overrides it.
	Heartbeat scheduler.Heartbeat
	// Wake configures wake runs (docs/scheduler.md#runs).
	Wake WakeConfig
	// TouchSync is how often session lastSeenAt updates are written
	// (default 2 s); see internal/touch.
	TouchSync time.Duration
	// MaxConcurrentPrepares bounds the prepare calls worked on at once;
	// past it prepare answers 503 at once and the filter fails open
	// (default DefaultMaxConcurrentPrepares; docs/failures.md).
	MaxConcurrentPrepares int
	// PrepareQueueWait is how long a prepare call past MaxConcurrentPrepares
	// waits at most for a slot, in arrival order and while its caller
	// waits, before it is shed (default DefaultPrepareQueueWait; negative:
	// shed at once).
	PrepareQueueWait time.Duration
	// DashboardHosts are Host names, besides localhost and loopback IPs,
	// under which the dashboard API answers loopback callers without the
	// token (dashboardHosts; docs/failures.md, DNS rebinding). Lower case, no port.
	DashboardHosts []string
	// Delivery is the delivery queue's routing and webhook (docs/delivery.md).
	Delivery DeliveryConfig
	// Clock is the uncorrected wall clock and the source of every wait of
	// the host (default the real clock; tests pass a clockwork.FakeClock).
	// The NTP offset is applied on top of its Now (timesource, docs/time.md#ntp).
	Clock timesource.Clock
}

// DefaultConfig is the production configuration before the config file
// and the environment are applied (docs/clock-tool.md–§8, §11, §12).
func DefaultConfig() Config {
	return Config{
		Addr:      DefaultAddr,
		DataDir:   DefaultDataDir,
		NTP:       ntp.DefaultConfig(),
		DueWindow: clock.DefaultDueWindow,
		Retention: clock.DefaultRetention,
		HoldMax:   DefaultHoldMax,
		TouchSync: DefaultTouchSync,

		MaxHops:          DefaultMaxHops,
		MaxChainDuration: DefaultMaxChainDuration,
		FollowupTimeout:  DefaultFollowupTimeout,
		Reentry:          DefaultReentry,

		TimerMaxWait:       timers.DefaultMaxWait,
		TimerMaxPerSession: timers.DefaultMaxPerSession,
		TimerRetention:     timers.DefaultRetention,

		CronMaxPerSession: cron.DefaultMaxPerSession,
		Heartbeat:         scheduler.DefaultHeartbeat(),
		Wake: WakeConfig{
			MaxConcurrentRuns: scheduler.DefaultMaxConcurrent,
			HistoryTurns:      DefaultHistoryTurns,
			AfterIdle:         DefaultAfterIdle,
			MaxRunsPerHour:    DefaultMaxRunsPerHour,
			Headers:           map[string]string{},
			RouteHeaders:      map[string]map[string]string{},
		},
		Delivery: DefaultDeliveryConfig(),
	}
}

// ConfigFromEnv reads CHIME_DATA_DIR, CHIME_HOST_TOKEN and the CHIME_NTP*
// variables (docs/configuration.md) on top of the defaults. A bad value is an error
// naming the variable.
func ConfigFromEnv() (Config, error) { return applyEnv(DefaultConfig()) }

// applyEnv overrides cfg with the variables that are set: the environment
// wins over the config file (docs/configuration.md).
func applyEnv(cfg Config) (Config, error) {
	nc, err := ntp.ApplyEnv(cfg.NTP)
	if err != nil {
		return Config{}, err
	}
	cfg.NTP = nc
	if v, ok := os.LookupEnv("CHIME_DATA_DIR"); ok && strings.TrimSpace(v) != "" {
		cfg.DataDir = strings.TrimSpace(v)
	}
	if v, ok := os.LookupEnv("CHIME_DATA_MIN_FREE"); ok && strings.TrimSpace(v) != "" {
		n, err := humanize.ParseBytes(strings.TrimSpace(v))
		if err != nil {
			return Config{}, fmt.Errorf("CHIME_DATA_MIN_FREE %q: want a size such as 64MiB: %v", v, err)
		}
		cfg.MinFreeBytes = n
	}
	if v, ok := os.LookupEnv("CHIME_HOST_TOKEN"); ok {
		if v != strings.TrimSpace(v) {
			return Config{}, fmt.Errorf("CHIME_HOST_TOKEN has leading or trailing white space")
		}
		cfg.Token = v
	}
	return cfg, nil
}

// FilterResolveTimeout is the filter's default resolveTimeoutMs (plugin
// configuration, docs/configuration.md): how long it waits for a resolve answer. The
// host answers within MaxChainDuration, holds included, so a chain guard
// longer than FilterResolveTimeout-FilterResolveSlack needs resolveTimeoutMs
// raised in envoy.yaml.
const (
	FilterResolveTimeout = 17 * time.Minute
	FilterResolveSlack   = time.Minute
)

// Warnings names valid settings that need a matching change elsewhere; the
// CLI logs them at start and `chime config check` prints them.
func (c Config) Warnings() []string {
	var w []string
	if c.MaxChainDuration+FilterResolveSlack > FilterResolveTimeout {
		w = append(w, fmt.Sprintf("guards.maxChainDuration %s: the filter's default resolve timeout (%s) is shorter than a chain may take; "+
			"set resolveTimeoutMs to at least %d in the plugin configuration of envoy.yaml",
			c.MaxChainDuration, FilterResolveTimeout, (c.MaxChainDuration+FilterResolveSlack).Milliseconds()))
	}
	return w
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
	if c.TimerMaxWait <= 0 {
		c.TimerMaxWait = timers.DefaultMaxWait
	}
	def := scheduler.DefaultHeartbeat()
	if c.Heartbeat.Every <= 0 {
		c.Heartbeat.Every = def.Every
	}
	if c.Heartbeat.Prompt == "" {
		c.Heartbeat.Prompt = def.Prompt
	}
	if c.Heartbeat.AckToken == "" {
		c.Heartbeat.AckToken = def.AckToken
	}
	if c.Heartbeat.AckMaxChars <= 0 {
		c.Heartbeat.AckMaxChars = def.AckMaxChars
	}
	if c.Heartbeat.ActiveHours == (storage.ActiveHours{}) {
		c.Heartbeat.ActiveHours = def.ActiveHours
	}
	if c.Wake.MaxConcurrentRuns <= 0 {
		c.Wake.MaxConcurrentRuns = scheduler.DefaultMaxConcurrent
	}
	if c.Wake.HistoryTurns <= 0 {
		c.Wake.HistoryTurns = DefaultHistoryTurns
	}
	if c.Wake.MaxRunsPerHour <= 0 {
		c.Wake.MaxRunsPerHour = DefaultMaxRunsPerHour
	}
	if c.TimerMaxPerSession <= 0 {
		c.TimerMaxPerSession = timers.DefaultMaxPerSession
	}
	if c.TimerRetention <= 0 {
		c.TimerRetention = timers.DefaultRetention
	}
	if c.CronMaxPerSession <= 0 {
		c.CronMaxPerSession = cron.DefaultMaxPerSession
	}
	if c.MaxConcurrentPrepares <= 0 {
		c.MaxConcurrentPrepares = DefaultMaxConcurrentPrepares
	}
	if c.PrepareQueueWait == 0 {
		c.PrepareQueueWait = DefaultPrepareQueueWait
	}
	c.Clock = timesource.OrReal(c.Clock)
	return c
}
