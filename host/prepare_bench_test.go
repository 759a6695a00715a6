package host

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// BenchmarkPrepareConcurrentStopMessage: 1 000 prepare calls at once, each
// for its own session with one stopMessage directive, straight into
// Service.Prepare on an on-disk store (no admission control): what one
// prepare costs when many run together. Reports p50 and p99 latency.
func BenchmarkPrepareConcurrentStopMessage(b *testing.B) {
	const clients = 1000
	for n := 0; n < b.N; n++ {
		b.StopTimer()
		svc, err := New(Config{DataDir: b.TempDir(), Token: testToken}, quietLogger())
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		lat := make([]time.Duration, clients)
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				req := hostapi.PrepareRequest{RequestID: fmt.Sprintf("r-%d-%d", n, i), SessionID: fmt.Sprintf("s-%d-%d", n, i),
					Directives: []hostapi.HostDirective{{Kind: hostapi.DirectiveStopMessage, Text: "go on", MaxRepeats: 1}}}
				t0 := time.Now()
				ans := svc.Prepare(context.Background(), req)
				lat[i] = time.Since(t0)
				if !ans.MayContinue {
					b.Errorf("request %d: stopMessage not applied", i)
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		slices.Sort(lat)
		b.ReportMetric(float64(lat[clients/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(lat[clients*99/100].Microseconds())/1000, "p99-ms")
		_ = svc.Close()
		b.StartTimer()
	}
}
