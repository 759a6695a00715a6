// Package stats is the runtime's stat store (docs/local-runtime.md: wasm metrics are
// exposed on the admin's Prometheus endpoint). It names and renders stats
// the way Envoy does:
//
//   - a wasm metric "foo.bar" (proxy_define_metric) lives in Envoy's custom
//     namespace as "wasmcustom.foo.bar" in /stats, and is exported to
//     Prometheus without the "envoy_" prefix and without the namespace:
//     "foo_bar";
//   - built-in stats ("http.<stat_prefix>.downstream_rq_total") are
//     exported tag-extracted with the "envoy_" prefix:
//     envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix="…"}.
//
// The text format is written here rather than through client_golang so the
// output follows Envoy's naming rules exactly (counters keep their name, no
// "_total" suffix is added) and histograms use Envoy's default buckets.
package stats

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// CustomNamespace is Envoy's stat namespace for wasm-defined metrics.
const CustomNamespace = "wasmcustom"

// Tag is a Prometheus label Envoy's tag extraction would produce.
type Tag struct{ Name, Value string }

// Store holds every stat. It implements httpfilter.Stats.
type Store struct {
	mu      sync.Mutex
	metrics map[string]*metric // by full stat name
	tags    []TagSpecifier
}

// TagSpecifier is a bootstrap stats_config.stats_tags entry. With Regex,
// its first capture group is cut from the stat name and the tag value is
// the second group (the first when there is only one), as Envoy's
// TagExtractorImpl does; otherwise the tag is FixedValue.
type TagSpecifier struct {
	Name       string
	Regex      *regexp.Regexp
	FixedValue string
}

// SetTagSpecifiers installs the custom tag extraction for metrics defined
// from now on (docs/local-runtime.md). It applies to wasm metrics; the
// built-in stats keep Envoy's default tags.
func (s *Store) SetTagSpecifiers(specs []TagSpecifier) {
	s.mu.Lock()
	s.tags = specs
	s.mu.Unlock()
}

// extractTags applies the tag specifiers to a full stat name and returns
// the tag-extracted name and the tags.
func extractTags(specs []TagSpecifier, name string) (string, []Tag) {
	var tags []Tag
	cut := make([]bool, len(name))
	for _, sp := range specs {
		if sp.Regex == nil {
			tags = append(tags, Tag{sp.Name, sp.FixedValue})
			continue
		}
		m := sp.Regex.FindStringSubmatchIndex(name)
		if len(m) < 4 || m[2] < 0 {
			continue
		}
		vs, ve := m[2], m[3]
		if len(m) >= 6 && m[4] >= 0 {
			vs, ve = m[4], m[5]
		}
		tags = append(tags, Tag{sp.Name, name[vs:ve]})
		for i := m[2]; i < m[3]; i++ {
			cut[i] = true
		}
	}
	var b strings.Builder
	for i := range len(name) {
		if !cut[i] {
			b.WriteByte(name[i])
		}
	}
	return b.String(), tags
}

// New returns an empty store.
func New() *Store { return &Store{metrics: map[string]*metric{}} }

var _ httpfilter.Stats = (*Store)(nil)

// Define implements httpfilter.Stats for proxy_define_metric: the name is
// filed under the wasmcustom namespace. Defining an existing name returns
// the same metric (Envoy shares stats by name across VMs).
func (s *Store) Define(kind httpfilter.MetricKind, name string) httpfilter.Metric {
	full := CustomNamespace + "." + name
	s.mu.Lock()
	specs := s.tags
	s.mu.Unlock()
	return s.get(full, kind, func() (string, []Tag) {
		if len(specs) == 0 {
			return sanitize(name), nil
		}
		extracted, tags := extractTags(specs, full)
		return sanitize(strings.TrimPrefix(extracted, CustomNamespace+".")), tags
	})
}

// Counter returns a built-in counter. name is Envoy's full stat name, prom
// the tag-extracted name (without "envoy_"), tags its labels.
func (s *Store) Counter(name, prom string, tags ...Tag) httpfilter.Metric {
	return s.get(name, httpfilter.MetricCounter, func() (string, []Tag) { return "envoy_" + sanitize(prom), tags })
}

// Gauge is Counter for gauges.
func (s *Store) Gauge(name, prom string, tags ...Tag) httpfilter.Metric {
	return s.get(name, httpfilter.MetricGauge, func() (string, []Tag) { return "envoy_" + sanitize(prom), tags })
}

