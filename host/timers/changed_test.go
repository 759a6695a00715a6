package timers

import (
	"sync"
	"testing"
	"time"
)

// TestChangedHook: every written transition tells Config.Changed its
// session (the dashboard's change stream), and LiveIn counts the
// session's live timers.
func TestChangedHook(t *testing.T) {
	var mu sync.Mutex
	var got []string
	f := newFixture(t, func(c *Config) {
		c.Changed = func(sid string) {
			mu.Lock()
			got = append(got, sid)
			mu.Unlock()
		}
	})
	rec, err := f.m.Create("s-1", "build", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Create("s-2", "other", time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Pause("s-1", rec.TimerID, time.Minute, "lunch"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Stop("s-1", rec.TimerID, "done"); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	want := []string{"s-1", "s-2", "s-1", "s-1"}
	if len(got) != len(want) {
		t.Fatalf("Changed calls %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Changed calls %v, want %v", got, want)
		}
	}
	if n := f.m.LiveIn("s-1"); n != 0 {
		t.Fatalf("LiveIn(s-1) = %d after stop, want 0", n)
	}
	if n := f.m.LiveIn("s-2"); n != 1 {
		t.Fatalf("LiveIn(s-2) = %d, want 1", n)
	}
}
