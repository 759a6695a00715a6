package host

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// docs/timers.md#notices: a background timer's completion is injected into
// the session's next request with reservation and commit, once.
func TestTimerNoticeInjectedOnceIntoTheNextRequest(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec, err := f.svc.timers.Create("sess", "build #7", 6*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.timers.Cancel("sess", rec.TimerID, ""); err != nil {
		t.Fatal(err)
	}
	stopped, _ := f.svc.timers.Create("sess", "never told", 6*time.Second)
	if _, err := f.svc.timers.Stop("sess", stopped.TimerID, ""); err != nil {
		t.Fatal(err)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: "sess"}); ans.Reserved || !ans.MayContinue {
		t.Fatalf("before the end: %+v", ans)
	}
	f.clk.Advance(6 * time.Second) // no scheduler runs here: prepare applies the end
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r2", SessionID: "sess"})
	want := `[timer completed: "build #7" id=` + rec.TimerID + ` after 6s]`
	if !ans.Reserved || ans.Reminders != want {
		t.Fatalf("after the end: %+v, want %q", ans, want)
	}
	// Another session's request gets nothing.
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r3", SessionID: "other"}); ans.Reserved {
		t.Fatalf("leaked: %+v", ans)
	}
	// Rolled back (the upstream failed): the next request gets it again.
	f.outcome(t, hostapi.PathRollback, "r2")
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r4", SessionID: "sess"}); ans.Reminders != want {
		t.Fatalf("after a rollback: %+v", ans)
	}
	f.outcome(t, hostapi.PathCommit, "r4")
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r5", SessionID: "sess"}); ans.Reserved || strings.Contains(ans.Reminders, "never told") {
		t.Fatalf("after the commit: %+v", ans)
	}
}

// Timer tools through the host's executor: ok results, and the session of
// the request decides which timers a call can see.
func TestTimerToolsThroughTheExecutor(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec, err := f.svc.timers.Create("a", "x", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	r := f.tool(t, "a", "r1", hostapi.ReadTimerToolName, `{"timer_id":"`+rec.TimerID+`"}`)
	if !r.ok() || r["status"] != "Running" {
		t.Fatalf("read: %v", r)
	}
	r = f.tool(t, "b", "r2", hostapi.StopTimerToolName, `{"timer_id":"`+rec.TimerID+`","reason":""}`)
	if r.ok() || !strings.Contains(r["reason"].(string), "unknown timer") {
		t.Fatalf("other session: %v", r)
	}
}

// docs/host-api.md#timers: list under the dashboard rule, act with the token.
func TestTimerAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	rec, err := f.svc.timers.Create("sess", "secret deploy", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	base := "/api/sessions/sess/timers"
	list := func(path, token string) []TimerView {
		t.Helper()
		r := f.do(t, "GET", path, token, nil)
		if r.Code != 200 {
			t.Fatalf("GET %s: %d %s", path, r.Code, r.Body)
		}
		var vs []TimerView
		if err := json.Unmarshal(r.Body.Bytes(), &vs); err != nil {
			t.Fatal(err)
		}
		return vs
	}
	vs := list(base, "")
	if len(vs) != 1 || vs[0].TimerID != rec.TimerID || vs[0].Status != "Running" || vs[0].Reason != "" || vs[0].RemainingMs != 60000 {
		t.Fatalf("list: %+v", vs)
	}
	if strings.Contains(f.do(t, "GET", base, "", nil).Body.String(), "secret") {
		t.Fatal("reason shown without include=text")
	}
	if r := f.do(t, "GET", base+"?include=text", "", nil); r.Code != 401 {
		t.Fatalf("include=text without token: %d", r.Code)
	}
	if vs := list(base+"?include=text", testToken); vs[0].Reason != "secret deploy" {
		t.Fatalf("with text: %+v", vs)
	}
	act := func(action, token string, body any) (int, TimerView) {
		r := f.do(t, "POST", base+"/"+rec.TimerID+"/"+action, token, body)
		var v TimerView
		_ = json.Unmarshal(r.Body.Bytes(), &v)
		return r.Code, v
	}
	if code, _ := act("stop", "", nil); code != 401 {
		t.Fatalf("stop without token: %d", code)
	}
	if code, _ := act("pause", testToken, TimerAction{}); code != 400 {
		t.Fatalf("pause without seconds: %d", code)
	}
	if code, v := act("pause", testToken, TimerAction{PauseSeconds: 30, Reason: "lunch"}); code != 200 || v.Status != "Paused" || v.PauseUntil != t0.Add(30*time.Second).UnixMilli() {
		t.Fatalf("pause: %d %+v", code, v)
	}
	if code, v := act("resume", testToken, nil); code != 200 || v.Status != "Running" {
		t.Fatalf("resume: %d %+v", code, v)
	}
	if code, _ := act("resume", testToken, nil); code != 409 {
		t.Fatalf("resume twice: %d", code)
	}
	if code, v := act("cancel", testToken, nil); code != 200 || v.Status != "Background" {
		t.Fatalf("cancel: %d %+v", code, v)
	}
	if code, _ := act("explode", testToken, nil); code != 404 {
		t.Fatalf("unknown action: %d", code)
	}
	if code, _ := act("stop", testToken, `{"reason":"x","extra":1}`); code != 400 {
		t.Fatalf("unknown field: %d", code)
	}
	// Another session's path cannot reach it.
	if r := f.do(t, "POST", "/api/sessions/other/timers/"+rec.TimerID+"/stop", testToken, nil); r.Code != 404 {
		t.Fatalf("other session: %d %s", r.Code, r.Body)
	}
	code, v := act("stop", testToken, TimerAction{Reason: "done"})
	if code != 200 || v.Status != "Stopped" || len(v.History) < 5 || v.History[len(v.History)-1].Reason != "done" {
		t.Fatalf("stop: %d %+v", code, v)
	}
	if code, _ := act("stop", testToken, nil); code != 409 {
		t.Fatalf("stop twice: %d", code)
	}
}
