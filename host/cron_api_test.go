package host

import (
	"context"
	"encoding/json"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/host/cron"
	"github.com/chimehq/chime/host/scheduler"
)

func decodeAs[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v
}

func TestCronJobAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	base := "/api/sessions/sess/jobs"
	create := JobCreate{Name: "standup", Schedule: "0 9 * * 1-5", TZ: "Europe/Paris", Text: "secret plans", Target: "isolated"}

	// Changes need the token.
	if r := f.do(t, "POST", base, "", create); r.Code != 401 {
		t.Fatalf("create without token: %d", r.Code)
	}
	if r := f.do(t, "POST", base, "wrong", create); r.Code != 401 {
		t.Fatalf("create with a wrong token: %d", r.Code)
	}
	r := f.do(t, "POST", base, testToken, create)
	if r.Code != 201 {
		t.Fatalf("create: %d %s", r.Code, r.Body)
	}
	j := decodeAs[JobView](t, r.Body.Bytes())
	// 2026-02-02 21:00Z is a Monday; the next weekday 09:00 in Paris is Tuesday 08:00Z.
	if j.JobID == "" || j.Kind != "cron" || j.Text != "secret plans" || !j.Enabled || j.Session != "sess" ||
		j.NextRunAt != time.Date(2026, 2, 3, 8, 0, 0, 0, time.UTC).UnixMilli() || j.CreatedAt != t0.UnixMilli() {
		t.Fatalf("created %+v", j)
	}

	// Listing: the text only with the token.
	r = f.do(t, "GET", base, "", nil)
	if r.Code != 200 || strings.Contains(r.Body.String(), "secret") {
		t.Fatalf("list without token: %d %s", r.Code, r.Body)
	}
	if vs := decodeAs[[]JobView](t, r.Body.Bytes()); len(vs) != 1 || vs[0].JobID != j.JobID || vs[0].Name != "standup" {
		t.Fatalf("list %+v", vs)
	}
	if r := f.do(t, "GET", base+"?include=text", "", nil); r.Code != 401 {
		t.Fatalf("include=text without token: %d", r.Code)
	}
	if vs := decodeAs[[]JobView](t, f.do(t, "GET", base+"?include=text", testToken, nil).Body.Bytes()); vs[0].Text != "secret plans" {
		t.Fatalf("with text %+v", vs)
	}
	if vs := decodeAs[[]JobView](t, f.do(t, "GET", "/api/jobs", "", nil).Body.Bytes()); len(vs) != 1 || vs[0].Text != "" {
		t.Fatalf("all jobs %+v", vs)
	}
	if v := decodeAs[JobView](t, f.do(t, "GET", base+"/"+j.JobID, "", nil).Body.Bytes()); v.JobID != j.JobID {
		t.Fatalf("one job %+v", v)
	}

	// 400 names the field.
	for body, field := range map[string]string{
		`{"schedule":"5 minutes","text":"x"}`:                   "schedule",
		`{"schedule":"0 9 * * *","tz":"Mars/Base","text":"x"}`:  "tz",
		`{"schedule":"5m","text":""}`:                           "text",
		`{"schedule":"5m","text":"x","target":"elsewhere"}`:     "target",
		`{"kind":"hourly","schedule":"5m","text":"x"}`:          "kind",
		`{"schedule":"2026-02-02T20:00:00Z","text":"too late"}`: "schedule",
	} {
		r := f.do(t, "POST", base, testToken, body)
		e := decodeAs[map[string]string](t, r.Body.Bytes())
		if r.Code != 400 || e["field"] != field || !strings.HasPrefix(e["error"], field+": ") {
			t.Errorf("%s: %d %s (want 400 naming %s)", body, r.Code, r.Body, field)
		}
	}
	if r := f.do(t, "POST", base, testToken, `{"schedule":"5m","text":"x","when":"now"}`); r.Code != 400 || !strings.Contains(r.Body.String(), "when") {
		t.Fatalf("unknown field: %d %s", r.Code, r.Body)
	}

	// 404s: unknown job, another session's path, unknown action.
	for _, c := range []struct{ method, path string }{
		{"GET", base + "/jnope"},
		{"DELETE", base + "/jnope"},
		{"POST", base + "/jnope/run"},
		{"POST", "/api/sessions/other/jobs/" + j.JobID + "/run"},
		{"DELETE", "/api/sessions/other/jobs/" + j.JobID},
		{"POST", base + "/" + j.JobID + "/explode"},
	} {
		if r := f.do(t, c.method, c.path, testToken, nil); r.Code != 404 {
			t.Errorf("%s %s: %d %s", c.method, c.path, r.Code, r.Body)
		}
	}

	// Pause, resume, run now.
	act := func(action string) (int, JobView) {
		r := f.do(t, "POST", base+"/"+j.JobID+"/"+action, testToken, nil)
		return r.Code, decodeAs[JobView](t, r.Body.Bytes())
	}
	if r := f.do(t, "POST", base+"/"+j.JobID+"/run", "", nil); r.Code != 401 {
		t.Fatalf("run without token: %d", r.Code)
	}
	if code, v := act("pause"); code != 200 || v.Enabled || v.NextRunAt != 0 {
		t.Fatalf("pause: %d %+v", code, v)
	}
	if code, v := act("resume"); code != 200 || !v.Enabled || v.NextRunAt == 0 {
		t.Fatalf("resume: %d %+v", code, v)
	}
	// An isolated run needs the session's template: without one it fails
	// and the job backs off.
	if code, v := act("run"); code != 200 || v.Runs != 1 || v.LastStatus != "failed" || !strings.Contains(v.LastError, "no template") ||
		v.ConsecutiveFailures != 1 || v.LastRunAt != t0.UnixMilli() {
		t.Fatalf("run: %d %+v", code, v)
	}
	// A main job queues its text as the session's system event cron:<id>.
	r = f.do(t, "POST", base, testToken, JobCreate{Schedule: "1h", Text: "main text"})
	mj := decodeAs[JobView](t, r.Body.Bytes())
	if r := f.do(t, "POST", base+"/"+mj.JobID+"/run", testToken, nil); r.Code != 200 || decodeAs[JobView](t, r.Body.Bytes()).LastStatus != "ok" {
		t.Fatalf("main run: %d %s", r.Code, r.Body)
	}
	if r := f.do(t, "GET", "/api/sessions/sess/events?include=text", testToken, nil); !strings.Contains(r.Body.String(), `"contextKey":"cron:`+mj.JobID+`"`) ||
		!strings.Contains(r.Body.String(), "main text") {
		t.Fatalf("events after a main run: %s", r.Body)
	}
	if r := f.do(t, "DELETE", base+"/"+mj.JobID, testToken, nil); r.Code != 200 {
		t.Fatalf("delete main job: %d", r.Code)
	}
	m := f.do(t, "GET", "/metrics", "", nil).Body.String()
	for _, want := range []string{`chime_cron_runs_total{outcome="ok"} 1`, `chime_cron_runs_total{outcome="failed"} 1`, "chime_cron_jobs_live 1", "chime_cron_lateness_seconds_count 0"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	// Delete.
	if r := f.do(t, "DELETE", base+"/"+j.JobID, "", nil); r.Code != 401 {
		t.Fatalf("delete without token: %d", r.Code)
	}
	if r := f.do(t, "DELETE", base+"/"+j.JobID, testToken, nil); r.Code != 200 {
		t.Fatalf("delete: %d %s", r.Code, r.Body)
	}
	if vs := decodeAs[[]JobView](t, f.do(t, "GET", base, "", nil).Body.Bytes()); len(vs) != 0 {
		t.Fatalf("after delete %+v", vs)
	}
}

