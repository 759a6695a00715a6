package touch

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/chimehq/chime/storage"
)

func open(t *testing.T) *storage.Store {
	t.Helper()
	st, err := storage.Open(t.TempDir(), storage.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func TestFlushCreatesAndAdvances(t *testing.T) {
	t.Parallel()
	st := open(t)
	if err := st.Update(func(tx *storage.Tx) error {
		return tx.PutSession(storage.Session{ID: "old", CreatedAt: 10, LastSeenAt: 500, Route: "r"})
	}); err != nil {
		t.Fatal(err)
	}
	b := New(st, slog.New(slog.DiscardHandler))
	b.Touch("new", 100)
	b.Touch("new", 90)  // older: ignored
	b.Touch("old", 400) // older than stored: stored value kept
	b.Touch("", 1)
	if ms, ok := b.Get("new"); !ok || ms != 100 {
		t.Fatalf("pending new: %d %v", ms, ok)
	}
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(b.Pending()) != 0 {
		t.Fatalf("pending after flush: %v", b.Pending())
	}
	if s, ok, _ := st.GetSession("new"); !ok || s != (storage.Session{ID: "new", CreatedAt: 100, LastSeenAt: 100}) {
		t.Fatalf("new session: %+v %v", s, ok)
	}
	if s, _, _ := st.GetSession("old"); s != (storage.Session{ID: "old", CreatedAt: 10, LastSeenAt: 500, Route: "r"}) {
		t.Fatalf("old session changed: %+v", s)
	}
	b.Touch("old", 700)
	if err := b.Flush(); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := st.GetSession("old"); s.LastSeenAt != 700 || s.Route != "r" || s.CreatedAt != 10 {
		t.Fatalf("old session after touch: %+v", s)
	}
}

func TestFlushFailureKeepsTouches(t *testing.T) {
	t.Parallel()
	st := open(t)
	b := New(st, slog.New(slog.DiscardHandler))
	b.Touch("s", 5)
	_ = st.Close()
	if err := b.Flush(); err == nil {
		t.Fatal("flush on a closed store succeeded")
	}
	if ms, ok := b.Get("s"); !ok || ms != 5 {
		t.Fatalf("failed touch dropped: %d %v", ms, ok)
	}
}

func TestRunFlushesOnTickFullAndStop(t *testing.T) {
	t.Parallel()
	st := open(t)
	b := New(st, slog.New(slog.DiscardHandler))
	tick := make(chan time.Time)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { b.Run(ctx, tick); close(done) }()

	b.Touch("a", 1)
	tick <- time.Time{} // received: the flush of "a" runs before the next receive
	tick <- time.Time{}
	if _, ok, _ := st.GetSession("a"); !ok {
		t.Fatal("tick did not flush")
	}
	for i := range maxPending {
		b.Touch(string(rune('A'+i%26))+"-"+time.Duration(i).String(), 2)
	}
	tick <- time.Time{} // also drains whatever the full signal left
	b.Touch("z", 3)
	cancel()
	<-done
	if n := len(b.Pending()); n != 0 {
		t.Fatalf("%d touches left after stop", n)
	}
	if _, ok, _ := st.GetSession("z"); !ok {
		t.Fatal("final flush missing")
	}
	ss, _ := st.ListSessions()
	if len(ss) != maxPending+2 {
		t.Fatalf("sessions: %d, want %d", len(ss), maxPending+2)
	}
}
