package delivery_test

import (
	"bufio"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/host/delivery"
	"github.com/chimehq/chime/hostapi"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// running is a host service serving on a loopback port.
type running struct {
	svc  *host.Service
	url  string
	stop func()
}

func startHost(t *testing.T, dir string, clk clockwork.Clock, dc host.DeliveryConfig) *running {
	t.Helper()
	if dc.Connectors == nil {
		dc = host.DefaultDeliveryConfig()
	}
	svc, err := host.New(host.Config{DataDir: dir, Token: "tok", Clock: clk, Delivery: dc}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Serve(ctx, ln) }()
	r := &running{svc: svc, url: "http://" + ln.Addr().String()}
	var once bool
	r.stop = func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}
	t.Cleanup(r.stop)
	return r
}

// stream is an open event stream.
type stream struct {
	resp *http.Response
	br   *bufio.Reader
}

// streamClient bounds a stream, so a missing event fails the test
// instead of hanging it.
var streamClient = &http.Client{Timeout: time.Minute}

// event is one SSE message: an event with id and data, or a comment.
type event struct {
	id      string
	name    string
	data    delivery.Payload
	comment string
}

func subscribe(t *testing.T, base, sid, lastID, token string) (*stream, int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, base+"/v1/sessions/"+sid+"/events", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := streamClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	s := &stream{resp: resp, br: bufio.NewReader(resp.Body)}
	t.Cleanup(s.close)
	if ev := s.next(t); !strings.HasPrefix(ev.comment, "chime events") {
		t.Fatalf("first message %+v", ev)
	}
	return s, resp.StatusCode
}

func (s *stream) close() { _ = s.resp.Body.Close() }

// next reads one message (events and comments; retry lines are skipped).
func (s *stream) next(t *testing.T) event {
	t.Helper()
	var ev event
	got := false
	for {
		line, err := s.br.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if got {
				return ev
			}
		case strings.HasPrefix(line, ":"):
			ev.comment, got = strings.TrimSpace(line[1:]), true
		case strings.HasPrefix(line, "id: "):
			ev.id, got = line[4:], true
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[6:]), &ev.data); err != nil {
				t.Fatalf("data %q: %v", line, err)
			}
		}
	}
}

// nextEvent skips heartbeats.
func (s *stream) nextEvent(t *testing.T) event {
	t.Helper()
	for {
		if ev := s.next(t); ev.id != "" {
			return ev
		}
	}
}

func deliver(t *testing.T, svc *host.Service, sid, run, text string) {
	t.Helper()
	if err := svc.Deliver(context.Background(), delivery.Item{Session: sid, RunID: run, Reason: "interval", Text: text, At: t0}); err != nil {
		t.Fatal(err)
	}
}

// waitFor polls cond (synchronisation, not timing).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A subscriber gets deliveries as they come; one that reconnects with
// Last-Event-ID gets what it missed, across a host restart.
func TestSSEStreamResumeAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	clk := clockwork.NewFakeClockAt(t0)
	h := startHost(t, dir, clk, host.DeliveryConfig{})

	if _, code := subscribe(t, h.url, "s1", "", ""); code != http.StatusUnauthorized {
		t.Fatalf("without the token: %d", code)
	}
	if _, code := subscribe(t, h.url, "s1", "x7", "tok"); code != http.StatusBadRequest {
		t.Fatalf("bad Last-Event-ID: %d", code)
	}
	st, _ := subscribe(t, h.url, "s1", "", "tok")
	if got := h.svc.DeliveryQueue().LastChannel("s1"); got != delivery.SSE {
		t.Fatalf("last channel after subscribing: %q", got)
	}
	deliver(t, h.svc, "s1", "wake:s1:1", "first")
	ev := st.nextEvent(t)
	if ev.name != delivery.EventName || ev.data.Text != "first" || ev.data.RunID != "wake:s1:1" || ev.data.Session != "s1" || ev.data.Reason != "interval" {
		t.Fatalf("first event %+v", ev)
	}
	firstID := ev.id

	// Heartbeats every 15 s of the injected clock.
	clk.Advance(delivery.DefaultHeartbeat)
	if ev := st.next(t); ev.comment != "heartbeat" {
		t.Fatalf("want a heartbeat, got %+v", ev)
	}

	// Gone: two more are logged meanwhile.
	st.close()
	waitFor(t, "the subscription to close", func() bool { return h.svc.DeliveryQueue().Subscribers("s1") == 0 })
	deliver(t, h.svc, "s1", "wake:s1:2", "second")
	waitFor(t, "the second delivery", func() bool {
		ds, _ := h.svc.DeliveryQueue().List("s1", delivery.StateDelivered)
		return len(ds) == 2
	})
	// The host restarts; the third arrives while the client is still away.
	h.stop()
	h = startHost(t, dir, clk, host.DeliveryConfig{})
	deliver(t, h.svc, "s1", "wake:s1:3", "third")
	waitFor(t, "the third delivery", func() bool {
		ds, _ := h.svc.DeliveryQueue().List("s1", delivery.StateDelivered)
		return len(ds) == 3
	})
	st, _ = subscribe(t, h.url, "s1", firstID, "tok")
	for _, want := range []string{"second", "third"} {
		if ev := st.nextEvent(t); ev.data.Text != want {
			t.Fatalf("resumed: want %q, got %+v", want, ev)
		}
	}
	// And live again.
	deliver(t, h.svc, "s1", "wake:s1:4", "fourth")
	if ev := st.nextEvent(t); ev.data.Text != "fourth" {
		t.Fatalf("live after resume: %+v", ev)
	}
	// A fresh subscriber without Last-Event-ID gets the whole log.
	all, _ := subscribe(t, h.url, "s1", "", "tok")
	for _, want := range []string{"first", "second", "third", "fourth"} {
		if ev := all.nextEvent(t); ev.data.Text != want {
			t.Fatalf("full replay: want %q, got %+v", want, ev)
		}
	}
}

