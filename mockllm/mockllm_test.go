package mockllm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/llm"
)

var paths = map[llm.Protocol]string{
	llm.Chat:      "/v1/chat/completions",
	llm.Responses: "/v1/responses",
	llm.Messages:  "/v1/messages?beta=true",
}

func post(t *testing.T, url, body string) *http.Response {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func readBody(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// validBody is a minimal request that p's provider accepts.
func validBody(p llm.Protocol, stream bool) string {
	s := map[bool]string{true: "true", false: "false"}[stream]
	switch p {
	case llm.Chat:
		opts := ""
		if stream { // OpenAI allows stream_options only on streaming requests
			opts = `,"stream_options":{"include_usage":true}`
		}
		return `{"model":"test-model","stream":` + s + opts + `,"messages":[{"role":"user","content":"hi"}]}`
	case llm.Responses:
		return `{"model":"test-model","stream":` + s + `,"input":"hi"}`
	}
	return `{"model":"test-model","max_tokens":1024,"stream":` + s + `,"messages":[{"role":"user","content":"hi"}]}`
}

// call sends one provider request and decodes the turn, JSON or SSE.
func call(t *testing.T, base string, p llm.Protocol, stream bool) (*llm.Turn, *http.Response) {
	t.Helper()
	resp := post(t, base+paths[p], validBody(p, stream))
	raw := readBody(t, resp)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %s", resp.StatusCode, raw)
	}
	if !stream {
		if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("content type %q", ct)
		}
		turn, err := llm.ParseResponse(p, raw)
		if err != nil {
			t.Fatalf("%v: %s", err, raw)
		}
		return turn, resp
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("content type %q", ct)
	}
	r := llm.NewStreamReader(p)
	evs, err := r.Feed(raw)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := r.Close()
	if err != nil {
		t.Fatal(err)
	}
	var b llm.TurnBuilder
	for _, ev := range append(evs, rest...) {
		b.Add(ev)
	}
	if !b.Terminated() {
		t.Fatalf("stream without terminal event:\n%s", raw)
	}
	return b.Turn(), resp
}

func script(t *testing.T, base, body string) {
	t.Helper()
	resp := post(t, base+"/__mock/script", body)
	if raw := readBody(t, resp); resp.StatusCode != http.StatusOK {
		t.Fatalf("script: %d %s", resp.StatusCode, raw)
	}
}

func TestAllProtocolsJSONAndSSE(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		for _, stream := range []bool{false, true} {
			script(t, srv.URL, `[{"text":"Hello ☕ there, this is a longer reply.","toolCalls":[{"name":"clock","arguments":{"action":"get"}},{"name":"shell","arguments":"{\"cmd\":\"ls\"}"}]},{"text":"plain","finish":"length"}]`)
			got, _ := call(t, srv.URL, p, stream)
			if got.Text != "Hello ☕ there, this is a longer reply." || len(got.ToolCalls) != 2 ||
				got.ToolCalls[0].Name != "clock" || got.ToolCalls[0].Arguments != `{"action":"get"}` ||
				got.ToolCalls[1].Arguments != `{"cmd":"ls"}` || got.Finish.Reason != llm.FinishToolCalls {
				t.Errorf("%s stream=%v: %+v", p, stream, got)
			}
			if got.Model != "test-model" || got.ID == "" || got.ToolCalls[0].ID == got.ToolCalls[1].ID {
				t.Errorf("%s stream=%v: model/id %+v", p, stream, got)
			}
			if got.Usage.InputTokens <= 0 || got.Usage.OutputTokens <= 0 {
				t.Errorf("%s stream=%v: usage %+v", p, stream, got.Usage)
			}
			got, _ = call(t, srv.URL, p, stream)
			if got.Text != "plain" || got.Finish.Reason != llm.FinishLength || len(got.ToolCalls) != 0 {
				t.Errorf("%s stream=%v second reply: %+v", p, stream, got)
			}
		}
	}
}

func TestScriptOrderAndDefault(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	script(t, srv.URL, `{"text":"one"}`)
	script(t, srv.URL, `[{"text":"two"},{"text":"three","finish":"end_turn"}]`)
	var texts []string
	// Replies are consumed in order whatever the protocol of the request.
	for _, p := range []llm.Protocol{llm.Messages, llm.Chat, llm.Responses, llm.Chat} {
		got, _ := call(t, srv.URL, p, false)
		texts = append(texts, got.Text)
		if got.Finish.Reason != llm.FinishStop {
			t.Errorf("finish %+v", got.Finish)
		}
	}
	if strings.Join(texts, ",") != "one,two,three,ok" {
		t.Errorf("order %v, want one,two,three,ok (empty queue answers ok)", texts)
	}
}

