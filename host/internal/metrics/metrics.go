// Package metrics holds the host's Prometheus instruments (docs/configuration.md
// `/metrics`). Each Service has its own registry, so several services can
// live in one process (tests) without colliding.
package metrics

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/chimehq/chime/ntp"
)

// Outcome label values of Reservations.
const (
	Committed  = "committed"
	RolledBack = "rolled_back"
)

// Metrics is the host's instrument set.
type Metrics struct {
	registry *prometheus.Registry

	// Requests counts HTTP requests by endpoint name and status code.
	Requests *prometheus.CounterVec
	// RemindersInjected counts reminders handed to the filter by prepare.
	RemindersInjected prometheus.Counter
	// Reservations counts commits and rollbacks that released at least one task.
	Reservations *prometheus.CounterVec
	// Directives counts directives applied, by kind; DirectiveErrors those
	// skipped; DirectiveDuplicates those already applied at their position
	// (docs/directives.md).
	Directives          *prometheus.CounterVec
	DirectiveErrors     *prometheus.CounterVec
	DirectiveDuplicates *prometheus.CounterVec
	// ToolCalls counts server-tool executions by tool and result ok.
	ToolCalls *prometheus.CounterVec
	// Followups counts followups sent by kind (tool, stop, hold); Chains
	// resolve calls by the reason their chain ended; Holds holds by outcome
	// (docs/continuation.md, docs/continuation.md#holds).
	Followups *prometheus.CounterVec
	Chains    *prometheus.CounterVec
	Holds     *prometheus.CounterVec
	// FollowupFailures counts followups that failed, by kind and code (the
	// HTTP status, "none" without an answer, "unsent" when it could not be
	// built); the client got the last good turn with a note (docs/failures.md).
	FollowupFailures *prometheus.CounterVec
	// TimerNotices counts background timer completions queued as notices;
	// TimerLateness observes how late timers complete against their due
	// time (docs/timers.md). The live-timer gauge is registered by the host
	// with RegisterGaugeFunc.
	TimerNotices  prometheus.Counter
	TimerLateness prometheus.Histogram
	// WakeRuns counts wake runs by reason and status, WakeSkips wakes
	// that did not run by why, WakeTemplates templates kept, and
	// WakeLateness how late runs start against their due time
	// (docs/scheduler.md).
	WakeRuns      *prometheus.CounterVec
	WakeSkips     *prometheus.CounterVec
	WakeTemplates prometheus.Counter
	WakeLateness  prometheus.Histogram
	// FollowupMarkersRefused counts followup markers refused as invalid,
	// expired or replayed (docs/failures.md).
	FollowupMarkersRefused prometheus.Counter
	// DirectivesIgnored counts directives of a prepare beyond the
	// per-request cap, not applied (docs/failures.md).
	DirectivesIgnored prometheus.Counter
	// PrepareShed counts prepare calls answered at once with 503 because
	// too many were in flight: the filter fails open (docs/failures.md).
	PrepareShed prometheus.Counter
	// LatePrepares counts prepares served after the filter's deadline,
	// which reserve nothing (docs/failures.md).
	LatePrepares prometheus.Counter
}

