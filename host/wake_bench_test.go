package host

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/storage"
)

// BenchmarkWakeRun measures one wake run against an upstream that acks at
// once, with and without a system event to carry (the event's ack and
// its delivery are the writes), 8 runs at a time as the scheduler runs them.
func BenchmarkWakeRun(b *testing.B) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		fmt.Fprint(w, `{"id":"c","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"HEARTBEAT_OK"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1}}`)
	}))
	defer up.Close()
	for _, withEvent := range []bool{false, true} {
		b.Run(fmt.Sprintf("event=%v", withEvent), func(b *testing.B) {
			f := newFixture(b, func(c *Config) { c.Clock = nil; c.Reentry = strings.TrimPrefix(up.URL, "http://") })
			const sessions = 64
			for i := range sessions {
				req := hostapi.ResolveRequest{RequestID: "r", SessionID: fmt.Sprint("s", i), Protocol: "chat", Path: "/v1/chat/completions",
					Headers: map[string]string{"authorization": "Bearer k"}, Request: json.RawMessage(chatBody), Turn: &llm.Turn{Text: "hi"}}
				if err := f.svc.keepTemplate(&req, req.Request, req.Turn); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			work := make(chan int)
			for range 8 {
				wg.Go(func() {
					for n := range work {
						sid := fmt.Sprint("s", n%sessions)
						reason := scheduler.ReasonManual
						if withEvent {
							if err := f.svc.EnqueueEvent(context.Background(), sid, storage.SystemEvent{Text: "job", ContextKey: "cron:j"}); err != nil {
								b.Error(err)
							}
							reason = scheduler.ReasonCron
						}
						if out := f.svc.runWake(context.Background(), sid, reason, 0); out.Failed {
							b.Error("run failed")
						}
					}
				})
			}
			start := time.Now()
			for n := range b.N {
				work <- n
			}
			close(work)
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "runs/s")
		})
	}
}
