package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Cron is the instruments of the cron jobs (docs/cron.md).
type Cron struct {
	// Runs counts job runs by outcome (ok, failed).
	Runs *prometheus.CounterVec
	// Lateness observes how late scheduled runs start against their due
	// time.
	Lateness prometheus.Histogram
}

// RegisterCron adds the cron instruments and the live-jobs gauge (live is
// read at scrape time).
func (m *Metrics) RegisterCron(live func() float64) *Cron {
	c := &Cron{
		Runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "chime_cron_runs_total", Help: "Cron job runs, by outcome (ok, failed).",
		}, []string{"outcome"}),
		Lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "chime_cron_lateness_seconds",
			Help:    "How late scheduled cron job runs start against their due time.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5, 1, 5, 60},
		}),
	}
	m.registry.MustRegister(c.Runs, c.Lateness, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chime_cron_jobs_live", Help: "Cron jobs enabled (scheduled or running).",
	}, live))
	c.Runs.WithLabelValues("ok")
	c.Runs.WithLabelValues("failed")
	return c
}
