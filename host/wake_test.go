package host

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/storage"
)

const chatBody = `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"u1"},{"role":"assistant","content":"a1"},{"role":"user","content":"u2"}]}`

func templateRequest(sid string, turn *llm.Turn) hostapi.ResolveRequest {
	return hostapi.ResolveRequest{
		RequestID: "r1", SessionID: sid, Protocol: llm.Chat.String(), Path: "/v1/chat/completions",
		Reentry: "127.0.0.1:1", Request: json.RawMessage(chatBody), Turn: turn,
		Headers: map[string]string{"Authorization": "Bearer sk-secret", "x-api-key": "sk-other", "anthropic-version": "2023-06-01"},
	}
}

func TestTemplateCredentialsStayInMemory(t *testing.T) {
	f := newFixture(t)
	rec := f.do(t, http.MethodPost, hostapi.PathTemplate, testToken, templateRequest("s1", &llm.Turn{Text: "hello"}))
	if rec.Code != http.StatusNoContent {
		t.Fatalf("template: %d %s", rec.Code, rec.Body)
	}
	tpl, ok, err := f.svc.template("s1")
	if err != nil || !ok {
		t.Fatalf("no template: %v", err)
	}
	raw, _ := json.Marshal(tpl)
	if strings.Contains(string(raw), "sk-secret") || strings.Contains(string(raw), "sk-other") {
		t.Fatalf("credentials on disk: %s", raw)
	}
	if tpl.Headers["anthropic-version"] != "2023-06-01" {
		t.Fatalf("other headers kept: %v", tpl.Headers)
	}
	h, why := f.svc.wakeHeaders("s1", tpl, "")
	if why != "" || h["authorization"] != "Bearer sk-secret" || h["x-api-key"] != "sk-other" {
		t.Fatalf("memory credentials: %v %q", h, why)
	}
	// A new process knows the template but not the credentials.
	dir := f.dir
	if err := f.svc.Close(); err != nil {
		t.Fatal(err)
	}
	g := openFixture(t, dir, f.clk)
	g.svc.restoreWakes(t.Context())
	tpl, ok, _ = g.svc.template("s1")
	if !ok {
		t.Fatal("template lost in the restart")
	}
	if _, why := g.svc.wakeHeaders("s1", tpl, ""); !strings.Contains(why, "no credentials") {
		t.Fatalf("after restart: %q", why)
	}
	// Unauthenticated and malformed templates are refused.
	if rec := g.do(t, http.MethodPost, hostapi.PathTemplate, "", templateRequest("s2", &llm.Turn{})); rec.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", rec.Code)
	}
	bad := templateRequest("", &llm.Turn{})
	if rec := g.do(t, http.MethodPost, hostapi.PathTemplate, testToken, bad); rec.Code != http.StatusBadRequest {
		t.Fatalf("no session: %d", rec.Code)
	}
}

func TestPrepareAsksForTemplateOnlyWhenWakeable(t *testing.T) {
	f := newFixture(t)
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "a", Protocol: "chat", SessionID: "plain"}); ans.Template {
		t.Fatal("a session with nothing to wake it for asked for a template")
	}
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "b", Protocol: "chat", SessionID: "hb",
		Directives: []hostapi.HostDirective{{Kind: hostapi.DirectiveHeartbeat, EveryMs: 60_000}}})
	if !ans.Template {
		t.Fatal("a heartbeat session did not ask for its template")
	}
	hb := f.svc.heartbeatFor("hb")
	if !hb.Enabled || hb.Every.Seconds() != 60 {
		t.Fatalf("heartbeat %+v", hb)
	}
	f.schedule(t, "task", "later", t0.Add(3600e9))
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "c", Protocol: "chat", SessionID: "task"}); !ans.Template {
		t.Fatal("a session with a clock task did not ask for its template")
	}
	f.prepare(t, hostapi.PrepareRequest{RequestID: "d", Protocol: "chat", SessionID: "hb",
		Directives: []hostapi.HostDirective{{Kind: hostapi.DirectiveHeartbeatOff, Position: 1}}})
	if f.svc.heartbeatFor("hb").Enabled {
		t.Fatal("heartbeat:off did not turn it off")
	}
}

func TestClassifyAck(t *testing.T) {
	hb := scheduler.DefaultHeartbeat()
	for _, tc := range []struct{ reply, want string }{
		{"", RunOKEmpty},
		{"  \n", RunOKEmpty},
		{"HEARTBEAT_OK", RunOKAck},
		{"HEARTBEAT_OK nothing new", RunOKAck},
		{"All quiet. HEARTBEAT_OK", RunOKAck},
		{"HEARTBEAT_OK " + strings.Repeat("x", 301), RunSent},
		{"The deploy failed, see the log.", RunSent},
		{"I said HEARTBEAT_OK earlier but now the deploy failed", RunSent},
	} {
		if got := classify(tc.reply, hb); got != tc.want {
			t.Errorf("classify(%.40q) = %s, want %s", tc.reply, got, tc.want)
		}
	}
}

