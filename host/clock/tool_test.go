package clock

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/ntp"
)

func TestGet(t *testing.T) {
	updated := time.Date(2026, 2, 2, 20, 0, 0, 0, time.UTC)
	f := newFixture(t, func(c *Config) {
		c.NTP = func() ntp.State {
			return ntp.State{Status: ntp.StatusOK, OffsetMs: -12, Server: "time.google.com", UpdatedAt: updated}
		}
	})
	f.clock.Set(time.Date(2026, 2, 2, 21, 22, 38, 229e6, time.UTC))
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Fatal(err)
	}
	// get needs no session.
	r := mustOK(t, f.callCtx(t, WithLocation(context.Background(), la), "", "r", `{"action":"get","items":[],"taskId":""}`))
	want := map[string]any{
		"action": "get", "nowMs": float64(1770067358229), "utc": "2026-02-02T21:22:38.229Z",
		"local": "2026-02-02 13:22:38.229 -08:00", "timezone": "America/Los_Angeles",
	}
	for k, v := range want {
		if r[k] != v {
			t.Fatalf("%s = %v, want %v", k, r[k], v)
		}
	}
	n := r["ntp"].(map[string]any)
	if n["status"] != "ok" || n["offsetMs"] != float64(-12) || n["server"] != "time.google.com" || n["updatedAt"] != "2026-02-02T20:00:00.000Z" {
		t.Fatalf("ntp: %v", n)
	}

	// Default zone UTC; no NTP source reports disabled.
	g := newFixture(t)
	r = mustOK(t, g.call(t, "", "", `{"action":"get"}`))
	if r["timezone"] != "UTC" || r["local"] != "2026-02-02 21:00:00.000 +00:00" {
		t.Fatalf("default zone: %v", r)
	}
	if n := r["ntp"].(map[string]any); n["status"] != "disabled" || n["updatedAt"] != "" {
		t.Fatalf("ntp without source: %v", n)
	}
}

func TestArgumentErrors(t *testing.T) {
	f := newFixture(t)
	mustFail(t, f.call(t, "s", "r", `{"action":`), "not a valid clock call")
	mustFail(t, f.call(t, "s", "r", ``), "empty arguments")
	mustFail(t, f.call(t, "s", "r", `{"action":"explode","items":[],"taskId":""}`), `unknown action "explode"`)
	mustFail(t, f.call(t, "s", "r", `{"action":"schedule","items":"x","taskId":""}`), "not a valid clock call")
	// Arguments double-encoded as a JSON string (Chat Completions) work.
	mustOK(t, f.call(t, "s", "r", `"{\"action\":\"get\",\"items\":[],\"taskId\":\"\"}"`))
}

func TestNoSession(t *testing.T) {
	f := newFixture(t)
	for _, a := range []string{
		args("schedule", "", item(iso(t0.Add(time.Hour)), "x")),
		args("list", ""), args("cancel", "clk_1"), args("clear", ""),
		args("update", "clk_1", item("", "y")),
	} {
		mustFail(t, f.call(t, "", "r", a), "no session id")
	}
	if _, err := f.e.ApplyClear(context.Background(), ""); err == nil {
		t.Fatal("ApplyClear without session")
	}
	if rs, err := f.e.Reserve(context.Background(), "", "r", t0); rs != nil || err != nil {
		t.Fatalf("Reserve without session: %v %v", rs, err)
	}
}

