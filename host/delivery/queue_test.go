package delivery

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/storage"
)

func TestParseLastEventID(t *testing.T) {
	for v, want := range map[string]uint64{"": 0, " 42 ": 42, "0": 0, "007": 7, "18446744073709551615": 1<<64 - 1} {
		if got, err := ParseLastEventID(v); err != nil || got != want {
			t.Errorf("%q: %d %v", v, got, err)
		}
	}
	for _, v := range []string{"-1", "1.5", "abc", "18446744073709551616", "1 2", "0x10", strings.Repeat("9", 30)} {
		if _, err := ParseLastEventID(v); !errors.Is(err, ErrLastEventID) || !strings.Contains(err.Error(), "want the decimal id") && !strings.Contains(err.Error(), "larger than") {
			t.Errorf("%q: %v", v, err)
		}
	}
}

func FuzzParseLastEventID(f *testing.F) {
	for _, s := range []string{"", "1", " 99 ", "abc", "-3", "18446744073709551616", "0000000000000000000001", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		n, err := ParseLastEventID(v)
		if err != nil {
			if !errors.Is(err, ErrLastEventID) {
				t.Fatalf("%q: unexpected error type %v", v, err)
			}
			return
		}
		tv := strings.TrimSpace(v)
		if tv == "" {
			if n != 0 {
				t.Fatalf("%q: %d", v, n)
			}
			return
		}
		if m, err := strconv.ParseUint(tv, 10, 64); err != nil || m != n {
			t.Fatalf("%q: parsed %d, strconv says %d %v", v, n, m, err)
		}
	})
}

func FuzzCheckItem(f *testing.F) {
	f.Add("s", "r", "text")
	f.Add("", "r", "t")
	f.Add("s/..", strings.Repeat("r", 600), "")
	f.Fuzz(func(t *testing.T, sid, run, text string) {
		err := CheckItem(Item{Session: sid, RunID: run, Text: text})
		ok := sid != "" && run != "" && len(run) <= maxRunIDBytes && text != "" && len(text) <= MaxTextBytes
		if (err == nil) != ok {
			t.Fatalf("%q %q %d bytes: %v", sid, run, len(text), err)
		}
	})
}

// Startup recovery sends what was pending in enqueue order; what the
// budget does not cover is deferred behind new entries, not dropped.
func TestRecoveryOrderAndBudget(t *testing.T) {
	st, err := storage.Open(t.TempDir(), storage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	// Five entries left pending by a host that stopped, across sessions.
	for i := range 5 {
		sid := "s" + strconv.Itoa(i%2)
		err := st.Update(func(tx *storage.Tx) error {
			seq, err := tx.NextDeliverySeq()
			if err != nil {
				return err
			}
			run := "old-" + strconv.Itoa(i)
			return tx.PutDelivery(storage.Delivery{ID: DeliveryID(sid, run), Seq: seq, SessionID: sid, RunID: run, Text: run,
				Connector: Webhook, Key: Key(run, Webhook), State: StateQueued, NextAt: t0.Add(-time.Hour).UnixMilli()})
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	// The receiver takes 30 s (of the fake clock) per delivery, one at a
	// time: the 60 s budget covers the first entries only.
	clk := clockwork.NewFakeClockAt(t0)
	var mu sync.Mutex
	var order []string
	arrived := make(chan struct{}, 16)
	release := make(chan struct{})
	rc := newReceiver(t, clk, func(w http.ResponseWriter, r *http.Request, n int) {
		mu.Lock()
		order = append(order, strings.TrimSuffix(r.Header.Get(HeaderIdempotencyKey), ":webhook"))
		mu.Unlock()
		arrived <- struct{}{}
		<-release
	})
	cfg := webhookConfig(rc.srv.URL)
	cfg.Store, cfg.Clock, cfg.Workers = st, clk, 1
	cfg.Webhook.Timeout = time.Hour
	fx := newFixture(t, cfg)
	// old-0 takes +0..30s, old-1 +30..60s: the budget runs out meanwhile.
	<-arrived
	clk.Advance(30 * time.Second)
	release <- struct{}{}
	<-arrived
	clk.Advance(30 * time.Second)
	fx.eventually("the rest deferred", func() bool {
		fx.q.mu.Lock()
		defer fx.q.mu.Unlock()
		n := 0
		for _, e := range fx.q.pending {
			if e.deferred {
				n++
			}
		}
		return n == 3
	})
	// A new entry goes before the deferred rest.
	if err := fx.q.Enqueue(context.Background(), Item{Session: "s9", RunID: "new-1", Text: "fresh"}); err != nil {
		t.Fatal(err)
	}
	release <- struct{}{}
	for range 4 {
		<-arrived
		release <- struct{}{}
	}
	fx.settle()
	mu.Lock()
	defer mu.Unlock()
	want := []string{"old-0", "old-1", "new-1", "old-2", "old-3", "old-4"}
	if strings.Join(order, ",") != strings.Join(want, ",") {
		t.Fatalf("order %v, want %v", order, want)
	}
	if ds, _ := st.PendingDeliveries(); len(ds) != 0 {
		t.Fatalf("still pending: %+v", ds)
	}
}
