package filter

import (
	"strings"
	"testing"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// BenchmarkSkippedRequest is one 1 KB chat request of a quiet session
// (skip.go), natively against proxytest: headers, body, response, done.
// The guest's allocations per request are the figure to watch: in the
// wasm module each one costs several times what it costs natively
// (docs/performance.md). The same benchmark runs inside wasm with
// `GOOS=wasip1 GOARCH=wasm go test -c` under a WASI runtime.
func BenchmarkSkippedRequest(b *testing.B) {
	e := newSkipEnv(b, `{"token":"tok"}`)
	quiet := hostapi.PrepareResponse{Tools: []string{hostapi.ClockToolName}, Generation: 42, QuietMs: 3_600_000}
	e.request("s1", "hi", quiet) // starts the first generation poll
	e.answerPoll(42)
	e.request("s1", "hi", quiet) // prepared: learns the quiet entry
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("a", 1000) + `"}]}`)
	respBody := []byte(`{"id":"x","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}]}`)
	hdrs := reqHeaders(llm.Chat, [2]string{"x-chime-session", "s1"})
	before := len(e.calls(hostapi.PathPrepare))
	b.ReportAllocs()
	for b.Loop() {
		id := e.h.InitializeHttpContext()
		e.h.CallOnRequestHeaders(id, hdrs, false)
		e.h.CallOnRequestBody(id, body, true)
		e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, false)
		e.h.CallOnResponseBody(id, respBody, true)
		e.h.CompleteHttpContext(id)
	}
	if n := len(e.calls(hostapi.PathPrepare)) - before; n != 0 {
		b.Fatalf("%d requests were prepared, want every one skipped", n)
	}
}