func TestScheduleAndList(t *testing.T) {
	f := newFixture(t)
	later := item("2026-02-02T15:30:00-08:00", "check the deploy") // 23:30Z
	later["tool"], later["arguments"] = "bash", `{ "cmd": "make deploy" }`
	sooner := item("2026-02-02T22:00:00Z", "stand up")
	sooner["repeat"], sooner["maxRuns"] = "daily", 3
	r := mustOK(t, f.call(t, "sess", "req-1", args("schedule", "", later, sooner)))
	sched := r["scheduled"].([]any)
	if len(sched) != 2 || r["warning"] != nil {
		t.Fatalf("schedule: %v", r)
	}
	first := sched[0].(map[string]any)
	if first["dueAt"] != "2026-02-02T15:30:00-08:00" || first["task"] != "check the deploy" || !strings.HasPrefix(first["taskId"].(string), "clk_") {
		t.Fatalf("scheduled[0]: %v", first)
	}
	stored := f.task(t, "sess", first["taskId"].(string))
	if stored.Arguments != `{"cmd":"make deploy"}` || stored.Tool != "bash" || stored.UTCOffsetSec != -8*3600 || stored.NotBeforeRequestID != "" {
		t.Fatalf("stored: %+v", stored)
	}

	l := mustOK(t, f.call(t, "sess", "req-2", args("list", "")))
	items := l["items"].([]any)
	if len(items) != 2 {
		t.Fatalf("list: %v", l)
	}
	a, b := items[0].(map[string]any), items[1].(map[string]any)
	if a["task"] != "stand up" || a["repeat"] != "daily" || a["deliveryCount"] != float64(0) || a["deliveredAt"] != nil {
		t.Fatalf("list[0]: %v", a)
	}
	if b["task"] != "check the deploy" || b["repeat"] != "" {
		t.Fatalf("list[1]: %v", b)
	}
	sessions, err := f.store.ListSessions()
	if err != nil || len(sessions) != 1 || sessions[0].ID != "sess" {
		t.Fatalf("session record: %v %v", sessions, err)
	}
	// Empty list is [] not null.
	if l := mustOK(t, f.call(t, "empty", "r", args("list", ""))); fmt.Sprint(l["items"]) != "[]" {
		t.Fatalf("empty list: %v", l)
	}
}

func TestScheduleValidation(t *testing.T) {
	f := newFixture(t)
	future := iso(t0.Add(time.Hour))
	withRepeat := func(r string) map[string]any { it := item(future, "x"); it["repeat"] = r; return it }
	withMax := func(m any) map[string]any { it := withRepeat("daily"); it["maxRuns"] = m; return it }
	withArgs := func(a any) map[string]any { it := item(future, "x"); it["arguments"] = a; return it }
	cases := []struct {
		items []map[string]any
		want  string
	}{
		{nil, "at least one entry"},
		{[]map[string]any{item("2026-02-02T22:00:00", "x")}, "no UTC offset"},
		{[]map[string]any{item("tomorrow at 9", "x")}, "not an ISO8601 time"},
		{[]map[string]any{item("", "x")}, "dueAt is empty"},
		{[]map[string]any{item(future, "  ")}, "task is empty"},
		{[]map[string]any{item(future, strings.Repeat("a", maxTaskLen+1))}, "keep it under"},
		{[]map[string]any{item(iso(t0.Add(-21*time.Minute)), "x")}, "in the past"},
		{[]map[string]any{withRepeat("fortnightly")}, "5-field cron"},
		{[]map[string]any{withRepeat("61 * * * *")}, "not a valid 5-field cron"},
		{[]map[string]any{withRepeat("every 10s")}, "shorter than the minimum"},
		{[]map[string]any{withRepeat("every soon")}, "bad duration"},
		{[]map[string]any{withMax(-1)}, "whole number"},
		{[]map[string]any{withMax(1.5)}, "whole number"},
		{[]map[string]any{withArgs("{not json")}, "must be JSON text"},
		// one bad item rejects the whole batch
		{[]map[string]any{item(future, "good"), item("bad", "x")}, "items[1]"},
	}
	for _, c := range cases {
		r := f.call(t, "s", "r", args("schedule", "", c.items...))
		mustFail(t, r, c.want)
	}
	var many []map[string]any
	for i := 0; i <= maxItemsPerCall; i++ {
		many = append(many, item(future, "x"))
	}
	mustFail(t, f.call(t, "s", "r", args("schedule", "", many...)), "at most")
	if ts, _ := f.store.ListTasks("s"); len(ts) != 0 {
		t.Fatalf("rejected schedules wrote %d tasks", len(ts))
	}
}