func TestWakeBodyLeavesOutUnansweredToolCalls(t *testing.T) {
	withCalls, _ := json.Marshal(&llm.Turn{Text: "running", ToolCalls: []llm.ToolCall{{ID: "c1", Name: "Bash", Arguments: "{}"}}})
	body, err := wakeBody(llm.Chat, storage.WakeTemplate{Request: json.RawMessage(chatBody), Turn: withCalls}, "wake up")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "Bash") {
		t.Fatalf("a call without its result was replayed: %s", body)
	}
	msgs := gjson.GetBytes(body, "messages").Array()
	if last := msgs[len(msgs)-1]; last.Get("role").String() != "user" || last.Get("content").String() != "wake up" {
		t.Fatalf("last message %s", last.Raw)
	}
	plain, _ := json.Marshal(&llm.Turn{Text: "a2"})
	body, err = wakeBody(llm.Chat, storage.WakeTemplate{Request: json.RawMessage(chatBody), Turn: plain}, "wake up")
	if err != nil {
		t.Fatal(err)
	}
	msgs = gjson.GetBytes(body, "messages").Array()
	if n := len(msgs); msgs[n-2].Get("content").String() != "a2" || gjson.GetBytes(body, "stream").Bool() {
		t.Fatalf("the answer before the wake item, not streaming: %s", body)
	}
}

func TestHeartbeatAPIValidates(t *testing.T) {
	f := newFixture(t)
	if rec := f.do(t, http.MethodPut, "/api/sessions/s/heartbeat", "", map[string]any{"enabled": true}); rec.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", rec.Code)
	}
	for body, field := range map[string]string{
		`{"enabled":true,"every":"100ms"}`:                                                "every",
		`{"enabled":true,"every":"soon"}`:                                                 "every",
		`{"enabled":true,"activeHours":{"start":"9","end":"17:00"}}`:                      "activeHours.start",
		`{"enabled":true,"activeHours":{"start":"09:00","end":"17:00","timezone":"X/Y"}}`: "activeHours.timezone",
	} {
		rec := f.do(t, http.MethodPut, "/api/sessions/s/heartbeat", testToken, body)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), field) {
			t.Errorf("%s: %d %s, want 400 naming %s", body, rec.Code, rec.Body, field)
		}
	}
	rec := f.do(t, http.MethodPut, "/api/sessions/s/heartbeat", testToken,
		`{"enabled":true,"every":"45m","activeHours":{"start":"22:00","end":"06:00","timezone":"Europe/Paris"}}`)
	if rec.Code != http.StatusOK {
		t.Fatalf("put: %d %s", rec.Code, rec.Body)
	}
	got := gjson.Parse(rec.Body.String())
	if got.Get("every").String() != "45m0s" || got.Get("source").String() != "session" || got.Get("nextAt").Int() != t0.Add(45*60e9).UnixMilli() {
		t.Fatalf("view %s", rec.Body)
	}
	rec = f.do(t, http.MethodDelete, "/api/sessions/s/heartbeat", testToken, nil)
	if gjson.Get(rec.Body.String(), "source").String() != "config" || gjson.Get(rec.Body.String(), "enabled").Bool() {
		t.Fatalf("delete: %s", rec.Body)
	}
	if rec := f.do(t, http.MethodPost, "/api/sessions/s/wake", testToken, `{"reason":"later"}`); rec.Code != http.StatusBadRequest {
		t.Fatalf("bad wake reason: %d", rec.Code)
	}
}

func TestRunRecordsBatchedButKept(t *testing.T) {
	f := newFixture(t)
	for i := range maxRunsKept + 5 {
		f.svc.recordRun("s", storage.WakeRun{Reason: "manual", Status: RunSkipped, Why: "w", StartedAt: int64(i)})
	}
	rec := f.do(t, http.MethodGet, "/api/sessions/s/runs", "", nil)
	runs := gjson.Get(rec.Body.String(), "runs").Array()
	if len(runs) != maxRunsKept || runs[0].Get("startedAt").Int() != maxRunsKept+4 {
		t.Fatalf("before the flush: %d runs, newest %s", len(runs), runs[0].Raw)
	}
	ids := map[string]bool{}
	for _, r := range runs {
		ids[r.Get("id").String()] = true
	}
	if len(ids) != maxRunsKept {
		t.Fatalf("run ids repeat: %d distinct", len(ids))
	}
	dir := f.dir
	if err := f.svc.Close(); err != nil { // flushes
		t.Fatal(err)
	}
	g := openFixture(t, dir, f.clk)
	got, err := g.svc.runsOf("s")
	if err != nil || len(got) != maxRunsKept || got[len(got)-1].StartedAt != maxRunsKept+4 {
		t.Fatalf("after a restart: %d runs, %v", len(got), err)
	}
}

func TestWakeWaitsForTheClientToGoQuiet(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Wake.AfterIdle = time.Minute })
	req := templateRequest("s", &llm.Turn{Text: "hi"})
	if err := f.svc.keepTemplate(&req, req.Request, req.Turn); err != nil {
		t.Fatal(err)
	}
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", Protocol: "chat", SessionID: "s"})
	f.clk.Advance(10 * time.Second)
	if out := f.svc.runWake(t.Context(), "s", scheduler.ReasonTask, 0); out.Defer != 50*time.Second {
		t.Fatalf("a wake 10 s after the client's request: %+v, want a 50 s defer", out)
	}
	if out := f.svc.runWake(t.Context(), "s", scheduler.ReasonManual, 0); out.Defer != 0 {
		t.Fatalf("a manual wake waits: %+v", out)
	}
	f.clk.Advance(time.Minute)
	if out := f.svc.runWake(t.Context(), "s", scheduler.ReasonTask, 0); out.Defer != 0 || out.Failed {
		t.Fatalf("after a quiet minute: %+v", out)
	}
}
