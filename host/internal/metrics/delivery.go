package metrics

import "github.com/prometheus/client_golang/prometheus"

// RegisterDelivery adds the delivery queue's instruments (docs/delivery.md):
// chime_deliveries_total by connector and outcome (delivered, retry,
// unknown, failed), and chime_delivery_queue_depth read at scrape time.
// It returns the counter for the queue's Observe hook.
func (m *Metrics) RegisterDelivery(depth func() float64) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "chime_deliveries_total", Help: "Delivery attempts, by connector and outcome (delivered, retry, unknown, failed).",
	}, []string{"connector", "outcome"})
	m.registry.MustRegister(c, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "chime_delivery_queue_depth", Help: "Deliveries waiting to be sent (queued or unknown).",
	}, depth))
	return c
}