func TestScheduleLenientInputs(t *testing.T) {
	f := newFixture(t)
	// No seconds; arguments as an object; maxRuns as a string; ignored maxRuns on a one-shot.
	it := item("2026-02-02T22:00Z", "x")
	it["arguments"] = map[string]any{"a": 1}
	it["tool"] = "t"
	it["maxRuns"] = 7
	id := f.schedule(t, "s", "r", it)
	got := f.task(t, "s", id)
	if got.Arguments != `{"a":1}` || got.MaxRuns != 0 || got.DueAt != t0.Add(time.Hour).UnixMilli() {
		t.Fatalf("%+v", got)
	}
	rep := item("", "every hour")
	rep["repeat"], rep["maxRuns"] = "every 1h", "2"
	id = f.schedule(t, "s", "r", rep)
	got = f.task(t, "s", id)
	if got.DueAt != t0.Add(time.Hour).UnixMilli() || got.MaxRuns != 2 || got.Repeat != "every 1h" {
		t.Fatalf("repeat with empty dueAt: %+v", got)
	}
	// A repeating task whose dueAt is long past rolls forward to the next occurrence.
	old := item(iso(t0.Add(-50*time.Hour)), "old daily")
	old["repeat"] = "daily"
	id = f.schedule(t, "s", "r", old)
	if got := f.task(t, "s", id); got.DueAt != t0.Add(-2*time.Hour+24*time.Hour).UnixMilli() {
		t.Fatalf("rolled forward to %v", time.UnixMilli(got.DueAt).UTC())
	}
}

func TestNearDuplicateWarning(t *testing.T) {
	f := newFixture(t)
	f.schedule(t, "s", "r", item(iso(t0.Add(time.Hour)), "first"))
	r := mustOK(t, f.call(t, "s", "r", args("schedule", "", item(iso(t0.Add(time.Hour+4*time.Minute)), "second"))))
	if w, _ := r["warning"].(string); !strings.Contains(w, `"first"`) || !strings.Contains(w, "within 5m0s") {
		t.Fatalf("no near-duplicate warning: %v", r)
	}
	r = mustOK(t, f.call(t, "s", "r", args("schedule", "", item(iso(t0.Add(2*time.Hour)), "far"))))
	if r["warning"] != nil {
		t.Fatalf("unexpected warning: %v", r)
	}
	// Within one batch, and exactly 5 minutes apart, still warns.
	r = mustOK(t, f.call(t, "s", "r", args("schedule", "",
		item(iso(t0.Add(5*time.Hour)), "a"), item(iso(t0.Add(5*time.Hour+5*time.Minute)), "b"))))
	if w, _ := r["warning"].(string); !strings.Contains(w, `"a"`) {
		t.Fatalf("batch near-duplicate: %v", r)
	}
	// Another session's task is not a duplicate.
	r = mustOK(t, f.call(t, "other", "r", args("schedule", "", item(iso(t0.Add(time.Hour)), "first"))))
	if r["warning"] != nil {
		t.Fatalf("cross-session warning: %v", r)
	}
}

func TestCancelAndIsolation(t *testing.T) {
	f := newFixture(t)
	id := f.schedule(t, "alice", "r", item(iso(t0.Add(time.Hour)), "alice's"))
	mustFail(t, f.call(t, "bob", "r", args("cancel", id)), "unknown taskId")
	mustFail(t, f.call(t, "alice/x", "r", args("cancel", id)), "unknown taskId")
	if rs := f.reserve(t, "bob", "r2"); len(rs) != 0 {
		t.Fatal("bob sees alice's reminders")
	}
	mustFail(t, f.call(t, "alice", "r", args("cancel", "")), "cancel needs taskId")
	mustFail(t, f.call(t, "alice", "r", args("cancel", "../"+id)), "unknown taskId")
	r := mustOK(t, f.call(t, "alice", "r", args("cancel", id)))
	if r["removed"] != id {
		t.Fatalf("cancel: %v", r)
	}
	mustFail(t, f.call(t, "alice", "r", args("cancel", id)), "unknown taskId")
}