func TestCronJobAPILimitAndDisabled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.CronMaxPerSession = 1 })
	body := JobCreate{Schedule: "5m", Text: "x"}
	if r := f.do(t, "POST", "/api/sessions/s/jobs", testToken, body); r.Code != 201 {
		t.Fatalf("first: %d %s", r.Code, r.Body)
	}
	if r := f.do(t, "POST", "/api/sessions/s/jobs", testToken, body); r.Code != 409 || !strings.Contains(r.Body.String(), "maxPerSession") {
		t.Fatalf("over the limit: %d %s", r.Code, r.Body)
	}
	g := newFixture(t, func(c *Config) { c.DisableCron = true })
	if r := g.do(t, "POST", "/api/sessions/s/jobs", testToken, body); r.Code != 409 || !strings.Contains(r.Body.String(), "cron.enabled") {
		t.Fatalf("disabled: %d %s", r.Code, r.Body)
	}
}

// TestCronJobsSurviveRestart: jobs written through the API are back after
// the host reopens its store, with the config file's jobs reconciled.
func TestCronJobsSurviveRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clockwork.NewFakeClockAt(t0)
	f := openFixture(t, dir, clk)
	r := f.do(t, "POST", "/api/sessions/sess/jobs", testToken, JobCreate{Schedule: "1h", Text: "hourly"})
	if r.Code != 201 {
		t.Fatalf("create: %d %s", r.Code, r.Body)
	}
	j := decodeAs[JobView](t, r.Body.Bytes())
	if err := f.svc.Close(); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseConfigFile([]byte("cron:\n  jobs:\n    - {session: ops, schedule: 30m, text: declared}\n"), "chime.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := openFixture(t, dir, clk, func(c *Config) { c.CronJobs = cfg.CronJobs })
	g.svc.restoreCron()
	vs := decodeAs[[]JobView](t, g.do(t, "GET", "/api/jobs?include=text", testToken, nil).Body.Bytes())
	if len(vs) != 2 {
		t.Fatalf("after restart %+v", vs)
	}
	byText := map[string]JobView{vs[0].Text: vs[0], vs[1].Text: vs[1]}
	if byText["hourly"].JobID != j.JobID || byText["hourly"].NextRunAt != j.NextRunAt || byText["declared"].Source != "config" {
		t.Fatalf("after restart %+v", vs)
	}
}

