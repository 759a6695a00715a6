package host

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/jonboulle/clockwork"
)

// scrape returns every sample of /metrics keyed by its name and labels as
// printed, e.g. `chime_tool_calls_total{ok="true",tool="clock"}`.
func scrape(t *testing.T, f *fixture) map[string]float64 {
	t.Helper()
	rec := f.do(t, http.MethodGet, "/metrics", "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("/metrics: %d", rec.Code)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-metrics"
	f.schedule(t, sid, "one", t0.Add(30*time.Second))
	f.schedule(t, sid, "two", t0.Add(40*time.Second))
	f.prepare(t, hostapi.PrepareRequest{RequestID: "m-1", SessionID: sid}) // 2 reminders
	f.outcome(t, hostapi.PathCommit, "m-1")
	f.schedule(t, sid, "three", t0.Add(50*time.Second))
	f.prepare(t, hostapi.PrepareRequest{RequestID: "m-2", SessionID: sid, Directives: []hostapi.HostDirective{
		{Kind: "stopMessage", Text: "go"}, {Kind: "stopMessage", Text: "go", MaxRepeats: -2}, {Kind: "route", Route: "r1"},
	}}) // 1 reminder
	f.outcome(t, hostapi.PathRollback, "m-2")
	f.outcome(t, hostapi.PathRollback, "m-unknown") // releases nothing: not counted
	f.tool(t, sid, "m-3", "clock", `{"action":"nope","items":[],"taskId":""}`)
	f.tool(t, sid, "m-4", "other", `{}`)
	f.do(t, http.MethodGet, hostapi.PathState, "wrong", nil)

	m := scrape(t, f)
	want := map[string]float64{
		`chime_host_requests_total{code="200",endpoint="prepare"}`:       2,
		`chime_host_requests_total{code="204",endpoint="commit"}`:        1,
		`chime_host_requests_total{code="204",endpoint="rollback"}`:      2,
		`chime_host_requests_total{code="200",endpoint="tools_execute"}`: 5,
		`chime_host_requests_total{code="401",endpoint="state"}`:         1,
		`chime_reminders_injected_total`:                                 3,
		`chime_reservations_total{outcome="committed"}`:                  1,
		`chime_reservations_total{outcome="rolled_back"}`:                1,
		`chime_directives_total{kind="stopMessage"}`:                     1,
		`chime_directives_total{kind="route"}`:                           1,
		`chime_directive_errors_total{kind="stopMessage"}`:               1,
		`chime_tool_calls_total{ok="true",tool="clock"}`:                 3,
		`chime_tool_calls_total{ok="false",tool="clock"}`:                1,
		`chime_tool_calls_total{ok="false",tool="unknown"}`:              1,
		`chime_ntp_offset_ms`:                                            0,
		`chime_ntp_status{status="disabled"}`:                            1,
		`chime_ntp_status{status="ok"}`:                                  0,
		`chime_ntp_status{status="error"}`:                               0,
		`chime_ntp_status{status="stale"}`:                               0,
	}
	for k, v := range want {
		got, ok := m[k]
		if !ok {
			t.Errorf("missing %s", k)
		} else if got != v {
			t.Errorf("%s = %v, want %v", k, got, v)
		}
	}
	if _, ok := m["go_goroutines"]; !ok {
		t.Error("Go collector missing")
	}
}

func TestDashboardAPI(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess/dash"
	f.schedule(t, sid, "private errand", t0.Add(time.Hour))
	f.prepare(t, hostapi.PrepareRequest{RequestID: "d-1", SessionID: sid, Directives: []hostapi.HostDirective{
		{Kind: "stopMessage", Text: "secret continue text", MaxRepeats: 4}, {Kind: "route", Route: "slow"},
	}})
	f.clk.Advance(time.Minute)
	f.prepare(t, hostapi.PrepareRequest{RequestID: "d-2", SessionID: "sess-other"}) // touch only, not flushed

	rec := f.do(t, http.MethodGet, "/api/sessions", "", nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("/api/sessions: %d %s", rec.Code, rec.Body)
	}
	if strings.Contains(rec.Body.String(), "secret") {
		t.Fatalf("stopMessage text leaked without the token: %s", rec.Body)
	}
	var sessions []map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &sessions); err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 2 {
		t.Fatalf("sessions: %s", rec.Body)
	}
	// Most recently seen first; the pending touch shows up before any flush.
	other, dash := sessions[0], sessions[1]
	if other["id"] != "sess-other" || other["stopMessage"] != nil || other["taskCount"].(float64) != 0 ||
		other["lastSeenAt"].(float64) != float64(t0.Add(time.Minute).UnixMilli()) {
		t.Fatalf("pending session view: %v", other)
	}
	keys := make([]string, 0, len(dash))
	for k := range dash {
		keys = append(keys, k)
	}
	if len(keys) != 8 || dash["lastChannel"] != "session" || dash["liveTimers"].(float64) != 0 || dash["id"] != sid || dash["taskCount"].(float64) != 1 || dash["route"] != "slow" ||
		dash["createdAt"].(float64) != float64(t0.UnixMilli()) {
		t.Fatalf("session view: %v", dash)
	}
	if sm := dash["stopMessage"].(map[string]any); sm["maxRepeats"].(float64) != 4 || sm["used"].(float64) != 0 || len(sm) != 2 {
		t.Fatalf("stopMessage view: %v", sm)
	}

	tasksPath := "/api/sessions/" + url.PathEscape(sid) + "/tasks"
	rec = f.do(t, http.MethodGet, tasksPath, "", nil)
	if rec.Code != http.StatusOK || strings.Contains(rec.Body.String(), "private errand") {
		t.Fatalf("tasks without token: %d %s", rec.Code, rec.Body)
	}
	var tasks []TaskView
	if err := json.Unmarshal(rec.Body.Bytes(), &tasks); err != nil || len(tasks) != 1 {
		t.Fatalf("tasks: %s %v", rec.Body, err)
	}
	if tk := tasks[0]; tk.DueAt != t0.Add(time.Hour).UnixMilli() || tk.DeliveryCount != 0 || tk.Reserved || tk.Task != "" || tk.TaskID == "" {
		t.Fatalf("task view: %+v", tk)
	}

	// ?include=text needs the token, even from loopback.
	if rec := f.do(t, http.MethodGet, tasksPath+"?include=text", "", nil); rec.Code != http.StatusUnauthorized {
		t.Fatalf("include=text without token: %d", rec.Code)
	}
	rec = f.do(t, http.MethodGet, tasksPath+"?include=text", testToken, nil)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"task":"private errand"`) {
		t.Fatalf("include=text with token: %d %s", rec.Code, rec.Body)
	}
	rec = f.do(t, http.MethodGet, "/api/sessions?include=text", testToken, nil)
	if !strings.Contains(rec.Body.String(), "secret continue text") {
		t.Fatalf("sessions include=text: %s", rec.Body)
	}
	if rec := f.do(t, http.MethodGet, "/api/sessions?include=all", testToken, nil); rec.Code != http.StatusBadRequest {
		t.Fatalf("bad include: %d", rec.Code)
	}
	if rec := f.do(t, http.MethodGet, "/api/sessions?limit=1", "", nil); !strings.Contains(rec.Body.String(), "sess-other") || strings.Contains(rec.Body.String(), "dash") {
		t.Fatalf("limit=1: %s", rec.Body)
	}
	if rec := f.do(t, http.MethodGet, "/api/sessions/nobody/tasks", "", nil); rec.Code != http.StatusNotFound {
		t.Fatalf("unknown session: %d", rec.Code)
	}

	// From another machine the token is required.
	req := newRequest(http.MethodGet, "/api/sessions", nil)
	req.RemoteAddr = "192.0.2.7:5000"
	if rec := serve(f.svc, req); rec.Code != http.StatusUnauthorized {
		t.Fatalf("remote without token: %d", rec.Code)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	if rec := serve(f.svc, req); rec.Code != http.StatusOK {
		t.Fatalf("remote with token: %d", rec.Code)
	}
}

func TestServeLifecycle(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	f := openFixture(t, dir, clockwork.NewFakeClockAt(t0))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.svc.Serve(ctx, ln) }()

	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+hostapi.PathPrepare,
		strings.NewReader(`{"requestId":"live-1","sessionId":"live"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"tools":["clock","timer",`) {
		t.Fatalf("live prepare: %d %s", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	// The store was closed (its lock released) and the touch written.
	g := openFixture(t, dir, clockwork.NewFakeClockAt(t0))
	if s, ok, _ := g.svc.store.GetSession("live"); !ok || s.LastSeenAt != t0.UnixMilli() {
		t.Fatalf("session after Serve: %+v %v", s, ok)
	}
}

func TestRunReportsListenError(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	f := newFixture(t, func(c *Config) { c.Addr = ln.Addr().String() })
	if err := f.svc.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Fatalf("Run on a taken port: %v", err)
	}
}

// TestDashboardRefusesForeignHost: a loopback connection whose Host is not
// a loopback name (a web page through a rebound DNS name) gets nothing
// without the token; loopback names and configured ones are served
// (docs/failures.md).
func TestDashboardRefusesForeignHost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.DashboardHosts = []string{"chime.internal"} })
	get := func(host, token string) int {
		req := newRequest(http.MethodGet, "/api/sessions", nil)
		req.Host = host
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		return serve(f.svc, req).Code
	}
	for _, h := range []string{"evil.example", "evil.example:8787", "127.0.0.1.nip.io:8787", "10.0.0.1:8787", ""} {
		if code := get(h, ""); code != http.StatusForbidden {
			t.Errorf("Host %q without token: %d, want 403", h, code)
		}
		if code := get(h, testToken); code != http.StatusOK {
			t.Errorf("Host %q with token: %d", h, code)
		}
	}
	for _, h := range []string{"127.0.0.1:8787", "localhost:8787", "LOCALHOST", "[::1]:8787", "app.localhost", "chime.internal:8787", "127.0.0.2"} {
		if code := get(h, ""); code != http.StatusOK {
			t.Errorf("Host %q without token: %d, want 200", h, code)
		}
	}
	req := newRequest(http.MethodGet, "/api/sessions/s1/tasks", nil)
	req.Host = "evil.example"
	if code := serve(f.svc, req).Code; code != http.StatusForbidden {
		t.Errorf("tasks under a foreign Host: %d", code)
	}
}
