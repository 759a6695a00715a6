package delivery

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/storage"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// fixture is a queue on a fake clock over a fresh store.
type fixture struct {
	t     *testing.T
	clock *clockwork.FakeClock
	store *storage.Store
	q     *Queue
	stop  func()
}

func newFixture(t *testing.T, cfg Config) *fixture {
	t.Helper()
	fx := &fixture{t: t, clock: clockwork.NewFakeClockAt(t0)}
	if fc, ok := cfg.Clock.(*clockwork.FakeClock); ok {
		fx.clock = fc
	}
	if cfg.Store == nil {
		st, err := storage.Open(t.TempDir(), storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		cfg.Store = st
	}
	fx.store = cfg.Store
	cfg.Clock = fx.clock
	cfg.Logger = slog.New(slog.DiscardHandler)
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	fx.q = q
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = q.Run(ctx); close(done) }()
	fx.stop = func() { cancel(); q.Close(); <-done }
	t.Cleanup(func() { fx.stop() })
	if ds, _ := fx.store.PendingDeliveries(); len(ds) == 0 {
		fx.settle()
	}
	return fx
}

// settled reports that nothing is in flight and the dispatcher has armed
// its wait after the last change: advancing the clock now is exact.
func (q *Queue) settled() bool {
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range q.pending {
		if e.inflight || !e.nextAt.After(now) {
			return false
		}
	}
	return q.parked && q.handled == q.kicks
}

// settle waits (in real time, bounded) until the queue is settled.
func (fx *fixture) settle() {
	fx.t.Helper()
	fx.eventually("the queue to settle", fx.q.settled)
}

// eventually polls cond until it holds; it is synchronisation, not timing.
func (fx *fixture) eventually(what string, cond func() bool) {
	fx.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			fx.t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// advance moves the fake clock by d once the queue is settled, then
// waits for it to settle again.
func (fx *fixture) advance(d time.Duration) {
	fx.t.Helper()
	fx.settle()
	fx.clock.Advance(d)
	fx.settle()
}

func (fx *fixture) get(sid, id string) storage.Delivery {
	fx.t.Helper()
	d, ok, err := fx.store.GetDelivery(sid, id)
	if err != nil || !ok {
		fx.t.Fatalf("delivery %s/%s: %v %v", sid, id, ok, err)
	}
	return d
}

// hit is one request a receiver got.
type hit struct {
	key, sig string
	body     []byte
	at       time.Time // fake clock
}

// receiver is a webhook endpoint; answer decides each response (n is the
// 1-based attempt count of the request's key).
type receiver struct {
	mu     sync.Mutex
	hits   []hit
	byKey  map[string]int
	clock  clockwork.Clock
	answer func(w http.ResponseWriter, r *http.Request, n int)
	srv    *httptest.Server
}

func newReceiver(t *testing.T, clock clockwork.Clock, answer func(w http.ResponseWriter, r *http.Request, n int)) *receiver {
	rc := &receiver{byKey: map[string]int{}, clock: clock, answer: answer}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get(HeaderIdempotencyKey)
		rc.mu.Lock()
		rc.byKey[key]++
		n := rc.byKey[key]
		rc.hits = append(rc.hits, hit{key: key, sig: r.Header.Get(HeaderSignature), body: body, at: rc.clock.Now()})
		rc.mu.Unlock()
		rc.answer(w, r, n)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) snapshot() []hit {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]hit(nil), rc.hits...)
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.hits)
}