// Last-interaction routing: an open event stream gets the reply there;
// after the client sends a request the next reply is injected into the
// session's next request; a wake's own request does not count.
func TestLastInteractionRouting(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	h := startHost(t, t.TempDir(), clk, host.DeliveryConfig{})
	q := h.svc.DeliveryQueue()

	st, _ := subscribe(t, h.url, "s1", "", "tok")
	deliver(t, h.svc, "s1", "wake:s1:1", "to the stream")
	first := st.nextEvent(t)
	if first.data.Text != "to the stream" {
		t.Fatalf("stream: %+v", first)
	}

	h.svc.Prepare(context.Background(), hostapi.PrepareRequest{RequestID: "r1", SessionID: "s1"})
	if got := q.LastChannel("s1"); got != delivery.Session {
		t.Fatalf("after a proxied request: %q", got)
	}
	deliver(t, h.svc, "s1", "wake:s1:2", "build finished")
	waitFor(t, "the injection", func() bool {
		ds, _ := q.List("s1", delivery.StateDelivered)
		return len(ds) == 2
	})
	ds, _ := q.List("s1", "")
	if ds[1].Connector != delivery.Session || ds[1].Key != "wake:s1:2:session" {
		t.Fatalf("second entry: %+v", ds[1])
	}
	ans := h.svc.Prepare(context.Background(), hostapi.PrepareRequest{RequestID: "r2", SessionID: "s1"})
	if !ans.Reserved || !strings.Contains(ans.Reminders, "[while you were away: build finished]") {
		t.Fatalf("next request's injection: %+v", ans)
	}
	// Subscribing again makes the stream the last interaction, and a
	// wake's own request through the proxy is not the user coming back.
	st2, _ := subscribe(t, h.url, "s1", first.id, "tok")
	h.svc.Prepare(context.Background(), hostapi.PrepareRequest{RequestID: "wake:s1:9", SessionID: "s1"})
	if got := q.LastChannel("s1"); got != delivery.SSE {
		t.Fatalf("after a wake's request: %q", got)
	}
	deliver(t, h.svc, "s1", "wake:s1:3", "back to the stream")
	if ev := st2.nextEvent(t); ev.data.Text != "back to the stream" {
		t.Fatalf("stream again: %+v", ev)
	}
}

// A background timer that completes while the client is away reaches the
// session's open event stream (chime watch), and still waits for the
// model in the session's next request.
func TestBackgroundTimerReachesTheStream(t *testing.T) {
	h := startHost(t, t.TempDir(), clockwork.NewRealClock(), host.DeliveryConfig{})
	post := func(path string, body any) map[string]any {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, h.url+path, strings.NewReader(string(raw)))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %v", path, resp.StatusCode, out)
		}
		return out
	}
	h.svc.Prepare(context.Background(), hostapi.PrepareRequest{RequestID: "r0", SessionID: "s1"})
	// The user walks away from the client and watches instead.
	st, _ := subscribe(t, h.url, "s1", "", "tok")
	res := post(host.PathToolsExecute, host.ToolCall{SessionID: "s1", RequestID: "r1", Name: hostapi.TimerToolName,
		Arguments: json.RawMessage(`{"total_duration":0.5,"timeout_duration":0.001,"timer_id":"","reason":"deploy"}`)})
	tid, _ := res["timer_id"].(string)
	if tid == "" {
		t.Fatalf("timer call: %v", res)
	}
	post("/api/sessions/s1/timers/"+tid+"/cancel", nil) // to the background: notify on completion
	ev := st.nextEvent(t)
	if ev.data.Reason != "timer" || ev.data.RunID != "timer:"+tid || !strings.Contains(ev.data.Text, `timer completed: "deploy"`) {
		t.Fatalf("event %+v", ev)
	}
	ans := h.svc.Prepare(context.Background(), hostapi.PrepareRequest{RequestID: "r2", SessionID: "s1"})
	if !ans.Reserved || !strings.Contains(ans.Reminders, "timer completed") {
		t.Fatalf("the model's next request: %+v", ans)
	}
}