// Histogram is Counter for histograms (values in milliseconds by Envoy
// convention).
func (s *Store) Histogram(name, prom string, tags ...Tag) httpfilter.Metric {
	return s.get(name, httpfilter.MetricHistogram, func() (string, []Tag) { return "envoy_" + sanitize(prom), tags })
}

func (s *Store) get(full string, kind httpfilter.MetricKind, prom func() (string, []Tag)) httpfilter.Metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m, ok := s.metrics[full]; ok {
		return m
	}
	pn, tags := prom()
	m := &metric{name: full, kind: kind, prom: pn, tags: tags}
	if kind == httpfilter.MetricHistogram {
		m.buckets = make([]atomic.Int64, len(defaultBuckets))
	}
	s.metrics[full] = m
	return m
}

// Envoy's default histogram bucket bounds.
var defaultBuckets = []float64{0.5, 1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 300000, 600000, 1800000, 3600000}

type metric struct {
	name, prom string
	kind       httpfilter.MetricKind
	tags       []Tag
	value      atomic.Int64 // counter/gauge value; histogram count
	sum        atomic.Int64 // histogram sum
	buckets    []atomic.Int64
	used       atomic.Bool // written at least once (/stats?usedonly)
}

func (m *metric) Add(delta int64) {
	m.used.Store(true)
	if m.kind == httpfilter.MetricCounter && delta < 0 {
		return // counters only go up
	}
	if m.kind == httpfilter.MetricHistogram {
		m.Set(delta)
		return
	}
	m.value.Add(delta)
}

func (m *metric) Set(v int64) {
	m.used.Store(true)
	switch m.kind {
	case httpfilter.MetricHistogram:
		m.value.Add(1)
		m.sum.Add(v)
		for i, b := range defaultBuckets {
			if float64(v) <= b {
				m.buckets[i].Add(1)
			}
		}
	default:
		m.value.Store(v)
	}
}

func (m *metric) Value() int64 { return m.value.Load() }

