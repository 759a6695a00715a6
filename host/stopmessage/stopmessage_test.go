package stopmessage

import (
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
)

var t0 = time.Date(2026, 2, 2, 21, 0, 0, 0, time.UTC)

func newStore(t testing.TB) *storage.Store {
	t.Helper()
	st, err := storage.Open("", storage.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func get(t *testing.T, st *storage.Store, sid string) (storage.StopMessage, bool) {
	t.Helper()
	m, ok, err := st.GetStopMessage(sid)
	if err != nil {
		t.Fatal(err)
	}
	return m, ok
}

func TestApplyDirective(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	m := New(st)
	const sid = "sess-dir"

	if err := m.ApplyDirective(sid, hostapi.HostDirective{Kind: hostapi.DirectiveStopMessage, Text: `keep "going"`}, t0); err != nil {
		t.Fatal(err)
	}
	got, ok := get(t, st, sid)
	want := storage.StopMessage{Text: `keep "going"`, MaxRepeats: 10, Used: 0, UpdatedAt: t0.UnixMilli()}
	if !ok || got != want {
		t.Fatalf("default N: got %+v %v, want %+v", got, ok, want)
	}

	// An explicit N replaces it and resets used.
	got.Used = 4
	if err := st.PutStopMessage(sid, got); err != nil {
		t.Fatal(err)
	}
	if err := m.ApplyDirective(sid, hostapi.HostDirective{Kind: hostapi.DirectiveStopMessage, Text: "next step", MaxRepeats: 3}, t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if got, ok = get(t, st, sid); !ok || got.Text != "next step" || got.MaxRepeats != 3 || got.Used != 0 || got.UpdatedAt != t0.Add(time.Minute).UnixMilli() {
		t.Fatalf("explicit N: %+v %v", got, ok)
	}

	// Invalid directives fail and leave the state alone.
	for _, d := range []hostapi.HostDirective{
		{Kind: hostapi.DirectiveStopMessage, Text: "x", MaxRepeats: -1},
		{Kind: hostapi.DirectiveStopMessage, Text: "  "},
		{Kind: hostapi.DirectiveClock},
	} {
		if err := m.ApplyDirective(sid, d, t0); err == nil {
			t.Errorf("%+v applied", d)
		}
	}
	if err := m.ApplyDirective("", hostapi.HostDirective{Kind: hostapi.DirectiveStopMessage, Text: "x"}, t0); err != ErrNoSession {
		t.Errorf("without a session: %v", err)
	}
	if got, _ = get(t, st, sid); got.Text != "next step" {
		t.Fatalf("an invalid directive changed the state: %+v", got)
	}

	if err := m.ApplyDirective(sid, hostapi.HostDirective{Kind: hostapi.DirectiveStopMessageClear}, t0); err != nil {
		t.Fatal(err)
	}
	if _, ok = get(t, st, sid); ok {
		t.Fatal("stopMessage:clear left the state")
	}
	// Clearing nothing is fine.
	if err := m.ApplyDirective(sid, hostapi.HostDirective{Kind: hostapi.DirectiveStopMessageClear}, t0); err != nil {
		t.Fatal(err)
	}
}

func TestActiveAndConsume(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	m := New(st)
	const sid = "sess-use"
	if m.Active(sid) || m.Active("") {
		t.Fatal("active without a state")
	}
	if _, ok, err := m.Consume(sid, t0); ok || err != nil {
		t.Fatalf("consume without a state: %v %v", ok, err)
	}
	if err := m.ApplyDirective(sid, hostapi.HostDirective{Kind: hostapi.DirectiveStopMessage, Text: "go on", MaxRepeats: 2}, t0); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		if !m.Active(sid) {
			t.Fatalf("inactive before use %d", i)
		}
		at := t0.Add(time.Duration(i) * time.Second)
		text, ok, err := m.Consume(sid, at)
		if err != nil || !ok || text != "go on" {
			t.Fatalf("use %d: %q %v %v", i, text, ok, err)
		}
		if got, _ := get(t, st, sid); got.Used != i || got.LastUsedAt != at.UnixMilli() {
			t.Fatalf("after use %d: %+v", i, got)
		}
	}
	// Used up: the state stays but no longer triggers.
	if m.Active(sid) {
		t.Fatal("active when used up")
	}
	if text, ok, err := m.Consume(sid, t0.Add(time.Hour)); ok || err != nil || text != "" {
		t.Fatalf("consume when used up: %q %v %v", text, ok, err)
	}
	if got, ok := get(t, st, sid); !ok || got.Used != 2 || got.LastUsedAt != t0.Add(2*time.Second).UnixMilli() {
		t.Fatalf("used-up state: %+v %v", got, ok)
	}
}

// docs/continuation.md: two chains of one session cannot both take the last repeat.
func TestConsumeLastRepeatOnce(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	m := New(st)
	const sid = "sess-race"
	if err := m.ApplyDirective(sid, hostapi.HostDirective{Kind: hostapi.DirectiveStopMessage, Text: "go", MaxRepeats: 1}, t0); err != nil {
		t.Fatal(err)
	}
	const chains = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	took := 0
	for range chains {
		wg.Go(func() {
			_, ok, err := m.Consume(sid, t0)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				took++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if took != 1 {
		t.Fatalf("%d chains took the last repeat", took)
	}
	if got, _ := get(t, st, sid); got.Used != 1 {
		t.Fatalf("used %d", got.Used)
	}
}
