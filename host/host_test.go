package host

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/storage"
)

func TestFilterEndpointsRequireToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-auth"
	// A reservation made with the right token, which bad commits must not touch.
	f.schedule(t, sid, "pay rent", t0.Add(30*time.Second))
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "good-1", SessionID: sid}); !ans.Reserved {
		t.Fatalf("setup: nothing reserved: %+v", ans)
	}

	prepareBody := hostapi.PrepareRequest{RequestID: "bad-1", SessionID: "sess-victim", Directives: []hostapi.HostDirective{
		{Kind: "clock", Clock: &llm.ClockItem{DueAt: t0.Add(time.Hour).Format(time.RFC3339), Task: "evil"}},
		{Kind: "stopMessage", Text: "continue", MaxRepeats: 3},
		{Kind: "route", Route: "other"},
	}}
	endpoints := []struct {
		method, path string
		body         any
	}{
		{http.MethodPost, hostapi.PathPrepare, prepareBody},
		{http.MethodPost, hostapi.PathCommit, hostapi.OutcomeRequest{RequestID: "good-1"}},
		{http.MethodPost, hostapi.PathRollback, hostapi.OutcomeRequest{RequestID: "good-1"}},
		{http.MethodGet, hostapi.PathState, nil},
		{http.MethodPost, PathToolsExecute, ToolCall{SessionID: sid, RequestID: "x", Name: "clock", Arguments: json.RawMessage(`{"action":"clear","items":[],"taskId":""}`)}},
	}
	headers := map[string]string{
		"missing":      "",
		"wrong token":  "Bearer not-the-token",
		"prefix":       "Bearer " + testToken[:len(testToken)-1],
		"longer":       "Bearer " + testToken + "x",
		"basic scheme": "Basic " + testToken,
		"no scheme":    testToken,
		"empty bearer": "Bearer ",
	}
	for _, ep := range endpoints {
		for name, h := range headers {
			t.Run(ep.path+"/"+name, func(t *testing.T) {
				var raw []byte
				if ep.body != nil {
					raw, _ = json.Marshal(ep.body)
				}
				req := newRequest(ep.method, ep.path, raw)
				if h != "" {
					req.Header.Set("Authorization", h)
				}
				rec := serve(f.svc, req)
				if rec.Code != http.StatusUnauthorized {
					t.Fatalf("code %d, want 401; body %s", rec.Code, rec.Body)
				}
				var e map[string]string
				if err := json.Unmarshal(rec.Body.Bytes(), &e); err != nil || e["error"] == "" {
					t.Fatalf("401 body is not a JSON error: %q", rec.Body)
				}
			})
		}
	}

	// No state was touched by any of them.
	if err := f.svc.touches.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := f.svc.store.GetSession("sess-victim"); ok {
		t.Error("a rejected prepare created a session record")
	}
	if ts, _ := f.svc.store.ListTasks("sess-victim"); len(ts) != 0 {
		t.Errorf("a rejected prepare scheduled %d tasks", len(ts))
	}
	if _, ok, _ := f.svc.store.GetStopMessage("sess-victim"); ok {
		t.Error("a rejected prepare stored a stopMessage")
	}
	ts, err := f.svc.store.ListTasks(sid)
	if err != nil || len(ts) != 1 {
		t.Fatalf("a rejected clear removed tasks: %v %v", ts, err)
	}
	if ts[0].ReservedBy != "good-1" || ts[0].DeliveredAt != 0 {
		t.Errorf("a rejected commit or rollback changed the reservation: %+v", ts[0])
	}
	// The right token still works.
	if code := f.outcome(t, hostapi.PathCommit, "good-1"); code != http.StatusNoContent {
		t.Fatalf("commit with token: %d", code)
	}
	if ts, _ := f.svc.store.ListTasks(sid); ts[0].DeliveryCount != 1 {
		t.Errorf("commit with token did not deliver: %+v", ts[0])
	}
}

