package clock

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/storage"
)

// t0 is the fixed start of every test clock.
var t0 = time.Date(2026, 2, 2, 21, 0, 0, 0, time.UTC)

// fakeClock is clockwork's fake clock with absolute moves for readable
// tests; it is the engine's injected clock.
type fakeClock struct{ *clockwork.FakeClock }

func newFakeClock(at time.Time) fakeClock { return fakeClock{clockwork.NewFakeClockAt(at)} }

// Set moves the clock to t (backwards too), firing the waits it passes.
func (c fakeClock) Set(t time.Time) { c.Advance(t.Sub(c.Now())) }

// Add moves the clock by d and returns the new time.
func (c fakeClock) Add(d time.Duration) time.Time {
	c.Advance(d)
	return c.Now()
}

type fixture struct {
	e     *Engine
	store *storage.Store
	clock fakeClock
}

func newFixture(t *testing.T, mod ...func(*Config)) *fixture {
	t.Helper()
	st, err := storage.Open("", storage.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return newFixtureOn(t, st, newFakeClock(t0), mod...)
}

func newFixtureOn(t *testing.T, st *storage.Store, clk fakeClock, mod ...func(*Config)) *fixture {
	t.Helper()
	cfg := Config{Store: st, Clock: clk, Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mod {
		m(&cfg)
	}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{e: e, store: st, clock: clk}
}

// result is a decoded tool result.
type result map[string]any

func (r result) ok() bool { v, _ := r["ok"].(bool); return v }

func (r result) errText() string { s, _ := r["error"].(string); return s }

func (f *fixture) call(t *testing.T, session, request, args string) result {
	t.Helper()
	return f.callCtx(t, context.Background(), session, request, args)
}

func (f *fixture) callCtx(t *testing.T, ctx context.Context, session, request, args string) result {
	t.Helper()
	raw := f.e.Execute(ctx, session, request, json.RawMessage(args))
	var r result
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatalf("result is not JSON: %s", raw)
	}
	if _, ok := r["ok"].(bool); !ok {
		t.Fatalf("result without ok: %s", raw)
	}
	return r
}

func mustOK(t *testing.T, r result) result {
	t.Helper()
	if !r.ok() {
		t.Fatalf("expected ok, got %v", r)
	}
	return r
}

func mustFail(t *testing.T, r result, want string) {
	t.Helper()
	if r.ok() {
		t.Fatalf("expected ok:false containing %q, got %v", want, r)
	}
	if !strings.Contains(r.errText(), want) {
		t.Fatalf("error %q does not contain %q", r.errText(), want)
	}
}

// item builds one strict-schema item.
func item(dueAt, task string) map[string]any {
	return map[string]any{"dueAt": dueAt, "task": task, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}
}

func args(action string, taskID string, items ...map[string]any) string {
	if items == nil {
		items = []map[string]any{}
	}
	b, _ := json.Marshal(map[string]any{"action": action, "items": items, "taskId": taskID})
	return string(b)
}

func iso(t time.Time) string { return t.Format(time.RFC3339) }

// schedule creates one task and returns its id.
func (f *fixture) schedule(t *testing.T, session, request string, it map[string]any) string {
	t.Helper()
	r := mustOK(t, f.call(t, session, request, args("schedule", "", it)))
	list := r["scheduled"].([]any)
	if len(list) != 1 {
		t.Fatalf("scheduled: %v", r)
	}
	return list[0].(map[string]any)["taskId"].(string)
}

func (f *fixture) task(t *testing.T, session, id string) storage.ClockTask {
	t.Helper()
	ct, ok, err := f.store.GetTask(session, id)
	if err != nil || !ok {
		t.Fatalf("task %s/%s: ok=%v err=%v", session, id, ok, err)
	}
	return ct
}

func (f *fixture) reserve(t *testing.T, session, request string) []Reminder {
	t.Helper()
	rs, err := f.e.Reserve(context.Background(), session, request, f.clock.Now())
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func ids(rs []Reminder) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.TaskID)
	}
	return out
}

func newFuzzStore(f *testing.F) *storage.Store {
	st, err := storage.Open("", storage.Options{InMemory: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = st.Close() })
	return st
}
