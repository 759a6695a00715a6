// Package filter is the chime HTTP filter that runs inside chime.wasm. It
// implements docs/architecture.md. Request path: on the three LLM protocol paths it
// buffers the request body, strips `<**…**>` directives, asks the host to
// prepare (proxy_http_call), injects the server tools, the time tag (§5)
// and due reminders (§6), and reports the reservation's outcome when the
// response starts. Response path: it withholds server-tool calls from JSON
// and SSE answers, asks the host to resolve them (or to continue a stop),
// and splices the continuation into the same response. When the host
// fails it fails open.
//
// Everything is callback-driven; nothing here may block (see proxywasm).
// The files split the work: config.go (plugin configuration), request.go
// (headers and body), prepare.go (the prepare call and the body rewrite),
// outcome.go (commit/rollback), response.go (the response path), tick.go
// (NTP offset refresh) and hostcall.go (calls to the host).
package filter

import (
	"errors"
	"fmt"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// Metric names, exported on Envoy's Prometheus endpoint.
const (
	// MetricRequests counts POSTs on an LLM protocol path, followups included.
	MetricRequests = "chime_requests_total"
	// MetricHostCallFailures counts host calls that failed: no answer,
	// non-2xx, an unreadable body, or a call that could not be sent.
	MetricHostCallFailures = "chime_host_call_failures_total"
	// MetricFailOpen counts requests forwarded without the host (docs/architecture.md).
	MetricFailOpen = "chime_fail_open_total"
	// MetricMalformed counts bodies forwarded unmodified because they do
	// not parse (docs/failures.md).
	MetricMalformed = "chime_malformed_requests_total"
	// MetricDirectivesDropped counts directives stripped but not sent to
	// the host: malformed (too large among them) or past the per-request
	// cap (docs/failures.md).
	MetricDirectivesDropped = "chime_directives_dropped_total"
	// MetricResolves counts resolve calls sent (docs/architecture.md#response-path).
	MetricResolves = "chime_resolves_total"
	// MetricResolveFailures counts resolves that failed or could not be
	// sent; the client then gets the original turn minus server-tool calls.
	MetricResolveFailures = "chime_resolve_failures_total"
	// MetricServerToolCalls counts server-tool calls withheld from clients.
	MetricServerToolCalls = "chime_server_tool_calls_total"
)

// NewVMContext returns the filter's VM context for proxywasm.SetVMContext.
func NewVMContext() proxywasm.VMContext { return vmContext{now: time.Now} }

type vmContext struct {
	proxywasm.DefaultVMContext
	now func() time.Time // the wall clock; tests pin it
}

func (v vmContext) NewPluginContext(uint32) proxywasm.PluginContext {
	return &pluginContext{now: v.now, zones: map[string]*time.Location{}, gen: genState{instance: newInstanceID()}}
}

// pluginContext is one configured filter. It owns what outlives a stream:
// the configuration, the last NTP offset the host reported, the metrics
// and the host calls.
type pluginContext struct {
	proxywasm.DefaultPluginContext
	cfg Config
	// injectableAll is cfg.injectable of a request without tools of
	// their names: most requests' list, shared rather than built each time.
	injectableAll []string
	// toolPlans is the last tool plan per protocol (injectTools).
	toolPlans [llm.Messages + 1]*toolPlan
	// needleCache is the last needles answer (response.go).
	needleCache struct{ names, needles []string }
	defaultZone *time.Location
	now         func() time.Time

	// ntpOffsetMs is the host's last reported NTP offset (docs/time.md#ntp); the
	// time tag uses it when the host cannot be asked.
	ntpOffsetMs int64
	// stateCallAt is when the tick's state call was sent; zero when none
	// is in flight (without skipPrepare; the generation poll brings the
	// NTP view otherwise).
	stateCallAt, stateAnsweredAt time.Time
	// gen is the host generation this root context trusts (skip.go).
	gen genState
	// zones caches loaded x-chime-timezone zones (loading parses tzdata).
	zones map[string]*time.Location
	// tagger writes the time tags, into tagBuf (llm.TimeTagger).
	tagger llm.TimeTagger
	tagBuf []byte
	// spareRequests are parsed requests done with, reused by the next
	// bodies (llm.ParseRequestInto): the VM runs one callback at a time.
	spareRequests []*llm.Request
	// toolsMemo holds the client tools arrays parsed lately: an agent
	// sends the same ones with every request (llm.ToolsMemo).
	toolsMemo llm.ToolsMemo

	// failOpens counts requests failed open since the last info line;
	// failOpenReason is the latest one's reason (noteFailOpen).
	failOpens      int
	failOpenReason string
	failOpenLogged time.Time

	// awaitingPrepare counts the requests past their headers that wait
	// for their prepare answer (loadtimeout.go).
	awaitingPrepare int
	// prepareLatencyMs averages the latency of answered prepare calls
	// (loadtimeout.go).
	prepareLatencyMs int64

	requests, hostFailures, failOpen, malformed counter
	directivesDropped                           counter
	resolves, resolveFailures, serverToolCalls  counter
	keptMetrics                                 keptCounters // keep.go

	// unsent holds outcomes the host did not take (down or restarting),
	// resent once it answers again (outcome.go).
	unsent         []unsentOutcome
	resending      int // resent outcomes in flight
	unsentDropped  int // outcomes not kept since the last report
	outcomesRetry  counter
	prepareSkipped counter // skip.go
}

// counter is a metric that may be missing (a host without metrics must not
// break the filter).
type counter struct {
	m  proxywasm.MetricCounter
	ok bool
}

func defineCounter(name string) counter {
	m, err := proxywasm.DefineCounterMetric(name)
	if err != nil {
		proxywasm.LogWarnf("chime: cannot define metric %s: %v", name, err)
		return counter{}
	}
	return counter{m: m, ok: true}
}

func (c counter) inc() { c.add(1) }

func (c counter) add(n int) {
	if c.ok && n > 0 {
		_ = c.m.Increment(uint64(n))
	}
}

func (p *pluginContext) OnPluginStart(int) bool {
	raw, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, proxywasm.ErrNotFound) {
		proxywasm.LogErrorf("chime: cannot read plugin configuration: %v", err)
		return false
	}
	cfg, warnings, err := ParseConfig(raw)
	for _, w := range warnings {
		proxywasm.LogWarnf("chime: %s", w)
	}
	if err != nil {
		proxywasm.LogErrorf("chime: rejecting %v", err)
		return false
	}
	zone, err := llm.LoadTimezone(cfg.DefaultTimezone)
	if err != nil { // validated by ParseConfig; only a VM without tzdata gets here
		proxywasm.LogErrorf("chime: rejecting plugin configuration: %v", err)
		return false
	}
	p.cfg, p.defaultZone = cfg, zone
	p.injectableAll = cfg.injectable(nil)
	// The definition order is the metric ids' order; keep it stable.
	p.requests = defineCounter(MetricRequests)
	p.hostFailures = defineCounter(MetricHostCallFailures)
	p.failOpen = defineCounter(MetricFailOpen)
	p.malformed = defineCounter(MetricMalformed)
	p.directivesDropped = defineCounter(MetricDirectivesDropped)
	p.resolves = defineCounter(MetricResolves)
	p.resolveFailures = defineCounter(MetricResolveFailures)
	p.serverToolCalls = defineCounter(MetricServerToolCalls)
	p.keptMetrics = defineKeptCounters()
	p.outcomesRetry = defineCounter(MetricOutcomesResent)
	p.prepareSkipped = defineCounter(MetricPrepareSkipped)
	if err := proxywasm.SetTickPeriodMilliSeconds(tickPeriodMs); err != nil {
		proxywasm.LogWarnf("chime: cannot set the tick period: %v", err)
	}
	logStarted(fmt.Sprintf("chime: filter started (host cluster %q, failOpen %v, timeTag %v, default zone %s, skipPrepare %v)",
		cfg.HostCluster, cfg.FailOpen, cfg.TimeTag, zone, cfg.SkipPrepare))
	return true
}

