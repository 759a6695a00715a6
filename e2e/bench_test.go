package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/mockllm"
)

// BenchmarkProxyOverhead measures chime proxy with chime.wasm and the real
// host service (Badger on disk, in-process) against the same proxy without
// the wasm filter, side by side in one run (rounds interleave the two so
// machine noise hits both), for 1 KB and 1 MB LLM request bodies with a
// session. It prints requests/s, p50 and p99, the throughput ratio and the
// added p50 latency of the request path.
func BenchmarkProxyOverhead(b *testing.B) {
	// A Messages stream answering in text, for Claude Code's request.
	messagesStream, err := os.ReadFile(filepath.Join(repoRoot(), "llm", "testdata", "responses", "messages_text.sse"))
	if err != nil {
		b.Fatal(err)
	}
	upstreamPort := benchUpstream(b, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/messages" { // Claude Code streams
			w.Header().Set("content-type", "text/event-stream")
			_, _ = w.Write(messagesStream)
			return
		}
		w.Header().Set("content-type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	})
	hostPort := startHostService(b)
	local := backends()[0]
	plugin := `{"hostCluster":"chime_host","token":"` + hostToken + `","allowOnHeadersStopIteration":true}`
	with := startStack(b, local, stackConfig{upstreamPort: upstreamPort, hostPort: hostPort, pluginConfig: plugin})
	without := startStack(b, local, stackConfig{upstreamPort: upstreamPort, hostPort: hostPort, withoutWasm: true})
	// CHIME_WASM_BEFORE names an older chime.wasm to measure in the same
	// rounds, as the row "filter before", for before/after ratios.
	var before *stack
	if f := os.Getenv("CHIME_WASM_BEFORE"); f != "" {
		before = startStack(b, local, stackConfig{upstreamPort: upstreamPort, hostPort: hostPort, pluginConfig: plugin, wasmFile: f})
	}
	// The same filter asking the host on every request: the "before" of
	// skipping prepare (docs/architecture.md#skipping-prepare), side by side.
	noSkip := startStack(b, local, stackConfig{upstreamPort: upstreamPort, hostPort: hostPort,
		pluginConfig: `{"hostCluster":"chime_host","token":"` + hostToken + `","allowOnHeadersStopIteration":true,"skipPrepare":false}`})

	type size struct {
		name     string
		path     string
		body     []byte
		requests int
	}
	claudeCode := loadClient(b, "claude-code-2.1.197-messages-turn1.json")
	sizes := []size{
		{"1KB", "/v1/chat/completions", chatBodyOfSize(1 << 10), 1500},
		{"1MB", "/v1/chat/completions", chatBodyOfSize(1 << 20), 120},
		// What a coding agent sends: Claude Code's first request of a
		// session as captured, 18 KB with 24 tools of its own, streamed.
		{"CC", claudeCode.path, []byte(claudeCode.body), 600},
	}
	const concurrency = 4
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-6s %-10s %10s %10s %10s\n", "body", "proxy", "req/s", "p50", "p99")
	for i := 0; i < b.N; i++ {
		for _, sz := range sizes {
			body := sz.body
			res := map[string]*loadResult{"filter": {}, "no filter": {}, "no skip": {}, "filter before": {}}
			names := []string{"no filter", "filter", "no skip"}
			urls := map[string]string{"no filter": without.listenURL, "filter": with.listenURL, "no skip": noSkip.listenURL}
			order := []string{"no filter", "filter", "no skip"}
			if before != nil {
				urls["filter before"] = before.listenURL
				order = append(order, "filter before")
			}
			// The rounds' orders balance position and carryover
			// (balancedOrders); the requests of three rounds are shared
			// out over them.
			rounds := balancedOrders(len(order))
			perRun := 3 * sz.requests / len(rounds)
			// A round to warm up, not counted: each stack's first load
			// of a size ran up to 1.5x slower (new connections, pools
			// and buffers growing, the heap finding its size), which
			// counted against whichever stack went first. It runs in the
			// last round's order, which does not end with the first
			// round's first stack.
			for _, k := range rounds[len(rounds)-1] {
				runLoad(b, urls[order[k]]+sz.path, body, sz.requests/3, concurrency)
			}
			for _, round := range rounds {
				for _, k := range round {
					res[order[k]].add(runLoad(b, urls[order[k]]+sz.path, body, perRun, concurrency))
				}
			}
			if before != nil {
				names = append(names, "filter before")
			}
			for _, name := range names {
				lr := res[name]
				fmt.Fprintf(&table, "%-6s %-10s %10.0f %10s %10s\n", sz.name, name, lr.rps(), lr.pct(50), lr.pct(99))
			}
			ratio := res["filter"].rps() / res["no filter"].rps()
			added := res["filter"].pct(50) - res["no filter"].pct(50)
			fmt.Fprintf(&table, "%-6s %-10s %10.2fx %10s (added p50)\n", sz.name, "ratio", ratio, added)
			noSkipRatio := res["no skip"].rps() / res["no filter"].rps()
			fmt.Fprintf(&table, "%-6s %-10s %10.2fx %10s (added p50, every request prepared)\n", sz.name, "ratio before", noSkipRatio, res["no skip"].pct(50)-res["no filter"].pct(50))
			b.ReportMetric(noSkipRatio, "throughput-ratio-noskip-"+sz.name)
			b.ReportMetric(ratio, "throughput-ratio-"+sz.name)
			b.ReportMetric(float64(added.Microseconds()), "added-p50-us-"+sz.name)
			if before != nil {
				was := res["filter before"].pct(50) - res["no filter"].pct(50)
				fmt.Fprintf(&table, "%-6s %-10s %10.2fx %10s (added p50 before)\n", sz.name, "before",
					res["filter before"].rps()/res["no filter"].rps(), was)
				b.ReportMetric(float64(was.Microseconds()), "added-p50-us-before-"+sz.name)
			}
		}
	}
	fmt.Fprintf(&table, "prepare calls skipped by the filter: %.0f of its %.0f requests\n",
		scrapeMetric(b, with.adminURL+"/stats/prometheus", "chime_prepare_skipped_total"),
		scrapeMetric(b, with.adminURL+"/stats/prometheus", "chime_requests_total"))
	fmt.Fprint(os.Stdout, table.String())
}

// balancedOrders is the order of n stacks in each round: a Williams
// design, in which every stack runs once per round, in every position
// equally often and right after every other stack equally often, and no
// stack runs twice in a row across a round's end. A stack measured right
// after itself finds its caches and connections warm, and one measured
// right after the stack that asks the host on every request inherits the
// host's background work. (With the stacks alternating forwards and
// backwards, as before, "no filter" and "filter before" ran twice in a row
// and "filter" never did. The same module in the "filter" and "filter
// before" slots still reads up to 0.07x apart at 1 KB in one run: that is
// the machine's noise, which only more runs average out.)
func balancedOrders(n int) [][]int {
	first := make([]int, n) // 0, 1, n-1, 2, n-2, ...
	for i, lo, hi := 1, 1, n-1; i < n; i++ {
		if i%2 == 1 {
			first[i], lo = lo, lo+1
		} else {
			first[i], hi = hi, hi-1
		}
	}
	var rows [][]int
	for r := range n {
		row := make([]int, n)
		for i, v := range first {
			row[i] = (v + r) % n
		}
		rows = append(rows, row)
	}
	if n%2 == 1 { // odd n needs the mirrored square as well
		for r := range n {
			row := slices.Clone(rows[r])
			slices.Reverse(row)
			rows = append(rows, row)
		}
	}
	// Chain the rows so that none starts with the stack the one before
	// it ended with.
	out := [][]int{rows[0]}
	rest := rows[1:]
	for len(rest) > 0 {
		last := out[len(out)-1]
		i := slices.IndexFunc(rest, func(r []int) bool { return r[0] != last[len(last)-1] })
		if i < 0 {
			i = 0
		}
		out = append(out, rest[i])
		rest = slices.Delete(rest, i, i+1)
	}
	return out
}

// startHostService runs the real host service in-process on a free port.
func startHostService(b *testing.B) int {
	b.Helper()
	svc, err := host.New(host.Config{DataDir: b.TempDir(), Token: hostToken}, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Serve(ctx, ln) }()
	b.Cleanup(func() { cancel(); <-done; svc.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// benchUpstream runs the provider of the benchmarks and returns its port:
// it reads each request body through, as a provider must, and answers
// with handler. It keeps nothing: the tests' recorder copies every body
// and header map, work that grows with the body (the filter's request is
// 8 KB larger than the client's, with the tools it adds) and that belongs
// to no proxy.
func benchUpstream(b *testing.B, handler http.HandlerFunc) int {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		handler(w, r)
	}))
	b.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// chatBodyOfSize builds a chat request of about n bytes.
func chatBodyOfSize(n int) []byte {
	const head, tail = `{"model":"m","messages":[{"role":"user","content":"`, `"}]}`
	pad := n - len(head) - len(tail)
	if pad < 1 {
		pad = 1
	}
	return []byte(head + strings.Repeat("a", pad) + tail)
}

type loadResult struct {
	lat     []time.Duration
	elapsed time.Duration
}

func (lr *loadResult) add(o loadResult) {
	lr.lat = append(lr.lat, o.lat...)
	lr.elapsed += o.elapsed
}

func (lr *loadResult) rps() float64 { return float64(len(lr.lat)) / lr.elapsed.Seconds() }

func (lr *loadResult) pct(p int) time.Duration {
	s := append([]time.Duration(nil), lr.lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if len(s) == 0 {
		return 0
	}
	return s[(len(s)-1)*p/100]
}

// runLoad sends n POSTs with the given concurrency and fails the benchmark
// on any non-200, so a broken proxy can never look fast.
func runLoad(b *testing.B, url string, body []byte, n, concurrency int) loadResult {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: concurrency}}
	defer client.CloseIdleConnections()
	lat := make([]time.Duration, n)
	var next int
	var mu sync.Mutex
	var wg sync.WaitGroup
	var failure error
	start := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= n {
					return
				}
				t0 := time.Now()
				req, _ := http.NewRequest("POST", url, bytes.NewReader(body))
				req.Header.Set("content-type", "application/json")
				req.Header.Set("x-chime-session", fmt.Sprintf("bench-%d", i%16))
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					mu.Lock()
					failure = err
					mu.Unlock()
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	if failure != nil {
		b.Fatalf("load against %s: %v", url, failure)
	}
	return loadResult{lat: lat, elapsed: time.Since(start)}
}

// BenchmarkSSEFirstByte measures time to the first SSE byte and total time
// of a pass-through streaming reply (mock provider, several text deltas)
// through chime proxy with the filter and the real host, against the same
// proxy without the filter, interleaved in one run.
func BenchmarkSSEFirstByte(b *testing.B) {
	mock := mockllm.New()
	upstream := httptest.NewServer(mock)
	b.Cleanup(upstream.Close)
	upPort := upstream.Listener.Addr().(*net.TCPAddr).Port
	hostPort := startHostService(b)
	local := backends()[0]
	plugin := `{"hostCluster":"chime_host","token":"` + hostToken + `","allowOnHeadersStopIteration":true}`
	with := startStack(b, local, stackConfig{upstreamPort: upPort, hostPort: hostPort, pluginConfig: plugin})
	without := startStack(b, local, stackConfig{upstreamPort: upPort, hostPort: hostPort, withoutWasm: true})
	body := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"stream please"}]}`)
	const rounds, perRound = 5, 40
	first := map[string][]time.Duration{}
	total := map[string][]time.Duration{}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
	defer client.CloseIdleConnections()
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			for _, v := range []struct {
				name string
				url  string
			}{{"no filter", without.listenURL}, {"filter", with.listenURL}} {
				for n := 0; n < perRound; n++ {
					req, _ := http.NewRequest("POST", v.url+"/v1/chat/completions", bytes.NewReader(body))
					req.Header.Set("x-chime-session", "bench-sse")
					t0 := time.Now()
					resp, err := client.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					buf := make([]byte, 1)
					if _, err := io.ReadFull(resp.Body, buf); err != nil {
						b.Fatal(err)
					}
					t1 := time.Now()
					rest, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 || !bytes.Contains(rest, []byte("[DONE]")) {
						b.Fatalf("%s: status %d, body %q", v.name, resp.StatusCode, rest)
					}
					first[v.name] = append(first[v.name], t1.Sub(t0))
					total[v.name] = append(total[v.name], time.Since(t0))
				}
			}
		}
	}
	p50 := func(d []time.Duration) time.Duration { lr := loadResult{lat: d}; return lr.pct(50) }
	var table strings.Builder
	fmt.Fprintf(&table, "\n%-10s %14s %14s\n", "proxy", "first byte p50", "total p50")
	for _, name := range []string{"no filter", "filter"} {
		fmt.Fprintf(&table, "%-10s %14s %14s\n", name, p50(first[name]), p50(total[name]))
	}
	over := p50(first["filter"]) - p50(first["no filter"])
	fmt.Fprintf(&table, "%-10s %14s %14s\n", "overhead", over, p50(total["filter"])-p50(total["no filter"]))
	fmt.Fprint(os.Stdout, table.String())
	b.ReportMetric(float64(over.Microseconds()), "first-byte-overhead-us")
}