func TestScriptedErrorStatus(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		script(t, srv.URL, `{"status":500,"error":"upstream exploded"}`)
		resp := post(t, srv.URL+paths[p], validBody(p, true))
		raw := readBody(t, resp)
		if resp.StatusCode != 500 {
			t.Fatalf("%s: status %d", p, resp.StatusCode)
		}
		_, err := llm.ParseResponse(p, raw)
		var perr *llm.ProviderError
		if !errors.As(err, &perr) || perr.Message != "upstream exploded" {
			t.Errorf("%s: error body %s gave %v", p, raw, err)
		}
		// The error consumed the reply: the next request gets the default.
		if got, _ := call(t, srv.URL, p, false); got.Text != "ok" {
			t.Errorf("%s: after error got %q", p, got.Text)
		}
	}
}

func TestBadScript(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	for _, body := range []string{``, `{`, `{"txt":"typo"}`, `[{"toolCalls":[{"arguments":"{}"}]}]`,
		`{"status":42}`, `{"delayMs":-1}`, `{"eventDelaysMs":[1,-1]}`, `{"toolCalls":[{"name":"x","arguments":{bad}}]}`, `"text"`} {
		resp := post(t, srv.URL+"/__mock/script", body)
		raw := readBody(t, resp)
		var e struct{ Error string }
		if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(raw, &e) != nil || e.Error == "" {
			t.Errorf("script %q: %d %s", body, resp.StatusCode, raw)
		}
	}
	// Nothing was queued by the bad scripts.
	if got, _ := call(t, srv.URL, llm.Chat, false); got.Text != "ok" {
		t.Errorf("bad scripts queued something: %q", got.Text)
	}
}

func TestScriptQueueEndpoints(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	script(t, srv.URL, `[{"text":"a"},{"text":"b"}]`)
	resp, err := http.Get(srv.URL + "/__mock/script")
	if err != nil {
		t.Fatal(err)
	}
	var q []Reply
	if err := json.Unmarshal(readBody(t, resp), &q); err != nil || len(q) != 2 || q[1].Text != "b" {
		t.Fatalf("queue %+v %v", q, err)
	}
	req, _ := http.NewRequest(http.MethodDelete, srv.URL+"/__mock/script", nil)
	resp, err = http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete script: %v %v", resp, err)
	}
	if got, _ := call(t, srv.URL, llm.Responses, true); got.Text != "ok" {
		t.Errorf("cleared queue still answered %q", got.Text)
	}
}

func TestRequestLog(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	before := time.Now()
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/v1/messages?beta=true", strings.NewReader(`{"model":"claude","messages":[]}`))
	req.Header.Set("X-Chime-Session", "s-42")
	req.Header.Add("X-Multi", "a")
	req.Header.Add("X-Multi", "b")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	readBody(t, resp)
	after := time.Now()

	resp, err = http.Get(srv.URL + "/__mock/requests")
	if err != nil {
		t.Fatal(err)
	}
	raw := readBody(t, resp)
	var generic []map[string]any
	if err := json.Unmarshal(raw, &generic); err != nil || len(generic) != 1 {
		t.Fatalf("requests %s: %v", raw, err)
	}
	at, err := time.Parse(time.RFC3339Nano, generic[0]["receivedAt"].(string))
	if err != nil || at.Before(before.Add(-time.Millisecond)) || at.After(after.Add(time.Millisecond)) {
		t.Errorf("receivedAt %v not within [%v, %v] (%v)", generic[0]["receivedAt"], before, after, err)
	}
	var recs []RecordedRequest
	if err := json.Unmarshal(raw, &recs); err != nil {
		t.Fatal(err)
	}
	r := recs[0]
	if r.Path != "/v1/messages?beta=true" || r.Method != "POST" || r.Body != `{"model":"claude","messages":[]}` ||
		r.Headers["x-chime-session"] != "s-42" || r.Headers["x-multi"] != "a, b" || r.Headers["host"] == "" {
		t.Errorf("recorded %+v", r)
	}
	// Control endpoints are not recorded; DELETE clears.
	req, _ = http.NewRequest(http.MethodDelete, srv.URL+"/__mock/requests", nil)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("delete: %v %v", resp, err)
	}
	resp, _ = http.Get(srv.URL + "/__mock/requests")
	if raw := strings.TrimSpace(string(readBody(t, resp))); raw != "[]" {
		t.Errorf("after delete: %s", raw)
	}
}

