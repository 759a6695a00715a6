package wasmhost

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/hostapi"
)

// quietHost answers the chime filter's calls to cluster chime_host as a
// host with nothing due would: every session quiet for an hour, the
// generation steady (polls held for a while, as the host holds them).
type quietHost struct {
	mu       sync.Mutex
	polls    int
	prepares int
}

func (*quietHost) HasCluster(name string) bool { return name == "chime_host" }

func (q *quietHost) Call(ctx context.Context, _ string, headers httpfilter.Headers, _ []byte, _ httpfilter.Headers, _ time.Duration) (*httpfilter.CallResponse, error) {
	p, _ := headers.Get(":path")
	path, _, _ := strings.Cut(p, "?")
	var answer any
	switch path {
	case hostapi.PathPrepare:
		q.mu.Lock()
		q.prepares++
		q.mu.Unlock()
		answer = hostapi.PrepareResponse{Tools: append([]string{hostapi.ClockToolName}, hostapi.TimerToolNames()...),
			Generation: 42, QuietMs: 3_600_000, NTP: hostapi.NTPInfo{Status: "ok"}}
	case hostapi.PathState:
		q.mu.Lock()
		q.polls++
		held := q.polls > 1
		q.mu.Unlock()
		if held { // the first answer at once, later ones after a hold
			select {
			case <-time.After(500 * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		answer = hostapi.StateResponse{NowMs: time.Now().UnixMilli(), NTP: hostapi.NTPInfo{Status: "ok"}, Generation: 42}
	default:
		answer = map[string]any{}
	}
	body, err := json.Marshal(answer)
	if err != nil {
		return nil, err
	}
	return &httpfilter.CallResponse{Headers: httpfilter.Headers{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "application/json"}}, Body: body}, nil
}

var chimeWasmOnce = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("CHIME_WASM"); p != "" {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "chime-wasm-bench")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "chime.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "../../../plugin")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building chime.wasm: %v\n%s", err, b)
	}
	return out, nil
})

// benchRequest is a request the benchmark sends: a path and a body.
type benchRequest struct {
	name, path string
	body       []byte
	respType   string
	respBody   []byte
}

