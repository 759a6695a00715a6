package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// BenchmarkWakes10k (docs/scheduler.md, docs/cron.md): 10 000 sessions
// with a template, a heartbeat every minute and a cron job every 3 minutes (target main)
// on a `chime host` process, their wakes going through `chime proxy` to
// the mock. Sessions arrive over one heartbeat interval. It prints the host's RSS once every session
// has beaten at least once, and how late wake runs start against their
// due time (chime_wake_lateness_seconds, read from its buckets). Goals:
// p99 ≤ 50 ms, RSS ≤ 300 MB.
func BenchmarkWakes10k(b *testing.B) {
	const sessions = 10_000
	const every, jobEvery = 60 * time.Second, 3 * time.Minute
	for i := 0; i < b.N; i++ {
		d := newDemo(b)
		d.proxyAndMock(b)
		host := d.host(b)
		pid := host.cmd.Process.Pid
		baseRSS := rssMB(b, pid)
		reentry := strings.TrimPrefix(d.proxyURL, "http://")
		// Most heartbeats find nothing to say.
		acks := make([]map[string]any, 3*sessions)
		for i := range acks {
			acks[i] = map[string]any{"text": "HEARTBEAT_OK"}
		}
		d.script(b, acks...)

		var failed atomic.Int64
		work := make(chan int)
		var wg sync.WaitGroup
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		call := func(method, path string, body any) {
			raw, _ := json.Marshal(body)
			req, _ := http.NewRequest(method, d.hostURL+path, strings.NewReader(string(raw)))
			req.Header.Set("authorization", "Bearer "+hostToken)
			resp, err := client.Do(req)
			if err != nil {
				failed.Add(1)
				return
			}
			resp.Body.Close()
			if resp.StatusCode/100 != 2 {
				failed.Add(1)
			}
		}
		start := time.Now()
		for w := 0; w < 16; w++ {
			wg.Go(func() {
				for n := range work {
					sid := fmt.Sprintf("wake-bench-%d", n)
					call("POST", hostapi.PathTemplate, map[string]any{
						"requestId": "t-" + sid, "sessionId": sid, "protocol": "chat", "path": "/v1/chat/completions",
						"reentry": reentry, "headers": map[string]string{"authorization": "Bearer sk-bench"},
						"request": json.RawMessage(`{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"hello"}]}`),
						"turn":    map[string]any{"text": "hi", "finish": map[string]any{"reason": "stop"}},
					})
					call("PUT", "/api/sessions/"+sid+"/heartbeat", map[string]any{"enabled": true, "every": every.String()})
					call("POST", "/api/sessions/"+sid+"/jobs", map[string]any{"schedule": jobEvery.String(), "text": "bench job", "target": "main"})
				}
			})
		}
		// Sessions arrive spread over one heartbeat interval, as a fleet of
		// agents does, rather than all in the same second.
		pace := time.NewTicker(every / sessions)
		for n := 0; n < sessions; n++ {
			<-pace.C
			work <- n
		}
		pace.Stop()
		close(work)
		wg.Wait()
		setup := time.Since(start)
		// Lateness is also reported from here on: every session and job
		// exists, and the set-up's 30 000 writes no longer compete.
		afterSetup := readBuckets(b, d.hostURL, "chime_wake_lateness_seconds")
		// Every session beats and its job fires at least once within 3 minutes
		// of its set-up (some of the two coalesce into one run).
		deadline := time.Now().Add(jobEvery + setup + 30*time.Second)
		runs := 0.0
		for time.Now().Before(deadline) {
			runs = sumMetric(b, d.hostURL, "chime_wake_runs_total")
			if runs >= sessions && sumMetric(b, d.hostURL, "chime_cron_runs_total") >= sessions {
				break
			}
			// The mock keeps every request it got; a quarter of a million
			// bodies would make it, not the host, the slow part.
			d.clearMockRequests(b)
			time.Sleep(time.Second) // poll another process
		}
		rss := rssMB(b, pid)
		b.Logf("wake lateness buckets (le=count): %s", histogramBuckets(b, d.hostURL, "chime_wake_lateness_seconds"))
		final := readBuckets(b, d.hostURL, "chime_wake_lateness_seconds")
		p50, p99 := quantiles(b, final, nil, 0.5, 0.99)
		s50, s99 := quantiles(b, final, afterSetup, 0.5, 0.99)
		b.ReportMetric(s50*1000, "steady-late-p50-ms")
		b.ReportMetric(s99*1000, "steady-late-p99-ms")
		b.Logf("after set-up: lateness p50 ≤ %.0f ms, p99 ≤ %.0f ms", s50*1000, s99*1000)
		b.ReportMetric(runs, "runs")
		b.ReportMetric(rss, "host-RSS-MB")
		b.ReportMetric(p50*1000, "late-p50-ms")
		b.ReportMetric(p99*1000, "late-p99-ms")
		b.Logf("%d sessions set up in %s (%d failed); %.0f wake runs; host RSS %.0f MB (%.0f MB at start); lateness p50 ≤ %.0f ms, p99 ≤ %.0f ms (goals: p99 ≤ 50 ms, RSS ≤ 300 MB)",
			sessions, setup.Round(time.Millisecond), failed.Load(), runs, rss, baseRSS, p50*1000, p99*1000)
		if runs < sessions {
			b.Errorf("only %.0f of %d sessions were woken", runs, sessions)
		}
		b.Logf("cron: %.0f job runs, lateness p99 ≤ %.0f ms", sumMetric(b, d.hostURL, "chime_cron_runs_total"),
			1000*func() float64 {
				_, p := histogramQuantiles(b, d.hostURL, "chime_cron_lateness_seconds", 0.5, 0.99)
				return p
			}())
	}
}