func TestClear(t *testing.T) {
	f := newFixture(t)
	for i := 0; i < 3; i++ {
		f.schedule(t, "s", "r", item(iso(t0.Add(time.Duration(i+1)*time.Hour)), "t"))
	}
	keep := f.schedule(t, "s2", "r", item(iso(t0.Add(time.Hour)), "other"))
	r := mustOK(t, f.call(t, "s", "r", args("clear", "")))
	if r["removedCount"] != float64(3) {
		t.Fatalf("clear: %v", r)
	}
	if ts, _ := f.store.ListTasks("s"); len(ts) != 0 {
		t.Fatal("tasks left after clear")
	}
	f.task(t, "s2", keep)
	if r := mustOK(t, f.call(t, "s", "r", args("clear", ""))); r["removedCount"] != float64(0) {
		t.Fatalf("second clear: %v", r)
	}
}

func TestUpdate(t *testing.T) {
	f := newFixture(t)
	base := item(iso(t0.Add(time.Hour)), "original")
	base["tool"], base["arguments"], base["repeat"], base["maxRuns"] = "bash", `{"a":1}`, "daily", 5
	id := f.schedule(t, "s", "r", base)

	// "" and 0 keep fields.
	r := mustOK(t, f.call(t, "s", "r", args("update", id, item("", "renamed"))))
	u := r["updated"].(map[string]any)
	if u["task"] != "renamed" || u["tool"] != "bash" || u["arguments"] != `{"a":1}` || u["repeat"] != "daily" || u["maxRuns"] != float64(5) || u["dueAt"] != iso(t0.Add(time.Hour)) {
		t.Fatalf("keep semantics: %v", u)
	}
	// New dueAt and repeat once.
	ch := item("2026-02-02T14:00:00-08:00", "")
	ch["repeat"] = "once"
	u = mustOK(t, f.call(t, "s", "r", args("update", id, ch)))["updated"].(map[string]any)
	if u["dueAt"] != "2026-02-02T14:00:00-08:00" || u["repeat"] != "" || u["maxRuns"] != float64(0) || u["task"] != "renamed" {
		t.Fatalf("changes: %v", u)
	}

	mustFail(t, f.call(t, "s", "r", args("update", "clk_nope", item("", "x"))), "unknown taskId")
	mustFail(t, f.call(t, "other", "r", args("update", id, item("", "x"))), "unknown taskId")
	mustFail(t, f.call(t, "s", "r", args("update", "", item("", "x"))), "update needs taskId")
	mustFail(t, f.call(t, "s", "r", args("update", id)), "exactly one entry")
	mustFail(t, f.call(t, "s", "r", args("update", id, item("soon", ""))), "not an ISO8601")
	mustFail(t, f.call(t, "s", "r", args("update", id, item(iso(t0.Add(-time.Hour)), ""))), "in the past")
	bad := item("", "")
	bad["repeat"] = "every 1s"
	mustFail(t, f.call(t, "s", "r", args("update", id, bad)), "minimum")

	// Rescheduling a delivered task makes it deliverable again; moving it
	// into the due window stamps the updating request.
	f.clock.Set(t0.Add(time.Hour))
	if got := ids(f.reserve(t, "s", "r5")); len(got) != 1 {
		t.Fatalf("reserve before update: %v", got)
	}
	if n, err := f.e.Commit(context.Background(), "r5"); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	mustOK(t, f.call(t, "s", "r6", args("update", id, item(iso(t0.Add(time.Hour+30*time.Second)), ""))))
	got := f.task(t, "s", id)
	if got.DeliveredAt != 0 || got.NotBeforeRequestID != "r6" || got.DeliveryCount != 1 {
		t.Fatalf("after reschedule: %+v", got)
	}
	if rs := f.reserve(t, "s", "r6:followup"); len(rs) != 0 {
		t.Fatal("updating chain got the reminder")
	}
	if rs := f.reserve(t, "s", "r7"); len(rs) != 1 {
		t.Fatal("rescheduled task not deliverable")
	}
}