func TestPrepareAppliesDirectives(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-dir"
	stop := func() (storage.StopMessage, bool) {
		t.Helper()
		m, ok, err := f.svc.store.GetStopMessage(sid)
		if err != nil {
			t.Fatal(err)
		}
		return m, ok
	}

	f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: sid, Directives: []hostapi.HostDirective{
		{Kind: "stopMessage", Text: `keep "going"`},
	}})
	m, ok := stop()
	want := storage.StopMessage{Text: `keep "going"`, MaxRepeats: 10, Used: 0, UpdatedAt: t0.UnixMilli()}
	if !ok || m != want {
		t.Fatalf("default N: got %+v %v, want %+v", m, ok, want)
	}

	// Each kind reaches its feature package; their own tests cover the
	// details (host/stopmessage, host/clock, host/route).
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r3", SessionID: sid, Directives: []hostapi.HostDirective{{Kind: "stopMessage:clear"}}})
	if _, ok = stop(); ok {
		t.Fatal("stopMessage:clear left the state")
	}

	// clock:{…} schedules; clock:clear removes everything.
	due := t0.Add(2 * time.Hour).Format(time.RFC3339)
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r4", SessionID: sid, Directives: []hostapi.HostDirective{
		{Kind: "clock", Clock: &llm.ClockItem{DueAt: due, Task: "stand up", Arguments: `{"a": 1}`}},
		{Kind: "clock", Clock: &llm.ClockItem{DueAt: "tomorrow-ish", Task: "bad due"}}, // skipped
		{Kind: "clock", Clock: &llm.ClockItem{DueAt: t0.Add(3 * time.Hour).Format(time.RFC3339), Task: "stretch", Repeat: "daily", MaxRuns: 2}},
	}})
	ts, err := f.svc.store.ListTasks(sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Task != "stand up" || ts[0].DueAt != t0.Add(2*time.Hour).UnixMilli() || ts[0].Arguments != `{"a":1}` ||
		ts[1].Task != "stretch" || ts[1].Repeat != "daily" || ts[1].MaxRuns != 2 {
		t.Fatalf("scheduled tasks: %+v", ts)
	}
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r5", SessionID: sid, Directives: []hostapi.HostDirective{{Kind: "clock:clear"}}})
	if ts, _ = f.svc.store.ListTasks(sid); len(ts) != 0 {
		t.Fatalf("clock:clear left %d tasks", len(ts))
	}

	// route pins and is returned on later requests; route:clear unpins.
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r6", SessionID: sid, Directives: []hostapi.HostDirective{{Kind: "route", Route: "fast"}}}); ans.Route != "fast" {
		t.Fatalf("route after pin: %q", ans.Route)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r7", SessionID: sid}); ans.Route != "fast" {
		t.Fatalf("route on a later request: %q", ans.Route)
	}
	if sess, _, _ := f.svc.store.GetSession(sid); sess.Route != "fast" {
		t.Fatalf("route not on the session record: %+v", sess)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r8", SessionID: sid, Directives: []hostapi.HostDirective{
		{Kind: "route", Route: "has space"}, // skipped
		{Kind: "route:clear"},
		{Kind: "bogus"},                                  // skipped
		{Kind: "stopMessage", Text: "x", MaxRepeats: -1}, // skipped
		{Kind: "stopMessage", Text: "  "},                // skipped
	}}); ans.Route != "" {
		t.Fatalf("route after clear: %q", ans.Route)
	}
	if _, ok = stop(); ok {
		t.Fatal("an invalid stopMessage directive was stored")
	}
}