// sumMetric sums a labelled counter over its labels.
func sumMetric(b *testing.B, hostURL, name string) float64 {
	total := 0.0
	for _, line := range strings.Split(getJSON(b, hostURL+"/metrics"), "\n") {
		if strings.HasPrefix(line, name+"{") {
			_, v, _ := strings.Cut(line, "} ")
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			total += f
		}
	}
	return total
}

// bucket is one cumulative histogram bucket.
type bucket struct{ le, count float64 }

// readBuckets reads a Prometheus histogram's buckets from /metrics.
func readBuckets(b *testing.B, hostURL, name string) []bucket {
	var buckets []bucket
	for _, line := range strings.Split(getJSON(b, hostURL+"/metrics"), "\n") {
		rest, ok := strings.CutPrefix(line, name+`_bucket{le="`)
		if !ok {
			continue
		}
		le, count, _ := strings.Cut(rest, `"} `)
		l, err := strconv.ParseFloat(le, 64)
		if le == "+Inf" {
			l, err = math.Inf(1), nil
		}
		c, err2 := strconv.ParseFloat(strings.TrimSpace(count), 64)
		if err != nil || err2 != nil {
			b.Fatalf("bad bucket line %q", line)
		}
		buckets = append(buckets, bucket{l, c})
	}
	return buckets
}

// quantiles returns the upper bound of the bucket holding each quantile
// of what was observed after base (nil: everything).
func quantiles(b *testing.B, buckets, base []bucket, qs ...float64) (float64, float64) {
	if len(buckets) == 0 {
		b.Fatal("histogram not found")
	}
	d := make([]bucket, len(buckets))
	for i, bk := range buckets {
		d[i] = bk
		if i < len(base) {
			d[i].count -= base[i].count
		}
	}
	total := d[len(d)-1].count
	if total == 0 {
		b.Fatal("histogram is empty")
	}
	out := make([]float64, len(qs))
	for i, q := range qs {
		for _, bk := range d {
			if bk.count >= q*total {
				out[i] = bk.le
				break
			}
		}
	}
	return out[0], out[1]
}

// histogramQuantiles is quantiles over a histogram's whole life.
func histogramQuantiles(b *testing.B, hostURL, name string, qs ...float64) (float64, float64) {
	return quantiles(b, readBuckets(b, hostURL, name), nil, qs...)
}

// histogramBuckets is a histogram's cumulative bucket counts, for the log.
func histogramBuckets(b *testing.B, hostURL, name string) string {
	var out []string
	for _, line := range strings.Split(getJSON(b, hostURL+"/metrics"), "\n") {
		if rest, ok := strings.CutPrefix(line, name+`_bucket{le="`); ok {
			le, count, _ := strings.Cut(rest, `"} `)
			out = append(out, le+"="+strings.TrimSpace(count))
		}
	}
	return strings.Join(out, " ")
}
