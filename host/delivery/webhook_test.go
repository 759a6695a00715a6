package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
)

func withClock(c Config, clk *clockwork.FakeClock) Config { c.Clock = clk; return c }

func webhookConfig(url string) Config {
	return Config{Connectors: []string{Webhook}, Webhook: WebhookConfig{URL: url, Secret: "s3cret", Timeout: 30 * time.Second}}
}

func item(sid, run string) Item {
	return Item{Session: sid, RunID: run, Reason: "interval", Text: "the build is green", At: t0}
}

// Fails three times, then takes it: delivered on the 4th attempt, at 0,
// 5s, 25s and 2m, with the same idempotency key and a valid signature.
func TestWebhookDeliveredOnFourthAttempt(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	var fx *fixture
	rc := newReceiver(t, clk, func(w http.ResponseWriter, r *http.Request, n int) {
		if n <= 3 {
			http.Error(w, "not yet", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	cfg := webhookConfig(rc.srv.URL)
	cfg.Clock = clk
	fx = newFixture(t, cfg)
	if err := fx.q.Enqueue(context.Background(), item("s1", "wake:s1:1")); err != nil {
		t.Fatal(err)
	}
	id := DeliveryID("s1", "wake:s1:1")
	fx.settle()
	for _, wait := range DefaultBackoff[:3] {
		if d := fx.get("s1", id); d.State != StateQueued {
			t.Fatalf("before the retry: %+v", d)
		}
		fx.advance(wait - time.Millisecond)
		if got := rc.count(); got >= 4 {
			t.Fatalf("retried before the backoff: %d hits", got)
		}
		fx.advance(time.Millisecond)
	}
	d := fx.get("s1", id)
	if d.State != StateDelivered || d.Attempts != 4 || d.DeliveredAt == 0 {
		t.Fatalf("after the 4th attempt: %+v", d)
	}
	hits := rc.snapshot()
	if len(hits) != 4 {
		t.Fatalf("hits: %d", len(hits))
	}
	want := []time.Duration{0, 5 * time.Second, 30 * time.Second, 150 * time.Second}
	for i, h := range hits {
		if h.key != "wake:s1:1:webhook" {
			t.Fatalf("hit %d key %q", i, h.key)
		}
		if !VerifySignature("s3cret", h.body, h.sig) {
			t.Fatalf("hit %d: bad signature %q", i, h.sig)
		}
		if got := h.at.Sub(t0); got != want[i] {
			t.Fatalf("hit %d at +%s, want +%s", i, got, want[i])
		}
	}
	var p Payload
	if err := json.Unmarshal(hits[3].body, &p); err != nil {
		t.Fatal(err)
	}
	if p != (Payload{Session: "s1", RunID: "wake:s1:1", Reason: "interval", Text: "the build is green", At: "2026-11-23T12:00:00.000Z"}) {
		t.Fatalf("payload %+v", p)
	}
	if fx.q.Depth() != 0 {
		t.Fatalf("depth %d", fx.q.Depth())
	}
}

// Never takes it: failed after 5 attempts, kept, not retried by itself;
// a retry by hand sends it again with the same key.
func TestWebhookFailedAfterFiveAttempts(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	var mu sync.Mutex
	accept := false
	rc := newReceiver(t, clk, func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		ok := accept
		mu.Unlock()
		if ok {
			return
		}
		http.Error(w, "no", http.StatusInternalServerError)
	})
	fx := newFixture(t, withClock(webhookConfig(rc.srv.URL), clk))
	if err := fx.q.Enqueue(context.Background(), item("s1", "cron:1")); err != nil {
		t.Fatal(err)
	}
	id := DeliveryID("s1", "cron:1")
	fx.settle()
	for _, wait := range DefaultBackoff {
		fx.advance(wait)
	}
	d := fx.get("s1", id)
	if d.State != StateFailed || d.Attempts != MaxAttempts || !strings.Contains(d.LastError, "500") {
		t.Fatalf("after 5 attempts: %+v", d)
	}
	fx.advance(24 * time.Hour)
	if rc.count() != MaxAttempts {
		t.Fatalf("failed entry retried by itself: %d hits", rc.count())
	}
	if ds, _ := fx.q.List("s1", StateFailed); len(ds) != 1 {
		t.Fatalf("failed list: %+v", ds)
	}
	if _, err := fx.q.Retry("s1", "d_nope"); !errors.Is(err, ErrUnknownID) {
		t.Fatalf("retry of an unknown id: %v", err)
	}
	mu.Lock()
	accept = true
	mu.Unlock()
	if _, err := fx.q.Retry("s1", id); err != nil {
		t.Fatal(err)
	}
	fx.settle()
	if d := fx.get("s1", id); d.State != StateDelivered || d.Attempts != 1 {
		t.Fatalf("after the retry by hand: %+v", d)
	}
	if _, err := fx.q.Retry("s1", id); !errors.Is(err, ErrNotRetrying) {
		t.Fatalf("retry of a delivered entry: %v", err)
	}
	for _, h := range rc.snapshot() {
		if h.key != "cron:1:webhook" {
			t.Fatalf("key %q", h.key)
		}
	}
}

// Reads the body, then never answers: unknown after the timeout, retried
// with the same key; the receiver dedupes, so the user sees it once.
func TestWebhookTimeoutIsUnknown(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	gotBody := make(chan struct{}, 4)
	var mu sync.Mutex
	seen := map[string]int{} // what the receiver acted on, by key
	rc := newReceiver(t, clk, func(w http.ResponseWriter, r *http.Request, n int) {
		key := r.Header.Get(HeaderIdempotencyKey)
		mu.Lock()
		first := seen[key] == 0
		seen[key]++
		mu.Unlock()
		if n == 1 {
			gotBody <- struct{}{}
			<-r.Context().Done() // the sender gives up
			return
		}
		if !first {
			w.Header().Set("X-Deduped", "1") // already acted on it
		}
	})
	fx := newFixture(t, withClock(webhookConfig(rc.srv.URL), clk))
	if err := fx.q.Enqueue(context.Background(), item("s1", "wake:s1:7")); err != nil {
		t.Fatal(err)
	}
	id := DeliveryID("s1", "wake:s1:7")
	<-gotBody
	fx.clock.Advance(30 * time.Second) // the webhook timeout
	fx.settle()
	d := fx.get("s1", id)
	if d.State != StateUnknown || d.Attempts != 1 || !strings.Contains(d.LastError, "outcome unknown") {
		t.Fatalf("after the timeout: %+v", d)
	}
	if ds, _ := fx.q.List("s1", StateUnknown); len(ds) != 1 {
		t.Fatalf("unknown list: %+v", ds)
	}
	fx.advance(DefaultBackoff[0])
	d = fx.get("s1", id)
	if d.State != StateDelivered || d.Attempts != 2 {
		t.Fatalf("after the retry: %+v", d)
	}
	hits := rc.snapshot()
	if len(hits) != 2 || hits[0].key != hits[1].key || hits[0].key != "wake:s1:7:webhook" {
		t.Fatalf("hits %+v", hits)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 {
		t.Fatalf("receiver saw %d distinct keys", len(seen))
	}
}

// A redirect is a failure, not followed.
func TestWebhookRedirectNotFollowed(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	var other int
	var omu sync.Mutex
	target := newReceiver(t, clk, func(http.ResponseWriter, *http.Request, int) { omu.Lock(); other++; omu.Unlock() })
	rc := newReceiver(t, clk, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Redirect(w, r, target.srv.URL, http.StatusTemporaryRedirect)
	})
	fx := newFixture(t, withClock(webhookConfig(rc.srv.URL), clk))
	if err := fx.q.Enqueue(context.Background(), item("s1", "r1")); err != nil {
		t.Fatal(err)
	}
	fx.settle()
	d := fx.get("s1", DeliveryID("s1", "r1"))
	if d.State != StateQueued || !strings.Contains(d.LastError, "redirects are not followed") {
		t.Fatalf("after a redirect: %+v", d)
	}
	omu.Lock()
	defer omu.Unlock()
	if other != 0 {
		t.Fatal("redirect followed")
	}
}

// Enqueue refuses bad items by field and is idempotent per run.
func TestEnqueueChecksAndDedupes(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	rc := newReceiver(t, clk, func(http.ResponseWriter, *http.Request, int) {})
	fx := newFixture(t, withClock(webhookConfig(rc.srv.URL), clk))
	for _, bad := range []Item{{RunID: "r", Text: "x"}, {Session: "s", Text: "x"}, {Session: "s", RunID: "r"}, {Session: "s", RunID: "r", Text: strings.Repeat("x", MaxTextBytes+1)}} {
		if err := fx.q.Enqueue(context.Background(), bad); !errors.Is(err, ErrBadItem) {
			t.Fatalf("%+v: %v", bad, err)
		}
	}
	for range 3 {
		if err := fx.q.Enqueue(context.Background(), item("s1", "same")); err != nil {
			t.Fatal(err)
		}
	}
	fx.settle()
	if ds, _ := fx.q.List("s1", ""); len(ds) != 1 || ds[0].State != StateDelivered {
		t.Fatalf("entries %+v", ds)
	}
	if rc.count() != 1 {
		t.Fatalf("hits %d", rc.count())
	}
}

// A session's own routing and webhook override the global ones; a session
// whose last interaction is not among its connectors gets the first.
func TestPerSessionRouting(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	ok := func(http.ResponseWriter, *http.Request, int) {}
	global, own := newReceiver(t, clk, ok), newReceiver(t, clk, ok)
	cfg := webhookConfig(global.srv.URL)
	cfg.Connectors = []string{SSE, Webhook}
	cfg.Sessions = map[string]SessionConfig{"ops": {Connectors: []string{Webhook}, Webhook: &WebhookConfig{URL: own.srv.URL}}}
	cfg.Clock = clk
	fx := newFixture(t, cfg)
	fx.q.Touch("ops", Session) // not among ops' connectors: the first, webhook
	fx.q.Touch("dev", Session) // not among the global ones: the first, sse
	if got := fx.q.Route("ops"); got != Webhook {
		t.Fatalf("ops routes to %q", got)
	}
	if got := fx.q.Route("dev"); got != SSE {
		t.Fatalf("dev routes to %q", got)
	}
	fx.q.Touch("dev", SSE)
	if got := fx.q.Route("dev"); got != SSE {
		t.Fatalf("dev after a subscription: %q", got)
	}
	for _, sid := range []string{"ops", "dev"} {
		if err := fx.q.Enqueue(context.Background(), item(sid, "r-"+sid)); err != nil {
			t.Fatal(err)
		}
	}
	fx.settle()
	if own.count() != 1 || global.count() != 0 {
		t.Fatalf("own %d, global %d", own.count(), global.count())
	}
	if h := own.snapshot()[0]; h.key != "r-ops:webhook" || h.sig != "" {
		t.Fatalf("ops hit %+v (the session's webhook has no secret)", h)
	}
	evs, err := fx.store.EventsAfter("dev", 0, 10)
	if err != nil || len(evs) != 1 || evs[0].Text != "the build is green" {
		t.Fatalf("dev's event log %+v %v", evs, err)
	}
	// The last channel is stored with the session.
	if s, _, _ := fx.store.GetSession("dev"); s.LastChannel != SSE {
		t.Fatalf("stored last channel %q", s.LastChannel)
	}
}