func TestReminderReserveCommitRollback(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-life"
	f.schedule(t, sid, "water the plants", t0.Add(5*time.Minute))

	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "early", SessionID: sid}); ans.Reminders != "" || ans.Reserved {
		t.Fatalf("not due yet, got %+v", ans)
	}
	if code := f.outcome(t, hostapi.PathCommit, "early"); code != http.StatusNoContent {
		t.Fatalf("commit without reservation: %d", code)
	}

	// Inside the 60 s due window.
	f.clk.Advance(4*time.Minute + 30*time.Second)
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-1", SessionID: sid})
	if !ans.Reserved || ans.Reminders != reminderFor("water the plants") {
		t.Fatalf("due reminder: %+v", ans)
	}
	if ans.NowMs != f.clk.Now().UnixMilli() || !slices.Equal(ans.Tools, allTools) {
		t.Fatalf("nowMs/tools: %+v", ans)
	}
	// A concurrent request of the session does not get the reserved task.
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-2", SessionID: sid}); ans.Reserved {
		t.Fatalf("reserved task injected twice: %+v", ans)
	}
	// The same request id again (a retried callout) gets the same reminder.
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-1", SessionID: sid}); ans.Reminders != reminderFor("water the plants") {
		t.Fatalf("re-prepare of the same request: %+v", ans)
	}
	if code := f.outcome(t, hostapi.PathCommit, "req-1"); code != http.StatusNoContent {
		t.Fatalf("commit: %d", code)
	}
	if code := f.outcome(t, hostapi.PathCommit, "req-1"); code != http.StatusNoContent {
		t.Fatalf("second commit: %d", code)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-3", SessionID: sid}); ans.Reserved || ans.Reminders != "" {
		t.Fatalf("delivered task injected again: %+v", ans)
	}
	ts, _ := f.svc.store.ListTasks(sid)
	if len(ts) != 1 || ts[0].DeliveryCount != 1 || ts[0].DeliveredAt != f.clk.Now().UnixMilli() {
		t.Fatalf("after commit: %+v", ts)
	}

	// Rollback puts a reminder back for the next request.
	f.schedule(t, sid, "call mom", t0.Add(5*time.Minute))
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-4", SessionID: sid}); ans.Reminders != reminderFor("call mom") {
		t.Fatalf("second task: %+v", ans)
	}
	if code := f.outcome(t, hostapi.PathRollback, "req-4"); code != http.StatusNoContent {
		t.Fatalf("rollback: %d", code)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-5", SessionID: sid}); ans.Reminders != reminderFor("call mom") {
		t.Fatalf("rolled-back task not re-injected: %+v", ans)
	}
	ts, _ = f.svc.store.ListTasks(sid)
	for _, tk := range ts {
		if tk.Task == "call mom" && tk.DeliveryCount != 0 {
			t.Fatalf("rollback counted a delivery: %+v", tk)
		}
	}

	// Bad outcome bodies.
	if rec := f.do(t, http.MethodPost, hostapi.PathRollback, testToken, `{"requestId":""}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("empty request id: %d", rec.Code)
	}
	if rec := f.do(t, http.MethodPost, hostapi.PathCommit, testToken, `{`); rec.Code != http.StatusBadRequest {
		t.Fatalf("malformed commit: %d", rec.Code)
	}
}

func TestDirectiveTaskNotInjectedIntoItsOwnChain(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-chain"
	// Due inside the window already: stamped with the writing request id.
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-A", SessionID: sid, Directives: []hostapi.HostDirective{
		{Kind: "clock", Clock: &llm.ClockItem{DueAt: t0.Add(20 * time.Second).Format(time.RFC3339), Task: "check build"}},
	}})
	if ans.Reserved {
		t.Fatalf("task injected into the request that scheduled it: %+v", ans)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-A:followup-1", SessionID: sid}); ans.Reserved {
		t.Fatalf("task injected into a followup of its request: %+v", ans)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-B", SessionID: sid}); ans.Reminders != reminderFor("check build") {
		t.Fatalf("next request did not get it: %+v", ans)
	}
}

func TestPrepareWithoutSession(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	f.schedule(t, "someone", "secret errand", t0.Add(10*time.Second))
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "anon-1", Directives: []hostapi.HostDirective{
		{Kind: "stopMessage", Text: "go on"},
		{Kind: "clock:clear"},
	}})
	if ans.Reserved || ans.Reminders != "" || ans.Route != "" {
		t.Fatalf("no-session prepare injected: %+v", ans)
	}
	if !slices.Equal(ans.Tools, allTools) {
		t.Fatalf("tools without a session: %v", ans.Tools)
	}
	if ts, _ := f.svc.store.ListTasks("someone"); len(ts) != 1 {
		t.Fatal("a no-session clock:clear removed another session's tasks")
	}
	// The tool exists but scheduling answers ok:false; get works.
	r := f.tool(t, "", "anon-1", "clock", `{"action":"list","items":[],"taskId":""}`)
	if r.ok() || !strings.Contains(r.errText(), "no session") {
		t.Fatalf("list without session: %v", r)
	}
	if r := f.tool(t, "", "anon-1", "clock", `{"action":"get","items":[],"taskId":""}`); !r.ok() || r["nowMs"].(float64) != float64(t0.UnixMilli()) {
		t.Fatalf("get without session: %v", r)
	}
	// No session and no request id is fine too; malformed JSON is 400.
	if ans := f.prepare(t, hostapi.PrepareRequest{}); !slices.Equal(ans.Tools, allTools) {
		t.Fatalf("empty prepare: %+v", ans)
	}
	for _, body := range []string{`{`, `[1,2]`, `{"requestId": 5}`, `{} {}`, ``} {
		if rec := f.do(t, http.MethodPost, hostapi.PathPrepare, testToken, body); rec.Code != http.StatusBadRequest {
			t.Errorf("prepare body %q: %d, want 400", body, rec.Code)
		}
	}
}

func TestPrepareSessionIsolation(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	long := strings.Repeat("x", 200)
	ids := []string{"a", "a/b", "ab", "a:b", "A", "a b", "a/", "/a", "..", "~x", long, long[:199] + "y", "ünï", "a\x00b"}
	for i, id := range ids {
		f.schedule(t, id, "task of #"+string(rune('A'+i)), t0.Add(20*time.Second))
	}
	for i, id := range ids {
		ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "iso-" + string(rune('A'+i)), SessionID: id})
		if want := reminderFor("task of #" + string(rune('A'+i))); ans.Reminders != want {
			t.Errorf("session %q got %q, want %q", id, ans.Reminders, want)
		}
	}
	// Every reminder went out exactly once, to its own session.
	for i, id := range ids {
		if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "iso2-" + string(rune('A'+i)), SessionID: id}); ans.Reminders != "" {
			t.Errorf("session %q saw another reminder: %q", id, ans.Reminders)
		}
	}
	// A tool call for one session never lists another's tasks.
	r := f.tool(t, "a", "iso-list", "clock", `{"action":"list","items":[],"taskId":""}`)
	if items := r["items"].([]any); len(items) != 1 || items[0].(map[string]any)["task"] != "task of #A" {
		t.Fatalf("list for %q: %v", "a", r)
	}
}

func TestToolsExecuteHTTP(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-tools"
	id := f.schedule(t, sid, "ship it", t0.Add(time.Hour))
	r := f.tool(t, sid, "t-2", "clock", `{"action":"list","items":[],"taskId":""}`)
	items, _ := r["items"].([]any)
	if !r.ok() || len(items) != 1 || items[0].(map[string]any)["taskId"] != id || items[0].(map[string]any)["task"] != "ship it" {
		t.Fatalf("list: %v", r)
	}
	// Chat Completions carries arguments as a JSON string; that works too.
	r = f.tool(t, sid, "t-3", "clock", `"{\"action\":\"cancel\",\"items\":[],\"taskId\":\"`+id+`\"}"`)
	if !r.ok() || r["removed"] != id {
		t.Fatalf("cancel: %v", r)
	}
	if r = f.tool(t, sid, "t-4", "clock", `{"action":"cancel","items":[],"taskId":"`+id+`"}`); r.ok() || !strings.Contains(r.errText(), "unknown taskId") {
		t.Fatalf("cancel again: %v", r)
	}
	if r = f.tool(t, sid, "t-5", "clock", `{"action":"schedule","items":[{"dueAt":"soon","task":"x","tool":"","arguments":"","repeat":"","maxRuns":0}],"taskId":""}`); r.ok() || !strings.Contains(r.errText(), "dueAt") {
		t.Fatalf("bad dueAt: %v", r)
	}
	if r = f.tool(t, sid, "t-6", "shell", `{}`); r.ok() || !strings.Contains(r.errText(), "unknown tool") {
		t.Fatalf("unknown tool: %v", r)
	}
	if rec := f.do(t, http.MethodPost, PathToolsExecute, testToken, `{"name":`); rec.Code != http.StatusBadRequest {
		t.Fatalf("malformed body: %d", rec.Code)
	}
	// The in-process interface gives the same results.
	var ex ToolExecutor = f.svc
	if res := ex.Execute(bg, sid, "t-7", "clock", json.RawMessage(`{"action":"clear","items":[],"taskId":""}`)); !strings.Contains(string(res), `"ok":true`) {
		t.Fatalf("in-process clear: %s", res)
	}
}

func TestStorageFailureKeepsServing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-broken"
	f.schedule(t, sid, "before the failure", t0.Add(time.Hour))
	if err := f.svc.store.Close(); err != nil {
		t.Fatal(err)
	}
	r := f.tool(t, sid, "b-1", "clock", `{"action":"schedule","items":[{"dueAt":"2026-02-02T23:00:00Z","task":"x","tool":"","arguments":"","repeat":"","maxRuns":0}],"taskId":""}`)
	if r.ok() || !strings.Contains(r.errText(), "storage failure") {
		t.Fatalf("schedule on a closed store: %v", r)
	}
	if r := f.tool(t, sid, "b-2", "clock", `{"action":"list","items":[],"taskId":""}`); r.ok() {
		t.Fatalf("list on a closed store: %v", r)
	}
	// Prepare still answers, with the time and tools but no reminders.
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "b-3", SessionID: sid, Directives: []hostapi.HostDirective{{Kind: "stopMessage", Text: "go"}}})
	if ans.Reserved || ans.NowMs != t0.UnixMilli() || !slices.Equal(ans.Tools, allTools) {
		t.Fatalf("prepare on a closed store: %+v", ans)
	}
	if rec := f.do(t, http.MethodGet, "/healthz", "", nil); rec.Code != http.StatusOK {
		t.Fatalf("healthz: %d", rec.Code)
	}
	if code := f.outcome(t, hostapi.PathCommit, "b-3"); code != http.StatusInternalServerError {
		t.Fatalf("commit on a closed store: %d", code)
	}
	if rec := f.do(t, http.MethodGet, "/api/sessions", "", nil); rec.Code != http.StatusInternalServerError {
		t.Fatalf("dashboard on a closed store: %d", rec.Code)
	}
	if err := f.svc.Close(); err == nil {
		// Badger reports the double close; the point is that it does not panic.
		t.Log("second close returned nil")
	}
}

func TestRestartKeepsState(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clockwork.NewFakeClockAt(t0)
	f := openFixture(t, dir, clk)
	const sid = "sess-restart"
	id := f.schedule(t, sid, "survive the restart", t0.Add(10*time.Minute))
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r-1", SessionID: sid, Directives: []hostapi.HostDirective{{Kind: "stopMessage", Text: "again", MaxRepeats: 2}}})
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r-2", SessionID: "sess-touch-only"})
	if err := f.svc.Close(); err != nil {
		t.Fatal(err)
	}

	clk.Advance(9*time.Minute + 30*time.Second)
	g := openFixture(t, dir, clk)
	r := g.tool(t, sid, "r-3", "clock", `{"action":"list","items":[],"taskId":""}`)
	items, _ := r["items"].([]any)
	if !r.ok() || len(items) != 1 || items[0].(map[string]any)["taskId"] != id {
		t.Fatalf("after restart: %v", r)
	}
	if m, ok, _ := g.svc.store.GetStopMessage(sid); !ok || m.Text != "again" || m.MaxRepeats != 2 {
		t.Fatalf("stopMessage after restart: %+v %v", m, ok)
	}
	// Session touches were written on Close.
	if s, ok, _ := g.svc.store.GetSession("sess-touch-only"); !ok || s.LastSeenAt != t0.UnixMilli() {
		t.Fatalf("touched session after restart: %+v %v", s, ok)
	}
	// And the due task is injected by the new process.
	if ans := g.prepare(t, hostapi.PrepareRequest{RequestID: "r-4", SessionID: sid}); ans.Reminders != reminderFor("survive the restart") {
		t.Fatalf("reminder after restart: %+v", ans)
	}
}

func TestDevTokenDefault(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.Token = "" })
	if rec := f.do(t, http.MethodGet, hostapi.PathState, DevToken, nil); rec.Code != http.StatusOK {
		t.Fatalf("dev token: %d", rec.Code)
	}
	if rec := f.do(t, http.MethodGet, hostapi.PathState, testToken, nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("other token with dev default: %d", rec.Code)
	}
}

func TestStateAndHealthz(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec := f.do(t, http.MethodGet, hostapi.PathState, testToken, nil)
	var st hostapi.StateResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil || rec.Code != 200 {
		t.Fatalf("state: %d %s", rec.Code, rec.Body)
	}
	if st.NowMs != t0.UnixMilli() || st.NTP.Status != "disabled" {
		t.Fatalf("state: %+v", st)
	}
	rec = f.do(t, http.MethodGet, "/healthz", "", nil)
	h := gjson.ParseBytes(rec.Body.Bytes())
	if rec.Code != 200 || !h.Get("ok").Bool() || h.Get("ntp").Raw != `{"status":"disabled","offsetMs":0}` ||
		!h.Get("storage.writable").Bool() || h.Get("storage.minFreeBytes").Uint() != storage.DefaultMinFree || h.Get("storage.freeBytes").Uint() == 0 {
		t.Fatalf("healthz: %d %s", rec.Code, rec.Body)
	}
	if rec := f.do(t, http.MethodGet, hostapi.PathPrepare, testToken, nil); rec.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET prepare: %d", rec.Code)
	}
	if rec := f.do(t, http.MethodGet, "/nope", "", nil); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown path: %d", rec.Code)
	}
	// The root leads to the dashboard; only GET (and HEAD) of exactly "/".
	if rec := f.do(t, http.MethodGet, "/", "", nil); rec.Code != http.StatusFound || rec.Header().Get("Location") != "/ui/" {
		t.Fatalf("GET /: %d %q", rec.Code, rec.Header().Get("Location"))
	}
	if rec := f.do(t, http.MethodPost, "/", "", nil); rec.Code != http.StatusNotFound {
		t.Fatalf("POST /: %d", rec.Code)
	}
	if rec := f.do(t, http.MethodGet, "/nope/", "", nil); rec.Code != http.StatusNotFound || !strings.Contains(rec.Body.String(), "no such endpoint") {
		t.Fatalf("unknown path with a slash: %d %s", rec.Code, rec.Body)
	}
}

func TestDisableClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.DisableClock = true })
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "d-1", SessionID: "s"}); !slices.Equal(ans.Tools, hostapi.TimerToolNames()) {
		t.Fatalf("tools with clock disabled: %v", ans.Tools)
	}
	if r := f.tool(t, "s", "d-2", "clock", `{"action":"get","items":[],"taskId":""}`); r.ok() {
		t.Fatalf("clock tool with clock disabled: %v", r)
	}
}

func TestDisableTimers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.DisableTimers = true })
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "d-1", SessionID: "s"}); !slices.Equal(ans.Tools, []string{"clock"}) {
		t.Fatalf("tools with timers disabled: %v", ans.Tools)
	}
	r := f.tool(t, "s", "d-2", "timer", `{"total_duration":5,"timeout_duration":1,"timer_id":"","reason":""}`)
	if r.ok() || !strings.Contains(fmt.Sprint(r), "disabled") {
		t.Fatalf("timer tool with timers disabled: %v", r)
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv("CHIME_DATA_DIR", "")
	t.Setenv("CHIME_HOST_TOKEN", "")
	t.Setenv("CHIME_NTP", "")
	cfg, err := ConfigFromEnv()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != DefaultAddr || cfg.DataDir != DefaultDataDir || cfg.Token != "" || !cfg.NTP.Enabled ||
		cfg.DueWindow != time.Minute || cfg.Retention != 20*time.Minute || cfg.HoldMax != time.Minute {
		t.Fatalf("defaults: %+v", cfg)
	}
	t.Setenv("CHIME_DATA_DIR", "/var/lib/chime")
	t.Setenv("CHIME_HOST_TOKEN", "s3cret")
	t.Setenv("CHIME_NTP", "off")
	if cfg, err = ConfigFromEnv(); err != nil || cfg.DataDir != "/var/lib/chime" || cfg.Token != "s3cret" || cfg.NTP.Enabled {
		t.Fatalf("from env: %+v %v", cfg, err)
	}
	t.Setenv("CHIME_NTP", "maybe")
	if _, err = ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "CHIME_NTP") {
		t.Fatalf("bad CHIME_NTP: %v", err)
	}
	t.Setenv("CHIME_NTP", "1")
	t.Setenv("CHIME_HOST_TOKEN", " s3cret\n")
	if _, err = ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "CHIME_HOST_TOKEN") {
		t.Fatalf("padded token: %v", err)
	}
}

func TestPrepareTimezoneReachesClock(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	dir := func(tz, rid string) {
		f.prepare(t, hostapi.PrepareRequest{RequestID: rid, SessionID: "sess-" + rid, Timezone: tz, Directives: []hostapi.HostDirective{
			{Kind: "clock", Clock: &llm.ClockItem{DueAt: "2026-02-03T09:00:00-08:00", Task: "standup", Repeat: "daily"}},
		}})
	}
	dir("America/Los_Angeles", "la")
	dir("Not/A_Zone", "bad")
	for rid, want := range map[string]string{"la": "America/Los_Angeles", "bad": ""} {
		ts, err := f.svc.store.ListTasks("sess-" + rid)
		if err != nil || len(ts) != 1 {
			t.Fatalf("%s: %v %v", rid, ts, err)
		}
		if ts[0].TimeZone != want || ts[0].UTCOffsetSec != -8*3600 {
			t.Errorf("%s: zone %q offset %d, want %q", rid, ts[0].TimeZone, ts[0].UTCOffsetSec, want)
		}
	}
}

// Without a token the host refuses to listen where others can reach it:
// the development token is public (docs/failures.md).
func TestNoTokenRefusedOffLoopback(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:8787", ":8787", "10.0.0.5:8787", "chime-host:8787"} {
		_, err := New(Config{Addr: addr, DataDir: t.TempDir()}, nil)
		if err == nil || !strings.Contains(err.Error(), "CHIME_HOST_TOKEN") || !strings.Contains(err.Error(), addr) {
			t.Errorf("%s without a token: %v, want a clear error naming CHIME_HOST_TOKEN", addr, err)
		}
	}
	svc, err := New(Config{Addr: "0.0.0.0:8787", DataDir: t.TempDir(), Token: "s3cret"}, nil)
	if err != nil {
		t.Fatalf("explicit token beyond loopback: %v", err)
	}
	svc.Close()
	svc, err = New(Config{Addr: "127.0.0.1:8787", DataDir: t.TempDir()}, nil)
	if err != nil {
		t.Fatalf("no token on loopback: %v", err)
	}
	svc.Close()
}

// loopbackAddr decides where the development token may serve.
func TestLoopbackAddr(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8787": true, "[::1]:8787": true, "localhost:1": true,
		"0.0.0.0:8787": false, ":8787": false, "10.0.0.5:8787": false, "chime-host:8787": false, "bad": false} {
		if got := loopbackAddr(addr); got != want {
			t.Errorf("loopbackAddr(%q) = %v, want %v", addr, got, want)
		}
	}
}
