package scheduler

import (
	"fmt"
	"log/slog"
	"testing"

	"github.com/chimehq/chime/storage"
)

func openStore(t *testing.T, dir string) *storage.Store {
	t.Helper()
	st, err := storage.Open(dir, storage.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestEventQueueDedupeCapacityAndAck(t *testing.T) {
	dir := t.TempDir()
	st := openStore(t, dir)
	for i := range 55 {
		if _, err := Enqueue(st, "s", storage.SystemEvent{ContextKey: fmt.Sprintf("k%d", i), Text: fmt.Sprint(i), At: int64(i)}); err != nil {
			t.Fatal(err)
		}
	}
	evs, err := Peek(st, "s")
	if err != nil || len(evs) != EventCapacity || evs[0].Text != "5" {
		t.Fatalf("%d events, first %+v, %v", len(evs), evs[0], err)
	}
	// The newer of one contextKey replaces the older, at the end.
	if _, err := Enqueue(st, "s", storage.SystemEvent{ContextKey: "k10", Text: "ten again", At: 100}); err != nil {
		t.Fatal(err)
	}
	evs, _ = Peek(st, "s")
	if len(evs) != EventCapacity || evs[len(evs)-1].Text != "ten again" {
		t.Fatalf("dedupe: %d, last %+v", len(evs), evs[len(evs)-1])
	}
	carried := evs[:3]
	// An event arriving during the run stays after the ack (and pushes the
	// oldest, which the run carried, out).
	if _, err := Enqueue(st, "s", storage.SystemEvent{ContextKey: "late", Text: "late", At: 200}); err != nil {
		t.Fatal(err)
	}
	if err := Ack(st, "s", carried); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = openStore(t, dir) // persisted
	defer st.Close()
	evs, _ = Peek(st, "s")
	if len(evs) != EventCapacity-2 || evs[len(evs)-1].Text != "late" || evs[0].Text != "8" {
		t.Fatalf("after ack: %d events, first %q, last %q", len(evs), evs[0].Text, evs[len(evs)-1].Text)
	}
	if _, err := Enqueue(st, "s", storage.SystemEvent{Text: ""}); err == nil {
		t.Fatal("empty text accepted")
	}
}
