package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/mockllm"
)

// BenchmarkTimers10k (docs/timers.md): 10 000 timers across 1 000
// sessions on a `chime host` process, 2 000 of them with a timer call
// held through `chime proxy` by a waiting client. It prints the host's
// RSS and goroutines while everything runs, and how late completions fire
// against their due time (from each timer's record: finishedAt − createdAt
// − total, millisecond resolution). Goals: RSS ≤ 300 MB, p99 ≤ 20 ms.
func BenchmarkTimers10k(b *testing.B) {
	const sessions, direct, waiting = 1000, 8000, 2000
	for i := 0; i < b.N; i++ {
		d := newDemo(b)
		d.proxyAndMock(b)
		host := d.host(b)
		pid := host.cmd.Process.Pid
		baseRSS := rssMB(b, pid)

		rng := rand.New(rand.NewPCG(1, 2))
		// Every timer ends 35–55 s after the run starts, after all are made.
		start := time.Now()
		due := func() float64 { return 35 + 20*rng.Float64() - time.Since(start).Seconds() }

		var failed atomic.Int64
		work := make(chan int)
		var wg sync.WaitGroup
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
		var mu sync.Mutex
		for w := 0; w < 16; w++ {
			wg.Go(func() {
				for n := range work {
					mu.Lock()
					total := due()
					mu.Unlock()
					args, _ := json.Marshal(map[string]any{"total_duration": total, "timeout_duration": 0.001, "timer_id": "", "reason": "bench"})
					body, _ := json.Marshal(map[string]any{"sessionId": fmt.Sprintf("bench-%d", n%sessions), "requestId": fmt.Sprintf("b-%d", n),
						"name": hostapi.TimerToolName, "arguments": json.RawMessage(args)})
					req, _ := http.NewRequest("POST", d.hostURL+"/v1/tools/execute", strings.NewReader(string(body)))
					req.Header.Set("authorization", "Bearer "+hostToken)
					resp, err := client.Do(req)
					if err != nil {
						failed.Add(1)
						continue
					}
					var r struct{ OK bool }
					_ = json.NewDecoder(resp.Body).Decode(&r)
					resp.Body.Close()
					if !r.OK {
						failed.Add(1)
					}
				}
			})
		}
		for n := 0; n < direct; n++ {
			work <- n
		}
		close(work)
		wg.Wait()
		created := time.Since(start)

		// The waiting clients: each on its own mock queue, one timer call
		// with no timeout, then the text the followup gets.
		for n := 0; n < waiting; n++ {
			mu.Lock()
			total := due()
			mu.Unlock()
			call := map[string]any{"name": hostapi.TimerToolName, "arguments": map[string]any{"total_duration": total, "timeout_duration": 0, "timer_id": "", "reason": "bench wait"}}
			if code, out := postJSON(b, d.mockURL+"/__mock/script?queue="+strconv.Itoa(n), nil,
				[]map[string]any{{"toolCalls": []any{call}}, {"text": "done"}}); code != 200 {
				b.Fatalf("script: %d %s", code, out)
			}
		}
		var answered, good atomic.Int64
		var cw sync.WaitGroup
		proxyClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: waiting, MaxConnsPerHost: waiting}}
		for n := 0; n < waiting; n++ {
			cw.Go(func() {
				body := fmt.Sprintf(`{"model":"m","messages":[{"role":"user","content":"wait %d"}]}`, n)
				req, _ := http.NewRequest("POST", d.proxyURL+"/v1/chat/completions", strings.NewReader(body))
				req.Header.Set("content-type", "application/json")
				req.Header.Set("x-chime-session", fmt.Sprintf("bench-%d", n%sessions))
				req.Header.Set(mockllm.QueueHeader, strconv.Itoa(n))
				resp, err := proxyClient.Do(req)
				if err != nil {
					return
				}
				var buf strings.Builder
				_, _ = bufio.NewReader(resp.Body).WriteTo(&buf)
				resp.Body.Close()
				answered.Add(1)
				if resp.StatusCode == 200 && strings.Contains(buf.String(), "done") {
					good.Add(1)
				}
			})
		}
		// Sample the host while every timer is live and 2 000 calls are held.
		time.Sleep(25*time.Second - time.Since(start)) // real time under test: the waits are real
		live := metricValue(b, d.hostURL, "chime_timers_live")
		peakRSS := rssMB(b, pid)
		goroutines := metricValue(b, d.hostURL, "go_goroutines")
		cw.Wait()
		time.Sleep(time.Second) // the direct timers' last completions

		var late []float64
		statuses := map[string]int{}
		for s := 0; s < sessions; s++ {
			for _, t := range gjson.Parse(getJSON(b, fmt.Sprintf("%s/api/sessions/bench-%d/timers", d.hostURL, s))).Array() {
				statuses[t.Get("status").String()]++
				if t.Get("status").String() == "Completed" {
					late = append(late, float64(t.Get("finishedAt").Int()-t.Get("createdAt").Int()-t.Get("totalMs").Int()))
				}
			}
		}
		slices.Sort(late)
		pct := func(p int) float64 {
			if len(late) == 0 {
				return -1
			}
			return late[(len(late)-1)*p/100]
		}
		var out strings.Builder
		fmt.Fprintf(&out, "\ntimers: %d direct (%d failed, made in %s) + %d held through the proxy (%d answered, %d complete)\n",
			direct, failed.Load(), created.Round(time.Millisecond), waiting, answered.Load(), good.Load())
		fmt.Fprintf(&out, "live at peak %.0f; statuses after %v\n", live, statuses)
		fmt.Fprintf(&out, "host RSS: %.0f MB idle, %.0f MB at peak (goal ≤ 300); goroutines at peak %.0f\n", baseRSS, peakRSS, goroutines)
		fmt.Fprintf(&out, "lateness ms: p50 %.0f  p99 %.0f  max %.0f (goal p99 ≤ 20)\n", pct(50), pct(99), pct(100))
		fmt.Fprint(os.Stdout, out.String())
		b.ReportMetric(peakRSS, "host-rss-MB")
		b.ReportMetric(goroutines, "goroutines")
		b.ReportMetric(pct(50), "late-p50-ms")
		b.ReportMetric(pct(99), "late-p99-ms")
		if statuses["Completed"] != direct+waiting {
			b.Fatalf("%d of %d timers completed", statuses["Completed"], direct+waiting)
		}
	}
}

// rssMB reads a process's resident set from /proc.
func rssMB(b *testing.B, pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

// metricValue reads one unlabelled metric from the host's /metrics.
func metricValue(b *testing.B, hostURL, name string) float64 {
	for _, line := range strings.Split(getJSON(b, hostURL+"/metrics"), "\n") {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	b.Fatalf("metric %s not found", name)
	return 0
}
