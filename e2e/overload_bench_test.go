package e2e

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkOverloadStopMessage is issue 16's overload benchmark: 1 000
// concurrent clients, each with its own session and a stopMessage, through
// the proxy with the filter and the real host. It prints the fraction of
// continuations that ran, the prepares the host shed (those clients got
// their answer without the continuation: fail open), whether every client
// got a valid answer, and the p99 latency. It fails when a client gets no
// valid answer or a continuation is lost without being counted as shed.
func BenchmarkOverloadStopMessage(b *testing.B) {
	const clients = 1000
	var followups atomic.Int64
	upstreamPort := benchUpstream(b, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("x-request-id"), ":stop") {
			followups.Add(1)
		}
		w.Header().Set("content-type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})
	hostPort := startHostService(b)
	st := startStack(b, backends()[0], stackConfig{upstreamPort: upstreamPort, hostPort: hostPort,
		pluginConfig: `{"hostCluster":"chime_host","token":"` + hostToken + `"}`})
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients}, Timeout: 5 * time.Minute}
	defer client.CloseIdleConnections()

	for n := 0; n < b.N; n++ {
		followups.Store(0)
		shedBefore := scrapeMetric(b, fmt.Sprintf("http://127.0.0.1:%d/metrics", hostPort), "chime_prepare_shed_total")
		openBefore := scrapeMetric(b, st.adminURL+"/stats/prometheus", "chime_fail_open_total")
		lat := make([]time.Duration, clients)
		var bad atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for i := range clients {
			wg.Go(func() {
				body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"<**stopMessage:\"go on\",1**>hi %d-%d"}]}`, n, i)
				req, _ := http.NewRequest(http.MethodPost, st.listenURL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("content-type", "application/json")
				req.Header.Set("x-chime-session", fmt.Sprintf("overload-%d-%d", n, i))
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					bad.Add(1)
					return
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				lat[i] = time.Since(t0)
				if resp.StatusCode != http.StatusOK || !bytes.Contains(out, []byte(`"choices"`)) {
					bad.Add(1)
				}
			})
		}
		wg.Wait()
		elapsed := time.Since(start)
		shed := scrapeMetric(b, fmt.Sprintf("http://127.0.0.1:%d/metrics", hostPort), "chime_prepare_shed_total") - shedBefore
		failOpen := scrapeMetric(b, st.adminURL+"/stats/prometheus", "chime_fail_open_total") - openBefore
		ran := followups.Load()
		lr := loadResult{lat: lat, elapsed: elapsed}
		fmt.Fprintf(os.Stdout, "\noverload: %d clients with stopMessage: %d continuations ran (%.1f%%), %.0f prepares shed by the host, %.0f requests failed open (shed or late; counted by the filter), %d clients without a valid answer, p50 %s, p99 %s, %s total\n",
			clients, ran, 100*float64(ran)/clients, shed, failOpen, bad.Load(), lr.pct(50), lr.pct(99), elapsed.Round(time.Millisecond))
		b.ReportMetric(float64(ran)/clients, "continued-fraction")
		b.ReportMetric(float64(shed), "shed")
		b.ReportMetric(failOpen, "failed-open")
		b.ReportMetric(float64(lr.pct(99).Milliseconds()), "p99-ms")
		if bad.Load() != 0 {
			b.Fatalf("%d clients got no valid answer", bad.Load())
		}
		if float64(ran)+failOpen < clients*99/100 {
			b.Fatalf("%d continuations ran and %.0f requests failed open of %d: lost without being counted", ran, failOpen, clients)
		}
	}
}

// scrapeMetric reads one counter from a Prometheus text page, summed over
// its labels.
func scrapeMetric(b *testing.B, url, name string) float64 {
	b.Helper()
	resp, err := http.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sum := 0.0
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		sum += f
	}
	return sum
}