// TestServeRunsOverdueCronJobs: Serve restores the jobs and starts the
// loop; a job that came due while the host was down runs once at start.
func TestServeRunsOverdueCronJobs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := clockwork.NewFakeClockAt(t0)
	f := openFixture(t, dir, clk)
	r := f.do(t, "POST", "/api/sessions/sess/jobs", testToken, JobCreate{Schedule: "1m", Text: "minutely"})
	if r.Code != 201 {
		t.Fatalf("create: %d %s", r.Code, r.Body)
	}
	j := decodeAs[JobView](t, r.Body.Bytes())
	if err := f.svc.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour) // sixty missed runs
	g := openFixture(t, dir, clk)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.svc.Serve(ctx, ln) }()
	deadline := time.Now().Add(10 * time.Second) // a hang guard: the run is a goroutine away
	var got JobView
	for {
		v, err := g.svc.cron.Get("sess", j.JobID)
		if err == nil && v.Runs > 0 {
			got = jobView(v, false)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the overdue job did not run")
		}
		runtime.Gosched()
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if got.Runs != 1 || got.LastRunAt != clk.Now().UnixMilli() || got.NextRunAt != clk.Now().Add(time.Minute).UnixMilli() {
		t.Fatalf("overdue run %+v", got)
	}
}

// TestCronTextFitsAnEvent: a job's text always fits the system event a
// main job queues, so no job is accepted that could never run.
func TestCronTextFitsAnEvent(t *testing.T) {
	if cron.MaxTextChars > scheduler.MaxEventText {
		t.Fatalf("cron text up to %d characters, events up to %d", cron.MaxTextChars, scheduler.MaxEventText)
	}
	f := newFixture(t)
	long := strings.Repeat("é", cron.MaxTextChars)
	r := f.do(t, "POST", "/api/sessions/s/jobs", testToken, JobCreate{Schedule: "1h", Text: long})
	if r.Code != 201 {
		t.Fatalf("create: %d %s", r.Code, r.Body)
	}
	j := decodeAs[JobView](t, r.Body.Bytes())
	if r := f.do(t, "POST", "/api/sessions/s/jobs/"+j.JobID+"/run", testToken, nil); r.Code != 200 || decodeAs[JobView](t, r.Body.Bytes()).LastStatus != "ok" {
		t.Fatalf("run of the longest text: %d %s", r.Code, r.Body)
	}
	if r := f.do(t, "POST", "/api/sessions/s/jobs", testToken, JobCreate{Schedule: "1h", Text: long + "x"}); r.Code != 400 {
		t.Fatalf("one character more: %d %s", r.Code, r.Body)
	}
}