func (s *Store) snapshot() []*metric {
	s.mu.Lock()
	out := make([]*metric, 0, len(s.metrics))
	for _, m := range s.metrics {
		out = append(out, m)
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// WritePrometheus renders /stats/prometheus: counters, then gauges, then
// histograms, one "# TYPE" line per metric name, as Envoy orders them.
func (s *Store) WritePrometheus(w io.Writer) error {
	all := s.snapshot()
	var b strings.Builder
	for _, kind := range []httpfilter.MetricKind{httpfilter.MetricCounter, httpfilter.MetricGauge, httpfilter.MetricHistogram} {
		byName := map[string][]*metric{}
		var names []string
		for _, m := range all {
			if m.kind != kind || m.prom == "" || m.prom[0] >= '0' && m.prom[0] <= '9' {
				continue // Envoy drops custom names that start with a digit
			}
			if _, ok := byName[m.prom]; !ok {
				names = append(names, m.prom)
			}
			byName[m.prom] = append(byName[m.prom], m)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(&b, "# TYPE %s %s\n", n, kindName(kind))
			for _, m := range byName[n] {
				writeProm(&b, m)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func writeProm(b *strings.Builder, m *metric) {
	labels := formatTags(m.tags)
	if m.kind != httpfilter.MetricHistogram {
		fmt.Fprintf(b, "%s{%s} %d\n", m.prom, labels, m.value.Load())
		return
	}
	sep := ""
	if labels != "" {
		sep = ","
	}
	for i, bound := range defaultBuckets {
		fmt.Fprintf(b, "%s_bucket{%s%sle=\"%s\"} %d\n", m.prom, labels, sep, formatFloat(bound), m.buckets[i].Load())
	}
	count := m.value.Load()
	fmt.Fprintf(b, "%s_bucket{%s%sle=\"+Inf\"} %d\n", m.prom, labels, sep, count)
	fmt.Fprintf(b, "%s_sum{%s} %d\n", m.prom, labels, m.sum.Load())
	fmt.Fprintf(b, "%s_count{%s} %d\n", m.prom, labels, count)
}

func formatFloat(f float64) string {
	if f == math.Trunc(f) {
		return fmt.Sprintf("%.0f", f)
	}
	return fmt.Sprint(f)
}

func formatTags(tags []Tag) string {
	parts := make([]string, len(tags))
	for i, t := range tags {
		v := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(t.Value)
		parts[i] = fmt.Sprintf("%s=\"%s\"", sanitize(t.Name), v)
	}
	return strings.Join(parts, ",")
}

func kindName(k httpfilter.MetricKind) string {
	switch k {
	case httpfilter.MetricCounter:
		return "counter"
	case httpfilter.MetricGauge:
		return "gauge"
	}
	return "histogram"
}

// TextOptions are /stats query parameters: filter (a regex on the stat
// name) and usedonly (stats never written are left out).
type TextOptions struct {
	Filter   *regexp.Regexp
	UsedOnly bool
}

func (o TextOptions) keep(m *metric) bool {
	if o.Filter != nil && !o.Filter.MatchString(m.name) {
		return false
	}
	return !o.UsedOnly || m.used.Load()
}

// Envoy's supported quantiles, in /stats order.
var quantiles = []float64{0, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 100}

// WriteText renders the plain /stats page as Envoy does: counters and
// gauges as "name: value" sorted by name, then histograms as
// "name: P0(interval,cumulative) P25(…) …" or "No recorded values".
// Quantiles are estimated from the bucket bounds (Envoy's own histogram
// is finer); there is no flush interval here, so interval = cumulative.
func (s *Store) WriteText(w io.Writer, opt TextOptions) error {
	var b strings.Builder
	all := s.snapshot()
	for _, m := range all {
		if m.kind != httpfilter.MetricHistogram && opt.keep(m) {
			fmt.Fprintf(&b, "%s: %d\n", m.name, m.value.Load())
		}
	}
	for _, m := range all {
		if m.kind != httpfilter.MetricHistogram || !opt.keep(m) {
			continue
		}
		if m.value.Load() == 0 {
			fmt.Fprintf(&b, "%s: No recorded values\n", m.name)
			continue
		}
		parts := make([]string, len(quantiles))
		for i, q := range quantiles {
			v := formatFloat(m.quantile(q / 100))
			parts[i] = fmt.Sprintf("P%s(%s,%s)", formatFloat(q), v, v)
		}
		fmt.Fprintf(&b, "%s: %s\n", m.name, strings.Join(parts, " "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON renders /stats?format=json: {"stats":[{"name","value"}…,
// {"histograms":{supported_quantiles, computed_quantiles}}]}.
func (s *Store) WriteJSON(w io.Writer, opt TextOptions) error {
	type qv struct {
		Interval   *float64 `json:"interval"`
		Cumulative *float64 `json:"cumulative"`
	}
	type cq struct {
		Name   string `json:"name"`
		Values []qv   `json:"values"`
	}
	var out []any
	var hists []cq
	for _, m := range s.snapshot() {
		if !opt.keep(m) {
			continue
		}
		if m.kind != httpfilter.MetricHistogram {
			out = append(out, map[string]any{"name": m.name, "value": m.value.Load()})
			continue
		}
		h := cq{Name: m.name}
		for _, q := range quantiles {
			var v qv // null when nothing was recorded, as Envoy writes it
			if m.value.Load() > 0 {
				f := m.quantile(q / 100)
				v = qv{&f, &f}
			}
			h.Values = append(h.Values, v)
		}
		hists = append(hists, h)
	}
	if hists != nil {
		out = append(out, map[string]any{"histograms": map[string]any{"supported_quantiles": quantiles, "computed_quantiles": hists}})
	}
	if out == nil {
		out = []any{}
	}
	return json.NewEncoder(w).Encode(map[string]any{"stats": out})
}

// quantile estimates the q-th quantile (0..1) as the upper bound of the
// bucket where the cumulative count reaches q·count.
func (m *metric) quantile(q float64) float64 {
	count := m.value.Load()
	want := int64(math.Ceil(q * float64(count)))
	if want < 1 {
		want = 1
	}
	for i, bound := range defaultBuckets {
		if m.buckets[i].Load() >= want {
			return bound
		}
	}
	return defaultBuckets[len(defaultBuckets)-1]
}

// sanitize maps a stat name to Prometheus' alphabet as Envoy does: every
// character outside [a-zA-Z0-9_] becomes "_".
func sanitize(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return '_'
	}, name)
}
