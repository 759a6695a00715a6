package host

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
)

// Benchmark data set: benchSessions sessions × benchTasksPer tasks. The
// first half has nothing due at t0; each session of the second half has
// benchDuePer tasks inside the due window.
const (
	benchSessions = 10000
	benchTasksPer = 20
	benchDuePer   = 2
)

var bench struct {
	once sync.Once
	dir  string
	fx   *fixture
	err  error
}

func TestMain(m *testing.M) {
	if os.Getenv(fullDiskEnv) != "" {
		os.Exit(fullDiskChild())
	}
	code := m.Run()
	if bench.fx != nil {
		_ = bench.fx.svc.Close()
	}
	if bench.dir != "" {
		_ = os.RemoveAll(bench.dir)
	}
	os.Exit(code)
}

func idleSession(i int) string { return fmt.Sprintf("bench-idle-%05d", i) }
func dueSession(i int) string  { return fmt.Sprintf("bench-due-%05d", i) }

// seedBulk writes sessions and their tasks in large transactions: one
// synchronous commit per chunk instead of one per task.
func seedBulk(st *storage.Store, sessions []storage.Session, tasks []storage.ClockTask) error {
	const chunk = 1000
	for start := 0; start < len(sessions); start += chunk {
		part := sessions[start:min(start+chunk, len(sessions))]
		if err := st.Update(func(tx *storage.Tx) error {
			for _, s := range part {
				if err := tx.PutSession(s); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for start := 0; start < len(tasks); start += chunk {
		part := tasks[start:min(start+chunk, len(tasks))]
		if err := st.Update(func(tx *storage.Tx) error {
			for _, t := range part {
				if err := tx.PutTask(t); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

func benchTask(sid string, n int, due time.Time) storage.ClockTask {
	return storage.ClockTask{
		TaskID: fmt.Sprintf("clk_%012d", n), SessionID: sid, DueAt: due.UnixMilli(),
		Task: fmt.Sprintf("benchmark reminder number %d: check the deployment and report back", n),
		Tool: "shell", Arguments: `{"cmd":"kubectl get pods"}`,
		CreatedAt: t0.Add(-time.Hour).UnixMilli(), UpdatedAt: t0.Add(-time.Hour).UnixMilli(),
	}
}

func benchFixture(b *testing.B) *fixture {
	bench.once.Do(func() {
		bench.dir, bench.err = os.MkdirTemp("", "chime-host-bench-")
		if bench.err != nil {
			return
		}
		clk := clockwork.NewFakeClockAt(t0)
		svc, err := New(Config{DataDir: bench.dir, Token: testToken, Clock: clk}, quietLogger())
		if err != nil {
			bench.err = err
			return
		}
		bench.fx = &fixture{svc: svc, clk: clk, dir: bench.dir}
		start := time.Now()
		sessions := make([]storage.Session, 0, benchSessions)
		tasks := make([]storage.ClockTask, 0, benchSessions*benchTasksPer)
		n := 0
		for i := range benchSessions / 2 {
			for _, sid := range []string{idleSession(i), dueSession(i)} {
				sessions = append(sessions, storage.Session{ID: sid, CreatedAt: t0.Add(-time.Hour).UnixMilli(), LastSeenAt: t0.Add(-time.Hour).UnixMilli()})
				for k := range benchTasksPer {
					due := t0.Add(time.Duration(k+1) * time.Hour)
					if sid == dueSession(i) && k < benchDuePer {
						due = t0.Add(time.Duration(k*20-10) * time.Second) // −10 s, +10 s
					}
					tasks = append(tasks, benchTask(sid, n, due))
					n++
				}
			}
		}
		bench.err = seedBulk(svc.store, sessions, tasks)
		fmt.Fprintf(os.Stderr, "seeded %d sessions, %d tasks in %v\n", len(sessions), len(tasks), time.Since(start).Round(time.Millisecond))
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.fx
}

// BenchmarkPrepare10kSessions measures POST /v1/filter/prepare through the
// handler, in process, over random sessions of a 10 000 × 20 task store.
// no-due: nothing to reserve (read-only path). due: two reminders reserved
// per call, one synchronous write; each call is rolled back afterwards,
// outside the measured latency, so the tasks stay due.
func BenchmarkPrepare10kSessions(b *testing.B) {
	fx := benchFixture(b)
	// Session touches are flushed in the background, as in Serve.
	ctx, cancel := context.WithCancel(context.Background())
	ticker := time.NewTicker(DefaultTouchSync)
	done := make(chan struct{})
	go func() { fx.svc.touches.Run(ctx, ticker.C); close(done) }()
	b.Cleanup(func() { cancel(); ticker.Stop(); <-done })

	for _, tc := range []struct {
		name    string
		session func(int) string
		wantDue bool
	}{
		{"no-due", idleSession, false},
		{"due", dueSession, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(1, 2))
			lat := make([]time.Duration, 0, b.N)
			h := fx.svc.Handler()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				rid := fmt.Sprintf("bench-%s-%d-%d", tc.name, b.N, i)
				body, _ := json.Marshal(hostapi.PrepareRequest{RequestID: rid, Protocol: "chat", SessionID: tc.session(rng.IntN(benchSessions / 2))})
				req := httptest.NewRequest(http.MethodPost, hostapi.PathPrepare, bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testToken)
				rec := httptest.NewRecorder()
				start := time.Now()
				h.ServeHTTP(rec, req)
				lat = append(lat, time.Since(start))
				if rec.Code != http.StatusOK {
					b.Fatalf("prepare: %d %s", rec.Code, rec.Body)
				}
				if reserved := bytes.Contains(rec.Body.Bytes(), []byte(`"reserved":true`)); reserved != tc.wantDue {
					b.Fatalf("reserved=%v, want %v: %s", reserved, tc.wantDue, rec.Body)
				}
				if tc.wantDue {
					if _, err := fx.svc.Rollback(context.Background(), rid); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			pct := func(p float64) float64 {
				return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
			}
			b.ReportMetric(pct(0.50), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
		})
	}
}
