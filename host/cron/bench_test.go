package cron

import (
	"context"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

// latencySink records how late each job's text arrives against its due time.
type latencySink struct {
	due  []time.Time // by job index (the text)
	mu   sync.Mutex
	late []time.Duration
	done chan struct{}
}

func (s *latencySink) EnqueueEvent(_ context.Context, _, _, text string) error {
	now := time.Now()
	i, _ := strconv.Atoi(text)
	s.mu.Lock()
	s.late = append(s.late, now.Sub(s.due[i]))
	if len(s.late) == len(s.due) {
		close(s.done)
	}
	s.mu.Unlock()
	return nil
}

func (s *latencySink) Wake(string, string) {}

func (s *latencySink) RunIsolated(context.Context, string, string, string) error { return nil }

// BenchmarkCron10k: 10 000 at jobs of 1 000 sessions, due over one second,
// with the real clock and the loop of the host: how late each reaches the
// sink against its due time (p50, p99, max), and the heap a job takes
// (manager and in-memory store together).
func BenchmarkCron10k(b *testing.B) {
	const n = 10000
	var all []time.Duration
	var perJob float64
	for b.Loop() {
		b.StopTimer()
		st, err := storage.Open("", storage.Options{InMemory: true})
		if err != nil {
			b.Fatal(err)
		}
		sink := &latencySink{due: make([]time.Time, n), done: make(chan struct{})}
		m, err := New(Config{Store: st, Clock: timesource.Real(), Sink: sink, MaxPerSession: 100, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
		for i := range n {
			due := start.Add(time.Duration(i%1000) * time.Millisecond)
			sink.due[i] = due
			if _, err := m.Create(Spec{Session: "s" + strconv.Itoa(i%1000), Schedule: due.Format(time.RFC3339Nano), Text: strconv.Itoa(i)}); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perJob = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		if time.Now().After(start) {
			b.Fatal("creating the jobs took longer than the lead time")
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		b.StartTimer()
		go func() { _ = m.Run(ctx); close(done) }()
		select {
		case <-sink.done:
		case <-time.After(time.Minute):
			b.Fatal("not every job ran within a minute")
		}
		b.StopTimer()
		cancel()
		<-done
		_ = st.Close()
		all = append(all, sink.late...)
		b.StartTimer()
	}
	slices.Sort(all)
	q := func(p float64) float64 { return float64(all[int(p*float64(len(all)-1))]) / float64(time.Millisecond) }
	b.ReportMetric(q(0.50), "p50-late-ms")
	b.ReportMetric(q(0.99), "p99-late-ms")
	b.ReportMetric(q(1), "max-late-ms")
	b.ReportMetric(perJob, "heap-B/job")
}
