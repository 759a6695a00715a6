package stats

import (
	"strings"
	"testing"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

func TestPrometheusNamesLikeEnvoy(t *testing.T) {
	s := New()
	c := s.Define(httpfilter.MetricCounter, "chime.requests-total")
	c.Add(2)
	c.Add(1)
	c.Add(-5) // counters never go down
	g := s.Define(httpfilter.MetricGauge, "chime_inflight")
	g.Set(7)
	g.Add(-2)
	h := s.Define(httpfilter.MetricHistogram, "chime_latency_ms")
	h.Set(3)
	h.Set(700)
	s.Define(httpfilter.MetricCounter, "1bad").Add(1) // dropped by Envoy: starts with a digit
	s.Counter("http.main.downstream_rq_total", "http.downstream_rq_total", Tag{"envoy_http_conn_manager_prefix", "main"}).Add(4)

	if again := s.Define(httpfilter.MetricCounter, "chime.requests-total"); again.Value() != 3 {
		t.Fatalf("redefining must return the same metric, value %d", again.Value())
	}
	var b strings.Builder
	if err := s.WritePrometheus(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"# TYPE chime_requests_total counter\nchime_requests_total{} 3\n",
		"# TYPE envoy_http_downstream_rq_total counter\nenvoy_http_downstream_rq_total{envoy_http_conn_manager_prefix=\"main\"} 4\n",
		"# TYPE chime_inflight gauge\nchime_inflight{} 5\n",
		"# TYPE chime_latency_ms histogram\n",
		"chime_latency_ms_bucket{le=\"0.5\"} 0\n",
		"chime_latency_ms_bucket{le=\"5\"} 1\n",
		"chime_latency_ms_bucket{le=\"1000\"} 2\n",
		"chime_latency_ms_bucket{le=\"+Inf\"} 2\n",
		"chime_latency_ms_sum{} 703\n",
		"chime_latency_ms_count{} 2\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "1bad") {
		t.Error("a custom name starting with a digit must be dropped")
	}
	if strings.Index(out, "counter") > strings.Index(out, "gauge") || strings.Index(out, "gauge") > strings.Index(out, "histogram") {
		t.Error("order must be counters, gauges, histograms")
	}

	b.Reset()
	_ = s.WriteText(&b)
	for _, want := range []string{"wasmcustom.chime.requests-total: 3\n", "http.main.downstream_rq_total: 4\n", "wasmcustom.chime_latency_ms: count=2 sum=703\n"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("missing %q in /stats:\n%s", want, b.String())
		}
	}
}

func BenchmarkCounterAdd(b *testing.B) {
	c := New().Define(httpfilter.MetricCounter, "c")
	for b.Loop() {
		c.Add(1)
	}
}