// startedKey is the shared-data key under which the first VM records the
// start line it logged.
const startedKey = "chime.filter.started"

// logStarted logs msg at info once for all workers, whose VMs each start
// the plugin: the VM that records msg in shared data first logs it at
// info, the others (and restarts with the same configuration) at debug. A
// changed configuration is logged again. Two VMs starting at the very same
// moment may both log it: the unset key has no CAS token to race on.
func logStarted(msg string) {
	old, cas, err := proxywasm.GetSharedData(startedKey)
	switch {
	case err == nil && string(old) == msg:
		proxywasm.LogDebugf("%s", msg)
		return
	case err != nil && !errors.Is(err, proxywasm.ErrNotFound):
		proxywasm.LogInfof("%s", msg) // no shared data: every VM says it
		return
	}
	if err := proxywasm.SetSharedData(startedKey, []byte(msg), cas); err != nil {
		proxywasm.LogDebugf("%s", msg) // another VM wrote first
		return
	}
	proxywasm.LogInfof("%s", msg)
}

func (p *pluginContext) NewHttpContext(uint32) proxywasm.HttpContext {
	return &httpContext{plugin: p}
}

// maxCachedZones bounds the zone cache: the header is client-controlled.
const maxCachedZones = 64

// zoneFor resolves the time tag's zone (docs/time.md#time-tag): the x-chime-timezone
// header if it names a zone, else the configured default.
func (p *pluginContext) zoneFor(header string) *time.Location {
	if header == "" {
		return p.defaultZone
	}
	if loc, ok := p.zones[header]; ok {
		return loc
	}
	loc, err := llm.LoadTimezone(header)
	if err != nil {
		// Said once per value (the fallback is cached below): the tag's tz
		// shows the zone used, and the log says why it is not the client's.
		name := header[:min(len(header), 64)]
		proxywasm.LogInfof("chime: unknown %s %q; the time tag uses %s", hostapi.HeaderTimezone, name, p.defaultZone)
		loc = p.defaultZone
	}
	if len(p.zones) >= maxCachedZones {
		clear(p.zones)
	}
	p.zones[header] = loc
	return loc
}

// learnNTP takes the host's NTP view (docs/time.md#ntp): the host owns time, so
// its offset is used as given. An answer without an NTP status carries
// no view and keeps the last one.
func (p *pluginContext) learnNTP(n hostapi.NTPInfo) {
	if n.Status != "" {
		p.ntpOffsetMs = n.OffsetMs
	}
}

// maxSpareRequests bounds spareRequests: more are only in use at once
// under a burst, and those are left to the GC.
const maxSpareRequests = 8

// spareRequest returns a Request to parse into (nil: a new one).
func (p *pluginContext) spareRequest() *llm.Request {
	n := len(p.spareRequests)
	if n == 0 {
		return nil
	}
	r := p.spareRequests[n-1]
	p.spareRequests = p.spareRequests[:n-1]
	return r
}

// doneWith takes back a request nothing refers to any more.
func (p *pluginContext) doneWith(r *llm.Request) {
	if r != nil && len(p.spareRequests) < maxSpareRequests {
		p.spareRequests = append(p.spareRequests, r)
	}
}
