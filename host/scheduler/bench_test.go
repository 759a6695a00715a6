package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"
)

// BenchmarkScheduler10k: 10 000 sessions with a 2 s heartbeat on the real
// clock, runs that take 1 ms, 8 at a time. It reports how late runs start
// against their due time: the scheduler's own cost, without the run's.
func BenchmarkScheduler10k(b *testing.B) {
	const sessions = 10_000
	for range b.N {
		var mu sync.Mutex
		var late []time.Duration
		s := New(Config{
			Runner: RunnerFunc(func(context.Context, string, Reason, int) Outcome {
				time.Sleep(time.Millisecond) // the run's own work, in a benchmark
				return Outcome{}
			}),
			Observe: func(_ Reason, d time.Duration) { mu.Lock(); late = append(late, d); mu.Unlock() },
			Logger:  slog.New(slog.DiscardHandler),
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { _ = s.Run(ctx); close(done) }()
		now := time.Now()
		for i := range sessions {
			s.SetHeartbeat(fmt.Sprint("s", i), 2*time.Second, now.Add(time.Duration(i)*2*time.Second/sessions))
		}
		time.Sleep(6 * time.Second)
		cancel()
		<-done
		mu.Lock()
		slices.Sort(late)
		n := len(late)
		b.ReportMetric(float64(n), "runs")
		b.ReportMetric(float64(late[n/2].Microseconds())/1000, "late-p50-ms")
		b.ReportMetric(float64(late[n*99/100].Microseconds())/1000, "late-p99-ms")
		mu.Unlock()
	}
}
