package stats

import (
	"regexp"
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

}

// TestTextLikeEnvoy: /stats lists counters and gauges by name, then
// histograms with quantiles; filter and usedonly narrow it.
func TestTextLikeEnvoy(t *testing.T) {
	s := New()
	s.Define(httpfilter.MetricCounter, "chime.requests-total").Add(3)
	s.Counter("http.main.downstream_rq_total", "http.downstream_rq_total").Add(4)
	s.Counter("cluster.a.upstream_rq_timeout", "cluster.upstream_rq_timeout") // never written
	h := s.Define(httpfilter.MetricHistogram, "chime_latency_ms")
	h.Set(3)
	h.Set(700)
	s.Define(httpfilter.MetricHistogram, "idle_ms")

	var b strings.Builder
	_ = s.WriteText(&b, TextOptions{})
	want := "cluster.a.upstream_rq_timeout: 0\n" +
		"http.main.downstream_rq_total: 4\n" +
		"wasmcustom.chime.requests-total: 3\n" +
		"wasmcustom.chime_latency_ms: P0(5,5) P25(5,5) P50(5,5) P75(1000,1000) P90(1000,1000) P95(1000,1000) P99(1000,1000) P99.5(1000,1000) P99.9(1000,1000) P100(1000,1000)\n" +
		"wasmcustom.idle_ms: No recorded values\n"
	if b.String() != want {
		t.Errorf("/stats:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	_ = s.WriteText(&b, TextOptions{UsedOnly: true, Filter: regexp.MustCompile(`^(cluster|wasmcustom\.chime)`)})
	want = "wasmcustom.chime.requests-total: 3\n" +
		"wasmcustom.chime_latency_ms: P0(5,5) P25(5,5) P50(5,5) P75(1000,1000) P90(1000,1000) P95(1000,1000) P99(1000,1000) P99.5(1000,1000) P99.9(1000,1000) P100(1000,1000)\n"
	if b.String() != want {
		t.Errorf("/stats?usedonly&filter:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	_ = s.WriteJSON(&b, TextOptions{Filter: regexp.MustCompile(`requests|idle`)})
	if got := strings.TrimSpace(b.String()); got != `{"stats":[{"name":"wasmcustom.chime.requests-total","value":3},{"histograms":{"computed_quantiles":[{"name":"wasmcustom.idle_ms","values":[{"interval":null,"cumulative":null},{"interval":null,"cumulative":null},{"interval":null,"cumulative":null},{"interval":null,"cumulative":null},{"interval":null,"cumulative":null},{"interval":null,"cumulative":null},{"interval":null,"cumulative":null},{"interval":null,"cumulative":null},{"interval":null,"cumulative":null},{"interval":null,"cumulative":null}]}],"supported_quantiles":[0,25,50,75,90,95,99,99.5,99.9,100]}}]}` {
		t.Errorf("/stats?format=json: %s", got)
	}
}

func BenchmarkCounterAdd(b *testing.B) {
	c := New().Define(httpfilter.MetricCounter, "c")
	for b.Loop() {
		c.Add(1)
	}
}

// TestStatsTagsLikeEnvoy: stats_config.stats_tags on wasm metrics. The
// first capture group is cut from the name, the second (else the first)
// is the value; series of one tag-extracted name share a TYPE line.
func TestStatsTagsLikeEnvoy(t *testing.T) {
	s := New()
	s.SetTagSpecifiers([]TagSpecifier{
		{Name: "route", Regex: regexp.MustCompile(`(\.route=([a-z]+))`)},
		{Name: "kind", Regex: regexp.MustCompile(`^wasmcustom\.((chat|embed)_)`)},
		{Name: "env", FixedValue: "dev"},
	})
	s.Define(httpfilter.MetricCounter, "chat_requests.route=fast").Add(2)
	s.Define(httpfilter.MetricCounter, "chat_requests.route=slow").Add(5)
	s.Define(httpfilter.MetricCounter, "plain").Add(1)
	var b strings.Builder
	_ = s.WritePrometheus(&b)
	out := b.String()
	for _, want := range []string{
		"# TYPE requests counter\nrequests{route=\"fast\",kind=\"chat\",env=\"dev\"} 2\nrequests{route=\"slow\",kind=\"chat\",env=\"dev\"} 5\n",
		"plain{env=\"dev\"} 1\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Count(out, "# TYPE requests ") != 1 {
		t.Errorf("one TYPE line per extracted name:\n%s", out)
	}
	b.Reset()
	_ = s.WriteText(&b, TextOptions{})
	if !strings.Contains(b.String(), "wasmcustom.chat_requests.route=fast: 2\n") {
		t.Errorf("/stats keeps the full names:\n%s", b.String())
	}
}
