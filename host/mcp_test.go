package host

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chimehq/chime/hostapi"
)

// headerTransport adds the token and the chime session to every request
// of an MCP client.
type headerTransport struct {
	token, session string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if h.token != "" {
		r.Header.Set("Authorization", "Bearer "+h.token)
	}
	if h.session != "" {
		r.Header.Set("x-chime-session", h.session)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpHost is a real-clock host service behind an httptest server: the
// timer waits of these tests are real time.
func mcpHost(t *testing.T) (*Service, *httptest.Server) {
	t.Helper()
	svc, err := New(Config{DataDir: t.TempDir(), Token: testToken}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return svc, srv
}

func mcpConnect(t *testing.T, srv *httptest.Server, token, session string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "chime-test", Version: "0"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:   srv.URL + PathMCP,
		HTTPClient: &http.Client{Transport: headerTransport{token: token, session: session}},
		MaxRetries: -1,
	}, nil)
	if err == nil {
		t.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

// timerResult is the part of a timer tool result the tests read.
type timerResult struct {
	OK       bool    `json:"ok"`
	TimerID  string  `json:"timer_id"`
	Status   string  `json:"status"`
	TimedOut bool    `json:"timed_out"`
	Reason   string  `json:"reason"`
	Waited   float64 `json:"waited_s"`
}

// mcpCall calls a tool and decodes its one text content into out.
func mcpCall(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name, args string, out any) error {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
	if err != nil {
		return err
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d contents", name, len(res.Content))
	}
	text, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("%s: content %T, want text", name, res.Content[0])
	}
	if err := json.Unmarshal([]byte(text.Text), out); err != nil {
		t.Fatalf("%s: result %q: %v", name, text.Text, err)
	}
	return nil
}

// TestMCPTools: the MCP server offers exactly the injected tools, with
// hostapi's descriptions and schemas.
func TestMCPTools(t *testing.T) {
	t.Parallel()
	_, srv := mcpHost(t)
	cs, err := mcpConnect(t, srv, testToken, "s-list")
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	// The SDK lists tools by name; compare them as a set.
	specs := map[string]int{}
	for i, spec := range mcpToolSpecs() {
		specs[spec.Name] = i
	}
	if len(res.Tools) != 1+len(hostapi.TimerToolNames()) || len(specs) != len(res.Tools) {
		t.Fatalf("%d tools, want %d", len(res.Tools), len(specs))
	}
	for _, tool := range res.Tools {
		i, ok := specs[tool.Name]
		if !ok {
			t.Fatalf("unexpected tool %q", tool.Name)
		}
		spec := mcpToolSpecs()[i]
		delete(specs, tool.Name)
		if tool.Description != spec.Description {
			t.Fatalf("%s description %q, want %q", tool.Name, tool.Description, spec.Description)
		}
		got, _ := json.Marshal(tool.InputSchema)
		var g, w any
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(spec.Parameters, &w); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(g, w) {
			t.Fatalf("%s schema:\n got %s\nwant %s", tool.Name, got, spec.Parameters)
		}
	}
}

// TestMCPDisabledTools: a family turned off on the host is not offered.
func TestMCPDisabledTools(t *testing.T) {
	t.Parallel()
	svc, err := New(Config{DataDir: t.TempDir(), Token: testToken, DisableTimers: true}, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	cs, err := mcpConnect(t, srv, testToken, "")
	if err != nil {
		t.Fatal(err)
	}
	res, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Tools) != 1 || res.Tools[0].Name != hostapi.ClockToolName {
		t.Fatalf("tools with timers disabled: %+v", res.Tools)
	}
}

// TestMCPNoToken: /mcp is behind the host token.
func TestMCPNoToken(t *testing.T) {
	t.Parallel()
	_, srv := mcpHost(t)
	for _, tok := range []string{"", "wrong"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+PathMCP, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("token %q: %d, want 401", tok, resp.StatusCode)
		}
	}
	if _, err := mcpConnect(t, srv, "", "s"); err == nil {
		t.Fatal("an MCP client without the token connected")
	}
}

// TestMCPClockAndTimers runs the scenario through an MCP client.
// The waits are real time (3 s in all): what is under test is that the
// MCP call itself is held for the wait.
func TestMCPClockAndTimers(t *testing.T) {
	t.Parallel()
	_, srv := mcpHost(t)
	cs, err := mcpConnect(t, srv, testToken, "s-one")
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	var sched struct {
		OK    bool `json:"ok"`
		Tasks []struct {
			TaskID string `json:"taskId"`
		} `json:"scheduled"`
	}
	due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	if err := mcpCall(ctx, t, cs, "clock", `{"action":"schedule","taskId":"","items":[{"dueAt":"`+due+`","task":"check the deploy","tool":"","arguments":"","repeat":"","maxRuns":0}]}`, &sched); err != nil || !sched.OK || len(sched.Tasks) != 1 {
		t.Fatalf("schedule: %+v %v", sched, err)
	}
	var list struct {
		OK    bool              `json:"ok"`
		Tasks []json.RawMessage `json:"items"`
	}
	if err := mcpCall(ctx, t, cs, "clock", `{"action":"list","taskId":"","items":[]}`, &list); err != nil || !list.OK || len(list.Tasks) != 1 || !strings.Contains(string(list.Tasks[0]), "check the deploy") {
		t.Fatalf("list: %+v %v", list, err)
	}

	start := time.Now()
	var r timerResult
	if err := mcpCall(ctx, t, cs, "timer", `{"total_duration":3,"timeout_duration":1,"timer_id":"","reason":"build"}`, &r); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); !r.OK || !r.TimedOut || r.TimerID == "" || r.Status == "Completed" || d < 900*time.Millisecond || d > 2500*time.Millisecond {
		t.Fatalf("first wait after %v: %+v", d, r)
	}
	id := r.TimerID

	// Another session cannot see the timer.
	other, err := mcpConnect(t, srv, testToken, "s-two")
	if err != nil {
		t.Fatal(err)
	}
	var denied struct {
		OK     bool   `json:"ok"`
		Reason string `json:"reason"`
	}
	if err := mcpCall(ctx, t, other, "read_timer", `{"timer_id":"`+id+`"}`, &denied); err != nil || denied.OK || !strings.HasPrefix(denied.Reason, "unknown timer") {
		t.Fatalf("other session read: %+v %v", denied, err)
	}

	r = timerResult{}
	if err := mcpCall(ctx, t, cs, "timer", `{"total_duration":0,"timeout_duration":0,"timer_id":"`+id+`","reason":""}`, &r); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); !r.OK || r.TimedOut || r.Status != "Completed" || r.TimerID != id || d < 2900*time.Millisecond || d > 4500*time.Millisecond {
		t.Fatalf("continued wait ended %v after creation: %+v", d, r)
	}
}