func TestUnknownPathAndMethod(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	resp := post(t, srv.URL+"/v1/embeddings", `{}`)
	if raw := readBody(t, resp); resp.StatusCode != http.StatusNotFound || !strings.Contains(string(raw), "no such endpoint") {
		t.Errorf("unknown path: %d %s", resp.StatusCode, raw)
	}
	resp, err := http.Get(srv.URL + "/v1/chat/completions")
	if err != nil {
		t.Fatal(err)
	}
	if readBody(t, resp); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET provider path: %d", resp.StatusCode)
	}
	if n := len(srvRequests(t, srv.URL)); n != 2 {
		t.Errorf("every provider-side request is recorded, got %d", n)
	}
}

func srvRequests(t *testing.T, base string) []RecordedRequest {
	resp, err := http.Get(base + "/__mock/requests")
	if err != nil {
		t.Fatal(err)
	}
	var recs []RecordedRequest
	if err := json.Unmarshal(readBody(t, resp), &recs); err != nil {
		t.Fatal(err)
	}
	return recs
}

// fakeClock fires every wait at once and logs it with the number of SSE
// events the response held when the wait began, so delays are checked
// without sleeping.
type fakeClock struct {
	mu     sync.Mutex
	waits  []string
	events func() int
	block  chan struct{} // when set, waits never fire; closed on the first wait
}

func (c *fakeClock) Now() time.Time { return time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC) }

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.block != nil {
		close(c.block)
		c.block = nil
		return nil
	}
	n := 0
	if c.events != nil {
		n = c.events()
	}
	c.waits = append(c.waits, fmt.Sprintf("%v@%d", d, n))
	ch := make(chan time.Time, 1)
	ch <- c.Now().Add(d)
	return ch
}

func TestDelaysUseTheClock(t *testing.T) {
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		s := New()
		rec := httptest.NewRecorder()
		clk := &fakeClock{events: func() int { return strings.Count(rec.Body.String(), "\n\n") }}
		s.Clock = clk
		s.Script(Reply{Text: "abcdefghijklmnopqrstuvwxyz", Thinking: "hmm, let me see", DelayMs: 150, ChunkDelayMs: 40, EventDelaysMs: []int{5, 0, 7}})
		s.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, paths[p], strings.NewReader(validBody(p, true))))
		n := strings.Count(rec.Body.String(), "\n\n")
		if rec.Code != http.StatusOK || n < 6 {
			t.Fatalf("%s: %d, %d events:\n%s", p, rec.Code, n, rec.Body)
		}
		// delayMs before anything, eventDelaysMs[0] before event 0, [1]=0 is
		// no wait, [2] before event 2, then chunkDelayMs before each later one.
		want := []string{"150ms@0", "5ms@0", "7ms@2"}
		for i := 3; i < n; i++ {
			want = append(want, fmt.Sprintf("40ms@%d", i))
		}
		if got := strings.Join(clk.waits, " "); got != strings.Join(want, " ") {
			t.Errorf("%s waits:\n got %s\nwant %s", p, got, strings.Join(want, " "))
		}
		if at := s.Requests()[0].ReceivedAt; !at.Equal(clk.Now()) {
			t.Errorf("%s: receivedAt %v is not from the clock", p, at)
		}
	}
}

// Real time is what this test is about: the default clock must really wait.
func TestDefaultClockIsRealTime(t *testing.T) {
	srv := httptest.NewServer(New())
	defer srv.Close()
	script(t, srv.URL, `{"text":"slow start","delayMs":30}`)
	start := time.Now()
	call(t, srv.URL, llm.Chat, false)
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Errorf("delayMs 30 answered after %v", d)
	}
}

func TestDisconnectDuringDelay(t *testing.T) {
	s := New()
	waiting := make(chan struct{})
	s.Clock = &fakeClock{block: waiting}
	srv := httptest.NewServer(s)
	defer srv.Close()
	script(t, srv.URL, `[{"text":"never seen","delayMs":5000},{"text":"next"}]`)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-waiting; cancel() }()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+paths[llm.Chat], strings.NewReader(validBody(llm.Chat, false)))
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("expected the client to give up")
	}
	// The disconnected request consumed its reply; the next one is served at once.
	if got, _ := call(t, srv.URL, llm.Chat, false); got.Text != "next" {
		t.Errorf("got %q", got.Text)
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := New()
	s.Script(Reply{Text: "via Serve"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	if got, _ := call(t, base, llm.Responses, false); got.Text != "via Serve" {
		t.Errorf("got %q", got.Text)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve returned %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop after cancel")
	}
	if err := New().ListenAndServe(context.Background(), ln.Addr().String()+"x"); err == nil {
		t.Error("a bad address must fail")
	}
}