// benchRequests are a 1 KB chat request and Claude Code's first request
// of a session as captured (llm/testdata/clients): 24 tools of its own,
// 18 KB, the shape most requests through chime have; that request is
// answered with a short text, and with thinking and a call of its Bash
// tool.
func benchRequests(b *testing.B) []benchRequest {
	raw, err := os.ReadFile("../../../llm/testdata/clients/claude-code-2.1.197-messages-turn1.json")
	if err != nil {
		b.Fatal(err)
	}
	var captured struct {
		Path string          `json:"path"`
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(raw, &captured); err != nil {
		b.Fatal(err)
	}
	stream, err := os.ReadFile("../../../llm/testdata/responses/messages_text.sse")
	if err != nil {
		b.Fatal(err)
	}
	// What Claude Code usually gets back: thinking, a line of text and a
	// call of one of its own tools, streamed.
	agent, err := os.ReadFile("../../../llm/testdata/responses/messages_agent.sse")
	if err != nil {
		b.Fatal(err)
	}
	return []benchRequest{
		{"chat-1KB", "/v1/chat/completions", []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 1000) + `"}]}`),
			"application/json", []byte(`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)},
		{"claude-code", captured.Path, captured.Body, "text/event-stream", stream},
		{"claude-code-tool-use", captured.Path, captured.Body, "text/event-stream", agent},
	}
}

// chimeFilter starts chime.wasm (code) in this runtime against a quiet
// host, and sends requests of 16 sessions in turn until they skip
// prepare.
func chimeFilter(b *testing.B, code string, req benchRequest) (*Factory, func(*callbackTimes) bool) {
	b.Helper()
	host := &quietHost{}
	cfg, env, logs, _, _, _ := testConfig(b, `{"hostCluster":"chime_host","token":"tok","allowOnHeadersStopIteration":true}`, func(c *httpfilter.WasmConfig, e *httpfilter.Env) {
		c.CodePath, c.VMID, c.RootID = code, "vm-"+code, "chime"
		c.VMConfiguration = nil
		e.Clusters = host
	})
	logs.min = 100 // record nothing
	f, err := newFactory(cfg, env)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	body := req.body
	// 16 sessions in turn, as BenchmarkProxyOverhead's clients send them:
	// a proxy interleaves many sessions' requests.
	var sessions [16]string
	for i := range sessions {
		sessions[i] = fmt.Sprintf("bench-%d", i)
	}
	next := 0
	respLength := strconv.Itoa(len(req.respBody))
	send := func(laps *callbackTimes) (skipped bool) {
		fs := newFakeStream(nil, 0)
		sid := sessions[next%len(sessions)]
		next++
		fs.req = httpfilter.Headers{{Key: ":method", Value: "POST"}, {Key: ":path", Value: req.path},
			{Key: ":authority", Value: "api"}, {Key: "content-type", Value: "application/json"},
			{Key: "content-length", Value: fmt.Sprint(len(body))}, {Key: "x-chime-session", Value: sid}}
		reqBody := &httpfilter.Buffer{Bytes: append([]byte(nil), body...)}
		respBody := &httpfilter.Buffer{Bytes: append([]byte(nil), req.respBody...)}
		laps.start()
		flt, err := f.NewFilter(fs)
		if err != nil {
			b.Fatal(err)
		}
		laps.lap(cbCreate)
		flt.DecodeHeaders(&fs.req, false)
		laps.lap(cbRequestHeaders)
		skipped = flt.DecodeData(reqBody, true) == httpfilter.DataContinue
		laps.lap(cbRequestBody)
		fs.resp = httpfilter.Headers{{Key: ":status", Value: "200"}, {Key: "content-type", Value: req.respType}}
		if req.respType == "application/json" { // as net/http sends a body written at once
			fs.resp = append(fs.resp, httpfilter.Header{Key: "content-length", Value: respLength})
		}
		flt.EncodeHeaders(&fs.resp, false)
		laps.lap(cbResponseHeaders)
		flt.EncodeData(respBody, true)
		laps.lap(cbResponseBody)
		flt.OnStreamComplete()
		laps.lap(cbComplete)
		return skipped
	}
	deadline := time.Now().Add(10 * time.Second)
	for skipped := 0; skipped < len(sessions); { // every session's in a row
		if send(&callbackTimes{}) {
			skipped++
			continue
		}
		skipped = 0
		if time.Now().After(deadline) {
			b.Fatal("requests still wait for the host after 10 s")
		}
		time.Sleep(5 * time.Millisecond) // the prepare and poll answers arrive asynchronously
	}
	return f, send
}

// BenchmarkChimeFilter runs chime.wasm's request path in this runtime: a
// request of a quiet session (benchRequests) (no prepare, the common case,
// docs/architecture.md#skipping-prepare) and a JSON answer that needs no
// continuation, every callback from proxy_on_context_create to
// proxy_on_delete, no network. CHIME_WASM names the module (default: built
// from ./plugin); CHIME_WASM_BEFORE an older one, measured in alternating
// rounds and reported as a ratio. CHIME_BENCH_EVICT=<MiB> (32 on this
// machine) evicts the caches before each request (evictBuffer). With -v it
// logs each callback's mean time.
func BenchmarkChimeFilter(b *testing.B) {
	for _, req := range benchRequests(b) {
		b.Run(req.name, func(b *testing.B) { benchChimeFilter(b, req) })
	}
}

func benchChimeFilter(b *testing.B, req benchRequest) {
	code, err := chimeWasmOnce()
	if err != nil {
		b.Fatal(err)
	}
	type mod struct {
		name  string
		send  func(*callbackTimes) bool
		best  time.Duration
		times callbackTimes
	}
	_, send := chimeFilter(b, code, req)
	mods := []*mod{{name: "this", send: send, best: time.Hour}}
	if before := os.Getenv("CHIME_WASM_BEFORE"); before != "" {
		_, send := chimeFilter(b, before, req)
		mods = append(mods, &mod{name: "before", send: send, best: time.Hour})
	}
	evict := evictBuffer(b)
	const perRound = 200
	for i := 0; i < b.N; i++ {
		for round := 0; round < 15; round++ {
			for _, m := range mods {
				var round callbackTimes
				for range perRound {
					for i := 0; i < len(evict); i += 64 {
						evict[i]++
					}
					if !m.send(&round) {
						b.Fatalf("%s: a request of a quiet session waited for the host", m.name)
					}
				}
				m.best = min(m.best, round.total()/perRound)
				m.times.add(&round)
			}
		}
	}
	for _, m := range mods {
		b.Logf("%-6s mean µs per callback: %s", m.name, m.times.String())
	}
	b.ReportMetric(float64(mods[0].best.Nanoseconds())/1000, "best-µs/request")
	if len(mods) == 2 {
		b.ReportMetric(float64(mods[1].best.Nanoseconds())/1000, "best-before-µs/request")
		b.ReportMetric(mods[0].best.Seconds()/mods[1].best.Seconds(), "this/before")
	}
}

// evictBuffer is $CHIME_BENCH_EVICT MiB that the benchmark writes a byte of
// per cache line before each request, outside the timed callbacks: a
// request then finds the guest's code and data as cold as a proxy under
// load leaves them (docs/performance.md), instead of as the hot loop does.
func evictBuffer(b *testing.B) []byte {
	v := os.Getenv("CHIME_BENCH_EVICT")
	if v == "" {
		return nil
	}
	mib, err := strconv.Atoi(v)
	if err != nil || mib < 0 || mib > 1024 {
		b.Fatalf("CHIME_BENCH_EVICT=%q: want MiB, 0 to 1024", v)
	}
	return make([]byte, mib<<20)
}

// The callbacks of one request, in order, as benchChimeFilter times them.
const (
	cbCreate = iota
	cbRequestHeaders
	cbRequestBody
	cbResponseHeaders
	cbResponseBody
	cbComplete // proxy_on_log, proxy_on_done, proxy_on_delete
	cbCount
)

var callbackNames = [cbCount]string{"create", "request headers", "request body", "response headers", "response body", "log+done+delete"}

// callbackTimes adds up the time of each callback over requests.
type callbackTimes struct {
	sum  [cbCount]time.Duration
	n    int
	last time.Time
}

func (c *callbackTimes) start() { c.last = time.Now(); c.n++ }

func (c *callbackTimes) lap(i int) {
	now := time.Now()
	c.sum[i] += now.Sub(c.last)
	c.last = now
}

func (c *callbackTimes) total() (t time.Duration) {
	for _, d := range c.sum {
		t += d
	}
	return t
}

func (c *callbackTimes) add(o *callbackTimes) {
	for i, d := range o.sum {
		c.sum[i] += d
	}
	c.n += o.n
}

func (c *callbackTimes) String() string {
	var sb strings.Builder
	for i, d := range c.sum {
		fmt.Fprintf(&sb, "%s %.1f  ", callbackNames[i], float64(d.Nanoseconds())/1000/float64(max(c.n, 1)))
	}
	return strings.TrimSpace(sb.String())
}