// TestMCPSessionID: without x-chime-session the MCP session id is the
// chime session.
func TestMCPSessionID(t *testing.T) {
	t.Parallel()
	svc, srv := mcpHost(t)
	cs, err := mcpConnect(t, srv, testToken, "")
	if err != nil {
		t.Fatal(err)
	}
	var r timerResult
	if err := mcpCall(t.Context(), t, cs, "timer", `{"total_duration":60,"timeout_duration":0.001,"timer_id":"","reason":""}`, &r); err != nil || !r.OK {
		t.Fatalf("timer: %+v %v", r, err)
	}
	if cs.ID() == "" {
		t.Fatal("no MCP session id")
	}
	vs, err := svc.timers.List(cs.ID())
	if err != nil || len(vs) != 1 || vs[0].TimerID != r.TimerID {
		t.Fatalf("timers of session %q: %+v %v", cs.ID(), vs, err)
	}
}

// TestMCPCancelledWait: a client that cancels its call ends the wait, and
// the timer goes on in the background (docs/timers.md#waiting).
func TestMCPCancelledWait(t *testing.T) {
	t.Parallel()
	_, srv := mcpHost(t)
	cs, err := mcpConnect(t, srv, testToken, "s-cancel")
	if err != nil {
		t.Fatal(err)
	}
	status := func(id string) string {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/api/sessions/"+url.PathEscape("s-cancel")+"/timers", nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var vs []TimerView
		if err := json.NewDecoder(resp.Body).Decode(&vs); err != nil {
			t.Fatal(err)
		}
		for _, v := range vs {
			if v.TimerID == id {
				return v.Status
			}
		}
		return ""
	}
	// waitFor polls the API: the wait's state changes on the host's side
	// of a real connection, so this is real time.
	waitFor := func(id, want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for got := status(id); got != want; got = status(id) {
			if time.Now().After(deadline) {
				t.Fatalf("timer %s: %s, want %s", id, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	var r timerResult
	if err := mcpCall(t.Context(), t, cs, "timer", `{"total_duration":60,"timeout_duration":0.001,"timer_id":"","reason":"deploy"}`, &r); err != nil || !r.OK {
		t.Fatalf("timer: %+v %v", r, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "timer", Arguments: json.RawMessage(`{"total_duration":0,"timeout_duration":0,"timer_id":"` + r.TimerID + `","reason":""}`)})
		done <- err
	}()
	waitFor(r.TimerID, "Waiting")
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	waitFor(r.TimerID, "Background")

	// The session still works after the cancelled call.
	var read timerResult
	if err := mcpCall(t.Context(), t, cs, "read_timer", `{"timer_id":"`+r.TimerID+`"}`, &read); err != nil || read.Status != "Background" {
		t.Fatalf("read after cancel: %+v %v", read, err)
	}
}

// TestMCPSessionGetsDueReminders: a session that only speaks MCP gets its
// due reminder through the delivery queue (not the session connector, as
// no proxied request will come) and as a log notification on its open
// connection.
func TestMCPSessionGetsDueReminders(t *testing.T) {
	svc, srv := mcpHost(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = svc.sched.Run(ctx) }()
	go func() { _ = svc.delivery.Run(ctx) }()

	got := make(chan string, 4)
	client := mcp.NewClient(&mcp.Implementation{Name: "chime-test", Version: "0"}, &mcp.ClientOptions{
		//lint:ignore SA1019 the host's reminder notices are MCP log messages
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			s, _ := req.Params.Data.(string)
			got <- s
		},
	})
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint:   srv.URL + PathMCP,
		HTTPClient: &http.Client{Transport: headerTransport{token: testToken, session: "mcp-remind"}},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	//lint:ignore SA1019 the host's reminder notices are MCP log messages
	if err := cs.SetLoggingLevel(t.Context(), &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
		t.Fatal(err)
	}
	due := time.Now().Add(2 * time.Second).UTC().Format(time.RFC3339)
	var res map[string]any
	args := `{"action":"schedule","taskId":"","items":[{"dueAt":"` + due + `","task":"stretch your legs","tool":"","arguments":"","repeat":"","maxRuns":0}]}`
	if err := mcpCall(t.Context(), t, cs, hostapi.ClockToolName, args, &res); err != nil || res["ok"] != true {
		t.Fatalf("schedule: %v %v", res, err)
	}
	select {
	case text := <-got:
		if !strings.Contains(text, "stretch your legs") {
			t.Fatalf("notification %q", text)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no MCP notification for the due reminder")
	}
	ds, err := svc.delivery.List("mcp-remind", "")
	if err != nil || len(ds) != 1 || ds[0].Connector == "session" || !strings.Contains(ds[0].Text, "stretch your legs") {
		t.Fatalf("deliveries %+v, %v", ds, err)
	}
	tasks, _ := svc.store.ListTasks("mcp-remind")
	if len(tasks) != 1 || tasks[0].DeliveredAt == 0 {
		t.Fatalf("the reminder is not committed as delivered: %+v", tasks)
	}
}