func TestMaxTasksPerSession(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxTasks = 2 })
	f.schedule(t, "s", "r", item(iso(t0.Add(time.Hour)), "a"))
	f.schedule(t, "s", "r", item(iso(t0.Add(2*time.Hour)), "b"))
	mustFail(t, f.call(t, "s", "r", args("schedule", "", item(iso(t0.Add(3*time.Hour)), "c"))), "at most 2")
	f.schedule(t, "s2", "r", item(iso(t0.Add(3*time.Hour)), "c")) // per session
}

func TestStorageFailureIsToolError(t *testing.T) {
	f := newFixture(t)
	id := f.schedule(t, "s", "r", item(iso(t0.Add(time.Minute)), "x"))
	if err := f.store.Close(); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{
		args("schedule", "", item(iso(t0.Add(time.Hour)), "x")),
		args("list", ""), args("cancel", id), args("clear", ""),
		args("update", id, item("", "y")),
	} {
		mustFail(t, f.call(t, "s", "r", a), "storage failure")
	}
	mustOK(t, f.call(t, "s", "r", args("get", ""))) // needs no storage
	if _, err := f.e.Reserve(context.Background(), "s", "r2", t0.Add(time.Minute)); err == nil {
		t.Fatal("Reserve on closed store")
	}
	if _, err := f.e.Commit(context.Background(), "r2"); err == nil {
		t.Fatal("Commit on closed store")
	}
	if _, err := f.e.Sweep(context.Background(), t0); err == nil {
		t.Fatal("Sweep on closed store")
	}
	if _, ok := f.e.NextDue(context.Background(), "s", "r"); ok {
		t.Fatal("NextDue on closed store")
	}
	_, err := f.e.ScheduleFromDirective(context.Background(), "s", "r", `{"dueAt":"2026-02-02T22:00:00Z","task":"x"}`)
	if err == nil || !IsStorageFailure(err) {
		t.Fatalf("directive on closed store: %v", err)
	}
}

func FuzzExecute(f *testing.F) {
	for _, s := range []string{
		`{"action":"get","items":[],"taskId":""}`,
		`{"action":"schedule","items":[{"dueAt":"2026-02-02T22:00:00Z","task":"x","tool":"","arguments":"","repeat":"every 5m","maxRuns":2}],"taskId":""}`,
		`{"action":"update","items":[{"dueAt":"","task":"y","tool":"","arguments":"{}","repeat":"0 9 * * *","maxRuns":"3"}],"taskId":"clk_1"}`,
		`{"action":"cancel","items":[],"taskId":"a/b"}`, `"{\"action\":\"list\"}"`, `[]`, `null`, `{"items":[null]}`,
	} {
		f.Add(s)
	}
	st := newFuzzStore(f)
	clk := newFakeClock(t0)
	e, err := New(Config{Store: st, Clock: clk})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := e.Execute(context.Background(), "fuzz", "req", json.RawMessage(in))
		var r map[string]any
		if err := json.Unmarshal(out, &r); err != nil {
			t.Fatalf("invalid JSON result %q for %q", out, in)
		}
		ok, isBool := r["ok"].(bool)
		if !isBool {
			t.Fatalf("no ok in %s", out)
		}
		if !ok && r["error"] == "" {
			t.Fatalf("failure without reason: %s", out)
		}
	})
}