// New builds the instruments on a fresh registry with the Go and process
// collectors. snapshot feeds the NTP gauges at scrape time.
func New(snapshot func() ntp.State) *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		registry: r,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_host_requests_total", Help: "HTTP requests served by the host, by endpoint and status code.",
		}, []string{"endpoint", "code"}),
		RemindersInjected: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chime_reminders_injected_total", Help: "Due reminders reserved and returned to the filter for injection.",
		}),
		Reservations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_reservations_total", Help: "Reservations finished with at least one task, by outcome.",
		}, []string{"outcome"}),
		Directives: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_directives_total", Help: "Directives applied to session state, by kind.",
		}, []string{"kind"}),
		DirectiveErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_directive_errors_total", Help: "Directives skipped because they failed, by kind.",
		}, []string{"kind"}),
		DirectiveDuplicates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_directive_duplicates_total", Help: "Directives not applied again because the session already applied them at that position, by kind.",
		}, []string{"kind"}),
		ToolCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_tool_calls_total", Help: "Server-tool calls executed, by tool and whether the result was ok.",
		}, []string{"tool", "ok"}),
		Followups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_followups_total", Help: "Followups sent through the proxy listener, by reason (tool, stop, hold).",
		}, []string{"reason"}),
		Chains: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_chains_total", Help: "Resolve calls, by the reason their followup chain ended.",
		}, []string{"reason"}),
		Holds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_holds_total", Help: "Clock holds, by outcome (committed, rolled_back, cancelled, empty).",
		}, []string{"outcome"}),
		FollowupFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_followup_failures_total",
			Help: "Followups that failed, by kind (tool, stop, hold) and code (HTTP status, none, unsent).",
		}, []string{"kind", "code"}),
		FollowupMarkersRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chime_followup_markers_refused_total", Help: "Followup markers refused as invalid, expired or already used.",
		}),
		DirectivesIgnored: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chime_directives_ignored_total", Help: "Directives of one request beyond the per-request cap, not applied.",
		}),
		PrepareShed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chime_prepare_shed_total", Help: "Prepare calls refused at once because too many were in flight (the filter fails open).",
		}),
		LatePrepares: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "chime_late_prepares_total", Help: "Prepares served after the filter's deadline; they reserve no reminders.",
		}),
	}
	m.TimerNotices = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chime_timer_notices_total", Help: "Background timer completions queued for their session.",
	})
	m.TimerLateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "chime_timer_lateness_seconds",
		Help:    "How late timers complete against their due time.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5},
	})
	r.MustRegister(m.TimerNotices, m.TimerLateness)
	m.WakeRuns = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chime_wake_runs_total", Help: "Wake runs by reason and status.",
	}, []string{"reason", "status"})
	m.WakeSkips = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chime_wake_skips_total", Help: "Wakes that did not run, by why.",
	}, []string{"why"})
	m.WakeTemplates = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "chime_wake_templates_total", Help: "Session requests kept as wake templates.",
	})
	m.WakeLateness = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "chime_wake_lateness_seconds",
		Help:    "How late wake runs start against their due time.",
		Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5},
	})
	r.MustRegister(m.WakeRuns, m.WakeSkips, m.WakeTemplates, m.WakeLateness)
	r.MustRegister(m.LatePrepares, m.Requests, m.RemindersInjected, m.Reservations, m.Directives, m.DirectiveErrors, m.DirectiveDuplicates, m.ToolCalls,
		m.Followups, m.Chains, m.Holds, m.FollowupFailures, m.FollowupMarkersRefused, m.DirectivesIgnored, m.PrepareShed,
		ntpCollector{snapshot: snapshot},
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Both outcomes are visible from the start, at zero.
	m.Reservations.WithLabelValues(Committed)
	m.Reservations.WithLabelValues(RolledBack)
	return m
}

// RegisterGaugeFunc adds a gauge read at scrape time.
func (m *Metrics) RegisterGaugeFunc(name, help string, f func() float64) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f))
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// ntpStatuses are every value of chime_ntp_status's label (docs/time.md#ntp).
var ntpStatuses = []ntp.Status{ntp.StatusOK, ntp.StatusStale, ntp.StatusError, ntp.StatusDisabled}

var (
	ntpOffsetDesc = prometheus.NewDesc("chime_ntp_offset_ms", "Applied NTP clock offset in milliseconds.", nil, nil)
	ntpStatusDesc = prometheus.NewDesc("chime_ntp_status", "NTP status: 1 for the current status, 0 for the others.", []string{"status"}, nil)
)

// ntpCollector reads the tracker at scrape time, so the gauges are never stale.
type ntpCollector struct{ snapshot func() ntp.State }

func (c ntpCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- ntpOffsetDesc
	ch <- ntpStatusDesc
}

func (c ntpCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.snapshot()
	ch <- prometheus.MustNewConstMetric(ntpOffsetDesc, prometheus.GaugeValue, float64(s.OffsetMs))
	for _, st := range ntpStatuses {
		v := 0.0
		if st == s.Status {
			v = 1
		}
		ch <- prometheus.MustNewConstMetric(ntpStatusDesc, prometheus.GaugeValue, v, string(st))
	}
}

// StorageState is the data directory's space state (docs/failures.md).
type StorageState struct {
	FreeBytes, MinFreeBytes uint64
	Writable                bool
}

// RegisterStorage adds the storage gauges, read at scrape time.
func (m *Metrics) RegisterStorage(state func() StorageState) {
	m.registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chime_storage_free_bytes", Help: "Free bytes on the file system of the data directory.",
		}, func() float64 { return float64(state().FreeBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chime_storage_min_free_bytes", Help: "Free bytes the store keeps; below it writes are refused.",
		}, func() float64 { return float64(state().MinFreeBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "chime_storage_writable", Help: "1 while the store accepts writes, 0 while the disk is too full or it started read-only.",
		}, func() float64 {
			if state().Writable {
				return 1
			}
			return 0
		}),
	)
}

// RegisterReservationTTL adds the measured reservation expiry gauge.
func (m *Metrics) RegisterReservationTTL(ttl func() float64) {
	m.registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chime_reservation_ttl_seconds", Help: "How long an unanswered reminder reservation blocks other requests (measured from reserve→outcome times).",
	}, ttl))
}
