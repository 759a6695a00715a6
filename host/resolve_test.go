package host

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// followup is one request the fake proxy listener received.
type followup struct {
	path   string
	header http.Header
	body   []byte
}

// fakeProxy stands in for the proxy listener followups re-enter through:
// it records them and answers each with answer's turn rendered by
// llm.RenderJSON, or with a bare status when the status is not 200.
type fakeProxy struct {
	t      *testing.T
	proto  llm.Protocol
	srv    *httptest.Server
	answer func(n int, req followup, ctx context.Context) (int, *llm.Turn)

	mu  sync.Mutex
	got []followup
}

func newFakeProxy(t *testing.T, proto llm.Protocol, answer func(n int, req followup, ctx context.Context) (int, *llm.Turn)) *fakeProxy {
	p := &fakeProxy{t: t, proto: proto, answer: answer}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req := followup{path: r.URL.RequestURI(), header: r.Header.Clone(), body: body}
		p.mu.Lock()
		p.got = append(p.got, req)
		n := len(p.got)
		p.mu.Unlock()
		status, turn := p.answer(n, req, r.Context())
		if status != http.StatusOK {
			w.WriteHeader(status)
			_, _ = io.WriteString(w, `{"error":{"type":"server_error","message":"boom"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if turn == nil { // a 200 that is no turn
			_, _ = io.WriteString(w, "<html>not json")
			return
		}
		_, _ = w.Write(llm.RenderJSON(p.proto, turn))
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *fakeProxy) reentry() string { return p.srv.Listener.Addr().String() }

func (p *fakeProxy) followups() []followup {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]followup(nil), p.got...)
}

// originals are small client requests as the provider received them.
var originals = map[llm.Protocol]string{
	llm.Chat:      `{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`,
	llm.Responses: `{"model":"m","stream":true,"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`,
	llm.Messages:  `{"model":"m","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}`,
}

var paths = map[llm.Protocol]string{
	llm.Chat: "/v1/chat/completions", llm.Responses: "/v1/responses", llm.Messages: "/v1/messages?beta=true",
}

func resolveReq(p llm.Protocol, proxy *fakeProxy, requestID, session string, turn *llm.Turn) hostapi.ResolveRequest {
	return hostapi.ResolveRequest{
		RequestID: requestID, SessionID: session, Protocol: p.String(), Path: paths[p],
		Reentry: proxy.reentry(),
		Headers: map[string]string{
			"authorization": "Bearer sk-client", "x-chime-session": session, "content-length": "999",
			"accept-encoding": "gzip", "connection": "keep-alive, x-hop", "x-hop": "1", ":authority": "proxy",
			"x-envoy-expected-rq-timeout-ms": "1", "accept": "text/event-stream", "x-request-id": "spoofed",
		},
		Request:     json.RawMessage(originals[p]),
		Turn:        turn,
		ServerTools: []string{"clock"},
		Streaming:   true,
	}
}

// resolve posts req to the host with the token and decodes the answer.
func (f *fixture) resolve(t testing.TB, req hostapi.ResolveRequest) hostapi.ResolveResponse {
	t.Helper()
	rec := f.do(t, http.MethodPost, hostapi.PathResolve, testToken, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("resolve: %d %s", rec.Code, rec.Body)
	}
	var resp hostapi.ResolveResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &resp); err != nil {
		t.Fatalf("resolve answer %q: %v", rec.Body, err)
	}
	return resp
}

func scheduleArgs(task string, due time.Time) string {
	b, _ := json.Marshal(map[string]any{"action": "schedule", "taskId": "", "items": []map[string]any{{
		"dueAt": due.Format("2006-01-02T15:04:05.000Z07:00"), "task": task, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0,
	}}})
	return string(b)
}

const getArgs = `{"action":"get","items":[],"taskId":""}`

// lastUserText is the text of the followup's final user input.
func lastUserText(p llm.Protocol, body []byte) string {
	list := gjson.GetBytes(body, "messages")
	if p == llm.Responses {
		list = gjson.GetBytes(body, "input")
	}
	items := list.Array()
	last := items[len(items)-1]
	c := last.Get("content")
	if c.Type == gjson.String {
		return c.Str
	}
	parts := c.Array()
	return parts[len(parts)-1].Get("text").String()
}

// toolOutput returns the result paired with callID in a followup body.
func toolOutput(t *testing.T, p llm.Protocol, body []byte, callID string) string {
	t.Helper()
	switch p {
	case llm.Chat:
		for _, m := range gjson.GetBytes(body, "messages").Array() {
			if m.Get("role").Str == "tool" && m.Get("tool_call_id").Str == callID {
				return m.Get("content").Str
			}
		}
	case llm.Responses:
		for _, it := range gjson.GetBytes(body, "input").Array() {
			if it.Get("type").Str == "function_call_output" && it.Get("call_id").Str == callID {
				return it.Get("output").Str
			}
		}
	case llm.Messages:
		msgs := gjson.GetBytes(body, "messages").Array()
		last := msgs[len(msgs)-1]
		prev := msgs[len(msgs)-2]
		if prev.Get("role").Str != "assistant" || !strings.Contains(prev.Raw, `"id":"`+callID+`"`) {
			t.Fatalf("the message before the results is not the assistant turn with %s: %s", callID, prev.Raw)
		}
		for _, b := range last.Get("content").Array() {
			if b.Get("type").Str == "tool_result" && b.Get("tool_use_id").Str == callID {
				return b.Get("content").Str
			}
		}
	}
	t.Fatalf("no result for call %s in %s", callID, body)
	return ""
}

func TestResolveClockToolFollowup(t *testing.T) {
	t.Parallel()
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			sid := "sess-tool-" + p.String()
			proxy := newFakeProxy(t, p, func(n int, _ followup, _ context.Context) (int, *llm.Turn) {
				return http.StatusOK, &llm.Turn{ID: "resp-2", Text: "Reminder set.", Finish: llm.Finish{Reason: llm.FinishStop},
					Usage: llm.Usage{InputTokens: 10, OutputTokens: 3}}
			})
			turn := &llm.Turn{ID: "resp-1", Text: "Scheduling it.", ToolCalls: []llm.ToolCall{
				{ID: "call_42", Name: "clock", Arguments: scheduleArgs("stretch", t0.Add(time.Hour))},
			}, Finish: llm.Finish{Reason: llm.FinishToolCalls}}
			resp := f.resolve(t, resolveReq(p, proxy, "req-1", sid, turn))

			if !resp.Continued || resp.Reason != "done" || resp.Hops != 1 {
				t.Fatalf("resolve: %+v", resp)
			}
			c := resp.Continuation
			if c.Text != "Reminder set." || len(c.ToolCalls) != 0 || c.Finish.Reason != llm.FinishStop || c.Usage.OutputTokens != 3 {
				t.Fatalf("continuation: %+v", c)
			}
			got := proxy.followups()
			if len(got) != 1 {
				t.Fatalf("%d followups, want 1", len(got))
			}
			fu := got[0]
			if fu.path != paths[p] {
				t.Errorf("followup path %q, want %q", fu.path, paths[p])
			}
			if id := fu.header.Get("X-Request-Id"); id != "req-1:tool1" {
				t.Errorf("x-request-id %q", id)
			}
			if id, ok := hostapi.VerifyFollowupMarker(testToken, fu.header.Get(hostapi.HeaderFollowup), t0); !ok || id != "req-1:tool1" {
				t.Errorf("marker %q does not verify: %q %v", fu.header.Get(hostapi.HeaderFollowup), id, ok)
			}
			h := fu.header
			if h.Get("Authorization") != "Bearer sk-client" || h.Get("X-Chime-Session") != sid {
				t.Errorf("client headers not repeated: %v", h)
			}
			for _, name := range []string{"X-Hop", "X-Envoy-Expected-Rq-Timeout-Ms", "Accept-Encoding"} {
				if h.Get(name) != "" {
					t.Errorf("header %s forwarded: %q", name, h.Get(name))
				}
			}
			if h.Get("Content-Type") != "application/json" || h.Get("Accept") != "application/json" {
				t.Errorf("content-type %q accept %q", h.Get("Content-Type"), h.Get("Accept"))
			}
			if gjson.GetBytes(fu.body, "stream").Bool() || !gjson.GetBytes(fu.body, "stream").Exists() {
				t.Errorf("followup streams: %s", fu.body)
			}
			if _, err := llm.ParseRequest(p, fu.body); err != nil {
				t.Fatalf("followup body: %v", err)
			}
			out := toolOutput(t, p, fu.body, "call_42")
			if !gjson.Get(out, "ok").Bool() || gjson.Get(out, "scheduled.0.task").Str != "stretch" {
				t.Errorf("tool result %s", out)
			}
			// The tool really ran, for the requesting session.
			ts, err := f.svc.store.ListTasks(sid)
			if err != nil || len(ts) != 1 || ts[0].Task != "stretch" {
				t.Fatalf("tasks after the tool call: %+v %v", ts, err)
			}
			m := scrape(t, f)
			if m[`chime_followups_total{reason="tool"}`] != 1 || m[`chime_chains_total{reason="done"}`] != 1 {
				t.Errorf("metrics: followups %v chains %v", m[`chime_followups_total{reason="tool"}`], m[`chime_chains_total{reason="done"}`])
			}
		})
	}
}

func TestResolveTimezoneReachesTool(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) {
		return http.StatusOK, &llm.Turn{Text: "ok", Finish: llm.Finish{Reason: llm.FinishStop}}
	})
	req := resolveReq(llm.Chat, proxy, "req-tz", "sess-tz", &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c", Name: "clock", Arguments: getArgs}}})
	req.Timezone = "Asia/Tokyo"
	f.resolve(t, req)
	out := toolOutput(t, llm.Chat, proxy.followups()[0].body, "c")
	if gjson.Get(out, "timezone").Str != "Asia/Tokyo" {
		t.Fatalf("clock get ran without the request's zone: %s", out)
	}
}

func TestResolveStopMessageTwice(t *testing.T) {
	t.Parallel()
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			sid := "sess-stop-" + p.String()
			f.prepare(t, hostapi.PrepareRequest{RequestID: "req-0", SessionID: sid, Directives: []hostapi.HostDirective{
				{Kind: "stopMessage", Text: "keep going", MaxRepeats: 2},
			}})
			var usedAtSend []int
			proxy := newFakeProxy(t, p, func(n int, _ followup, _ context.Context) (int, *llm.Turn) {
				// docs/continuation.md: used+1 is on disk before the followup is sent.
				st, _, _ := f.svc.store.GetStopMessage(sid)
				usedAtSend = append(usedAtSend, st.Used)
				return http.StatusOK, &llm.Turn{Text: fmt.Sprintf("answer %d", n), Finish: llm.Finish{Reason: llm.FinishStop},
					Usage: llm.Usage{OutputTokens: 1}}
			})
			resp := f.resolve(t, resolveReq(p, proxy, "req-1", sid, &llm.Turn{Text: "I stopped.", Finish: llm.Finish{Reason: llm.FinishStop}}))

			if !resp.Continued || resp.Hops != 2 || resp.Reason != "done" {
				t.Fatalf("resolve: %+v", resp)
			}
			if c := resp.Continuation; c.Text != "answer 1\n\nanswer 2" || c.Usage.OutputTokens != 2 || c.Finish.Reason != llm.FinishStop {
				t.Fatalf("continuation: %+v", c)
			}
			got := proxy.followups()
			if len(got) != 2 {
				t.Fatalf("%d followups, want exactly 2", len(got))
			}
			if fmt.Sprint(usedAtSend) != "[1 2]" {
				t.Errorf("used seen by the proxy at each followup: %v, want [1 2]", usedAtSend)
			}
			for i, fu := range got {
				if txt := lastUserText(p, fu.body); txt != "keep going" {
					t.Errorf("followup %d ends with %q", i+1, txt)
				}
				if id := fu.header.Get("X-Request-Id"); id != fmt.Sprintf("req-1:stop%d", i+1) {
					t.Errorf("followup %d id %q", i+1, id)
				}
			}
			// The second followup carries the first one's answer.
			if !strings.Contains(string(got[1].body), "answer 1") || !strings.Contains(string(got[0].body), "I stopped.") {
				t.Error("followups do not carry the assistant turns")
			}
			st, _, _ := f.svc.store.GetStopMessage(sid)
			if st.Used != 2 || st.LastUsedAt != t0.UnixMilli() {
				t.Errorf("stopMessage state after the chain: %+v", st)
			}
			// Used up: the next stop continues nothing, and prepare says so.
			resp = f.resolve(t, resolveReq(p, proxy, "req-2", sid, &llm.Turn{Text: "again", Finish: llm.Finish{Reason: llm.FinishStop}}))
			if resp.Continued || resp.Hops != 0 || len(proxy.followups()) != 2 {
				t.Fatalf("used-up stopMessage continued: %+v", resp)
			}
			if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-3", SessionID: sid}); ans.MayContinue {
				t.Error("prepare: mayContinue with a used-up stopMessage")
			}
		})
	}
}

func TestResolveStopMessageNotOnLengthOrCompaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-compact"
	f.prepare(t, hostapi.PrepareRequest{RequestID: "req-0", SessionID: sid, Directives: []hostapi.HostDirective{
		{Kind: "stopMessage", Text: "keep going", MaxRepeats: 5},
	}})
	proxy := newFakeProxy(t, llm.Responses, func(int, followup, context.Context) (int, *llm.Turn) {
		return http.StatusOK, &llm.Turn{Text: "x", Finish: llm.Finish{Reason: llm.FinishStop}}
	})
	req := resolveReq(llm.Responses, proxy, "req-c", sid, &llm.Turn{Text: "## Summary", Finish: llm.Finish{Reason: llm.FinishStop}})
	req.Request = json.RawMessage(`{"model":"m","input":[{"role":"user","content":"fix it"},{"role":"assistant","content":"done"},` +
		`{"role":"user","content":"You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary."},` +
		`{"role":"user","content":"[Time/Date]: utc=x"}]}`)
	if resp := f.resolve(t, req); resp.Continued || resp.Hops != 0 || resp.Reason != "done" {
		t.Fatalf("compaction request continued: %+v", resp)
	}
	req = resolveReq(llm.Responses, proxy, "req-l", sid, &llm.Turn{Text: "cut", Finish: llm.Finish{Reason: llm.FinishLength}})
	if resp := f.resolve(t, req); resp.Continued {
		t.Fatalf("stopMessage triggered on length: %+v", resp)
	}
	if n := len(proxy.followups()); n != 0 {
		t.Fatalf("%d followups", n)
	}
	if st, _, _ := f.svc.store.GetStopMessage(sid); st.Used != 0 {
		t.Fatalf("used changed to %d", st.Used)
	}
}

func TestResolveRepeatedPairs(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-repeat"
	f.prepare(t, hostapi.PrepareRequest{RequestID: "req-0", SessionID: sid, Directives: []hostapi.HostDirective{
		{Kind: "stopMessage", Text: "continue", MaxRepeats: 10},
	}})
	proxy := newFakeProxy(t, llm.Chat, func(n int, _ followup, _ context.Context) (int, *llm.Turn) {
		return http.StatusOK, &llm.Turn{ID: fmt.Sprint("id-", n), Text: "Nothing left to do.", Finish: llm.Finish{Reason: llm.FinishStop},
			Usage: llm.Usage{InputTokens: n}}
	})
	resp := f.resolve(t, resolveReq(llm.Chat, proxy, "req-1", sid, &llm.Turn{Text: "Nothing left to do.", Finish: llm.Finish{Reason: llm.FinishStop}}))
	if resp.Reason != "repeated" || resp.Hops != 3 || len(proxy.followups()) != 3 || !resp.Continued {
		t.Fatalf("resolve: %+v, %d followups", resp, len(proxy.followups()))
	}
}

func TestResolveMaxHops(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-hops"
	proxy := newFakeProxy(t, llm.Messages, func(n int, _ followup, _ context.Context) (int, *llm.Turn) {
		return http.StatusOK, &llm.Turn{Text: fmt.Sprintf("step %d.", n), ToolCalls: []llm.ToolCall{
			{ID: fmt.Sprintf("toolu_%d", n), Name: "clock", Arguments: getArgs},
		}, Finish: llm.Finish{Reason: llm.FinishToolCalls, Raw: "tool_use"}}
	})
	turn := &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "toolu_0", Name: "clock", Arguments: getArgs}}, Finish: llm.Finish{Reason: llm.FinishToolCalls}}
	resp := f.resolve(t, resolveReq(llm.Messages, proxy, "req-1", sid, turn))
	if resp.Reason != "max_hops" || resp.Hops != 8 || len(proxy.followups()) != 8 {
		t.Fatalf("resolve: %+v, %d followups", resp, len(proxy.followups()))
	}
	c := resp.Continuation
	if !resp.Continued || len(c.ToolCalls) != 0 || c.Finish.Reason != llm.FinishStop {
		t.Fatalf("continuation must be a terminated turn without server calls: %+v", c)
	}
	if !strings.HasPrefix(c.Text, "step 1.") || !strings.HasSuffix(c.Text, "step 8.") {
		t.Errorf("continuation text %q", c.Text)
	}
	// The last turn's call was never executed: no result without a followup.
	if n := scrape(t, f)[`chime_tool_calls_total{ok="true",tool="clock"}`]; n != 8 {
		t.Errorf("clock ran %v times, want 8", n)
	}
	// The continuation renders as a valid terminated response.
	back, err := llm.ParseResponse(llm.Messages, llm.RenderJSON(llm.Messages, llm.Merge(turn, c)))
	if err != nil || back.Finish.Reason != llm.FinishStop || len(back.ToolCalls) != 0 {
		t.Fatalf("rendered continuation: %+v %v", back, err)
	}
}

func TestResolveMaxDuration(t *testing.T) {
	t.Parallel()
	f := newFixture(t) // the docs/continuation.md default: 15 min per chain
	proxy := newFakeProxy(t, llm.Chat, func(n int, _ followup, ctx context.Context) (int, *llm.Turn) {
		f.clk.Advance(6 * time.Minute) // each followup takes 6 min
		if n == 3 {                    // 18 min: the guard ends the chain mid-followup
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second): // guards against a hang only
				t.Error("the followup past the chain's duration was not aborted")
			}
		}
		return http.StatusOK, &llm.Turn{Text: fmt.Sprint("t", n), ToolCalls: []llm.ToolCall{{ID: fmt.Sprint("c", n), Name: "clock", Arguments: getArgs}}}
	})
	resp := f.resolve(t, resolveReq(llm.Chat, proxy, "req-1", "sess-dur", &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c0", Name: "clock", Arguments: getArgs}}}))
	if resp.Reason != "max_duration" || resp.Hops != 3 || len(proxy.followups()) != 3 {
		t.Fatalf("resolve: %+v", resp)
	}
	if resp.Continued && len(resp.Continuation.ToolCalls) != 0 {
		t.Fatalf("server calls reached the continuation: %+v", resp.Continuation)
	}
}

func TestResolveMixedCalls(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-mixed"
	proxy := newFakeProxy(t, llm.Responses, func(n int, _ followup, _ context.Context) (int, *llm.Turn) {
		return http.StatusOK, &llm.Turn{Text: "both", ToolCalls: []llm.ToolCall{
			{ID: "c-srv", Name: "clock", Arguments: scheduleArgs("from followup", t0.Add(3*time.Hour))},
			{ID: "c-cli", Name: "exec", Arguments: `{"cmd":"ls"}`},
		}, Finish: llm.Finish{Reason: llm.FinishToolCalls}}
	})
	// The original turn mixes: the server call runs, nothing follows.
	mixed := &llm.Turn{ToolCalls: []llm.ToolCall{
		{ID: "a", Name: "clock", Arguments: scheduleArgs("from original", t0.Add(2*time.Hour))},
		{ID: "b", Name: "exec", Arguments: `{"cmd":"make"}`},
	}, Finish: llm.Finish{Reason: llm.FinishToolCalls}}
	resp := f.resolve(t, resolveReq(llm.Responses, proxy, "req-1", sid, mixed))
	if resp.Continued || resp.Reason != "client_tools" || resp.Hops != 0 || len(proxy.followups()) != 0 {
		t.Fatalf("mixed original: %+v", resp)
	}
	if ts, _ := f.svc.store.ListTasks(sid); len(ts) != 1 || ts[0].Task != "from original" {
		t.Fatalf("server call of the mixed turn did not run: %+v", ts)
	}
	// A followup answering with mixed calls: the client gets its call only.
	resp = f.resolve(t, resolveReq(llm.Responses, proxy, "req-2", sid, &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "g", Name: "clock", Arguments: getArgs}}}))
	c := resp.Continuation
	if !resp.Continued || resp.Reason != "client_tools" || resp.Hops != 1 {
		t.Fatalf("mixed followup: %+v", resp)
	}
	if len(c.ToolCalls) != 1 || c.ToolCalls[0].ID != "c-cli" || c.Finish.Reason != llm.FinishToolCalls || c.Text != "both" {
		t.Fatalf("continuation: %+v", c)
	}
	if ts, _ := f.svc.store.ListTasks(sid); len(ts) != 2 {
		t.Fatalf("the followup's server call did not run: %d tasks", len(ts))
	}
}

// A followup that fails ends the chain with the last good turn plus a
// visible note, never a silent truncation (docs/failures.md).
func TestResolveUpstreamError(t *testing.T) {
	t.Parallel()
	for _, bad := range []struct {
		name   string
		status int
		note   string
	}{
		{"500", http.StatusInternalServerError, "[chime: the continuation failed: 500 server_error: boom]"},
		{"not json", http.StatusOK, "[chime: the continuation failed: 200, the answer is not a chat response]"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t)
			proxy := newFakeProxy(t, llm.Chat, func(n int, _ followup, _ context.Context) (int, *llm.Turn) {
				if n == 1 {
					return http.StatusOK, &llm.Turn{Text: "first", ToolCalls: []llm.ToolCall{{ID: "c1", Name: "clock", Arguments: getArgs}},
						Usage: llm.Usage{OutputTokens: 4}}
				}
				return bad.status, nil
			})
			resp := f.resolve(t, resolveReq(llm.Chat, proxy, "req-1", "sess-err", &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c0", Name: "clock", Arguments: getArgs}}}))
			if resp.Reason != "upstream_error" || resp.Hops != 2 || !resp.Continued {
				t.Fatalf("resolve: %+v", resp)
			}
			// The last good turn, terminated, without its executed server
			// call, and the note.
			c := resp.Continuation
			if c.Text != "first\n\n"+bad.note || len(c.ToolCalls) != 0 || c.Finish.Reason != llm.FinishStop || c.Usage.OutputTokens != 4 {
				t.Fatalf("continuation: %+v", c)
			}
			code := strconv.Itoa(bad.status)
			if m := scrape(t, f); m[`chime_followup_failures_total{code="`+code+`",kind="tool"}`] != 1 {
				t.Errorf("failure not counted: %v", m)
			}
		})
	}
	// The first followup failing: the original is the last good turn, so
	// the continuation is the note alone.
	f := newFixture(t)
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) { return http.StatusBadGateway, nil })
	resp := f.resolve(t, resolveReq(llm.Chat, proxy, "req-1", "sess-err", &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c0", Name: "clock", Arguments: getArgs}}}))
	if !resp.Continued || resp.Reason != "upstream_error" || resp.Hops != 1 {
		t.Fatalf("first followup failing: %+v", resp)
	}
	if c := resp.Continuation; c.Text != "[chime: the continuation failed: 502 server_error: boom]" || c.Finish.Reason != llm.FinishStop || len(c.ToolCalls) != 0 {
		t.Fatalf("continuation: %+v", c)
	}
}

// scheduleMs schedules a task with a millisecond dueAt (schedule rounds to
// seconds).
func (f *fixture) scheduleMs(t *testing.T, session, task string, due time.Time) {
	t.Helper()
	if r := f.tool(t, session, "sched-"+task, "clock", scheduleArgs(task, due)); !r.ok() {
		t.Fatalf("schedule %q: %s", task, r.errText())
	}
}

// resolveAsync posts req like resolve, in a goroutine, so the test can
// drive the chain's waits with the fake clock meanwhile.
func (f *fixture) resolveAsync(t *testing.T, req hostapi.ResolveRequest) <-chan hostapi.ResolveResponse {
	t.Helper()
	done := make(chan hostapi.ResolveResponse, 1)
	go func() {
		rec := f.do(t, http.MethodPost, hostapi.PathResolve, testToken, req)
		var resp hostapi.ResolveResponse
		if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &resp) != nil {
			t.Errorf("resolve: %d %s", rec.Code, rec.Body)
		}
		done <- resp
	}()
	return done
}

// blockUntil waits until n waits are pending on the fixture's clock: each
// running chain has one (its docs/continuation.md duration guard), a hold one more.
func (f *fixture) blockUntil(t *testing.T, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.clk.BlockUntilContext(ctx, n); err != nil {
		t.Fatalf("waiting for %d clock waiters: %v", n, err)
	}
}

// recv returns the next value of c; the timeout only guards against a hang.
func recv[T any](t *testing.T, c <-chan T) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("timed out")
		panic("unreachable")
	}
}

// One chain holding: its duration guard and its hold timer.
const holding = 2

func TestResolveHold(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-hold"
	due := t0.Add(90 * time.Second) // injectable from t0+30s (60 s due window)
	f.scheduleMs(t, sid, "water the plants", due)
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-1", SessionID: sid}); ans.Reserved || !ans.MayContinue {
		t.Fatalf("prepare before due: %+v", ans)
	}
	var sentAt time.Time
	proxy := newFakeProxy(t, llm.Messages, func(int, followup, context.Context) (int, *llm.Turn) {
		sentAt = f.clk.Now()
		return http.StatusOK, &llm.Turn{Text: "Watered.", Finish: llm.Finish{Reason: llm.FinishStop}}
	})
	req := resolveReq(llm.Messages, proxy, "req-1", sid, &llm.Turn{Text: "All done.", Finish: llm.Finish{Reason: llm.FinishStop}})
	req.Streaming = false // holdNonStreaming defaults to true
	done := f.resolveAsync(t, req)
	f.blockUntil(t, holding)
	f.clk.Advance(30*time.Second - time.Millisecond)
	if n := len(proxy.followups()); n != 0 {
		t.Fatalf("%d followups before the task was due", n)
	}
	f.clk.Advance(time.Millisecond)
	resp := recv(t, done)

	if !resp.Continued || resp.Reason != "done" || resp.Hops != 1 || resp.Continuation.Text != "Watered." {
		t.Fatalf("resolve: %+v", resp)
	}
	got := proxy.followups()
	if len(got) != 1 {
		t.Fatalf("%d followups", len(got))
	}
	fu := got[0]
	if !sentAt.Equal(due.Add(-60 * time.Second)) {
		t.Errorf("followup sent at %v, want when the task came due", sentAt.Sub(t0))
	}
	if txt := lastUserText(llm.Messages, fu.body); txt != reminderFor("water the plants") {
		t.Errorf("followup ends with %q", txt)
	}
	if id := fu.header.Get("X-Request-Id"); id != "req-1:hold1" {
		t.Errorf("hold followup id %q", id)
	}
	ts, _ := f.svc.store.ListTasks(sid)
	if len(ts) != 1 || ts[0].DeliveryCount != 1 || ts[0].DeliveredAt == 0 || ts[0].ReservedBy != "" {
		t.Fatalf("reservation not committed: %+v", ts)
	}
	if m := scrape(t, f); m[`chime_holds_total{outcome="committed"}`] != 1 || m[`chime_followups_total{reason="hold"}`] != 1 {
		t.Errorf("hold metrics: %v", m)
	}
}

func TestResolveHoldRolledBackOnUpstreamError(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-hold-err"
	f.scheduleMs(t, sid, "call mom", t0.Add(70*time.Second))
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) { return http.StatusServiceUnavailable, nil })
	done := f.resolveAsync(t, resolveReq(llm.Chat, proxy, "req-1", sid, &llm.Turn{Text: "ok", Finish: llm.Finish{Reason: llm.FinishStop}}))
	f.blockUntil(t, holding)
	f.clk.Advance(10 * time.Second)
	resp := recv(t, done)
	if resp.Reason != "upstream_error" || len(proxy.followups()) != 1 {
		t.Fatalf("resolve: %+v", resp)
	}
	// The original answer stands; the client is told the hold's
	// continuation failed (docs/failures.md), and the stop finish is kept.
	if c := resp.Continuation; !resp.Continued || c.Text != "[chime: the continuation failed: 503 server_error: boom]" || c.Finish.Reason != llm.FinishStop {
		t.Fatalf("continuation: %+v", resp.Continuation)
	}
	ts, _ := f.svc.store.ListTasks(sid)
	if len(ts) != 1 || ts[0].DeliveredAt != 0 || ts[0].ReservedBy != "" {
		t.Fatalf("reservation not rolled back: %+v", ts)
	}
	// The next request gets the reminder.
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-2", SessionID: sid}); ans.Reminders != reminderFor("call mom") {
		t.Fatalf("next prepare: %+v", ans)
	}
}

func TestResolveNoHoldForJSONWhenDisabled(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.DisableHoldNonStreaming = true })
	const sid = "sess-nohold"
	f.scheduleMs(t, sid, "stand up", t0.Add(65*time.Second))
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) {
		return http.StatusOK, &llm.Turn{Text: "up", Finish: llm.Finish{Reason: llm.FinishStop}}
	})
	req := resolveReq(llm.Chat, proxy, "req-1", sid, &llm.Turn{Text: "ok", Finish: llm.Finish{Reason: llm.FinishStop}})
	req.Streaming = false
	if resp := f.resolve(t, req); resp.Continued || resp.Reason != "done" || len(proxy.followups()) != 0 {
		t.Fatalf("JSON client held: %+v", resp)
	}
	// A streaming client is still held.
	req.RequestID, req.Streaming = "req-2", true
	done := f.resolveAsync(t, req)
	f.blockUntil(t, holding)
	f.clk.Advance(5 * time.Second)
	if resp := recv(t, done); !resp.Continued || resp.Hops != 1 || len(proxy.followups()) != 1 {
		t.Fatalf("SSE client not held: %+v", resp)
	}
}

func TestResolveHoldBeyondHoldMax(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-far"
	// Injectable 1 ms after holdMax (60 s) from now: no hold, no wait.
	f.scheduleMs(t, sid, "later", t0.Add(DefaultHoldMax+60*time.Second+time.Millisecond))
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) { return http.StatusOK, &llm.Turn{Text: "x"} })
	if resp := f.resolve(t, resolveReq(llm.Chat, proxy, "req-1", sid, &llm.Turn{Text: "ok"})); resp.Continued || len(proxy.followups()) != 0 {
		t.Fatalf("held for a task beyond holdMax: %+v", resp)
	}
}

func TestResolveCancelDuringHold(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-cancel-hold"
	f.scheduleMs(t, sid, "feed the cat", t0.Add(61*time.Second))
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) {
		return http.StatusOK, &llm.Turn{Text: "fed"}
	})
	done := f.resolveAsync(t, resolveReq(llm.Chat, proxy, "req-1", sid, &llm.Turn{Text: "ok", Finish: llm.Finish{Reason: llm.FinishStop}}))
	f.blockUntil(t, holding)
	if rec := f.do(t, http.MethodPost, hostapi.PathCancel, testToken, hostapi.OutcomeRequest{RequestID: "req-1"}); rec.Code != http.StatusNoContent {
		t.Fatalf("cancel: %d %s", rec.Code, rec.Body)
	}
	// The clock has not moved: only the cancel can end the hold.
	resp := recv(t, done)
	if resp.Continued || resp.Reason != "cancelled" || resp.Hops != 0 {
		t.Fatalf("resolve: %+v", resp)
	}
	// The chain has returned; past the due time nothing is sent.
	f.clk.Advance(2 * time.Second)
	if n := len(proxy.followups()); n != 0 {
		t.Fatalf("%d followups after cancel", n)
	}
	ts, _ := f.svc.store.ListTasks(sid)
	if len(ts) != 1 || ts[0].DeliveredAt != 0 || ts[0].ReservedBy != "" {
		t.Fatalf("task touched by a cancelled hold: %+v", ts)
	}
	if m := scrape(t, f); m[`chime_holds_total{outcome="cancelled"}`] != 1 || m[`chime_chains_total{reason="cancelled"}`] != 1 {
		t.Errorf("metrics after cancel: holds %v chains %v", m[`chime_holds_total{outcome="cancelled"}`], m[`chime_chains_total{reason="cancelled"}`])
	}
}

func TestResolveCancelInFlightFollowup(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	arrived := make(chan struct{})
	aborted := make(chan struct{})
	proxy := newFakeProxy(t, llm.Chat, func(n int, _ followup, ctx context.Context) (int, *llm.Turn) {
		close(arrived)
		select {
		case <-ctx.Done(): // the host hung up
			close(aborted)
		case <-time.After(5 * time.Second): // guards against a hang only
		}
		return http.StatusOK, &llm.Turn{Text: "late", ToolCalls: []llm.ToolCall{{ID: "c", Name: "clock", Arguments: getArgs}}}
	})
	done := f.resolveAsync(t, resolveReq(llm.Chat, proxy, "req-1", "sess-inflight", &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c0", Name: "clock", Arguments: getArgs}}}))
	recv(t, arrived)
	f.svc.Cancel("req-1")
	recv(t, aborted)
	resp := recv(t, done)
	if resp.Reason != "cancelled" || resp.Continued || len(proxy.followups()) != 1 {
		t.Fatalf("resolve: %+v, %d followups", resp, len(proxy.followups()))
	}
}

func TestResolveClientGone(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	proxy := newFakeProxy(t, llm.Chat, func(n int, _ followup, _ context.Context) (int, *llm.Turn) {
		cancel() // the filter's callout drops while the followup runs
		return http.StatusOK, &llm.Turn{Text: "x", ToolCalls: []llm.ToolCall{{ID: fmt.Sprint("c", n), Name: "clock", Arguments: getArgs}}}
	})
	resp, err := f.svc.Resolve(ctx, resolveReq(llm.Chat, proxy, "req-1", "sess-gone", &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c0", Name: "clock", Arguments: getArgs}}}))
	if err != nil || resp.Reason != "cancelled" || len(proxy.followups()) != 1 {
		t.Fatalf("resolve: %+v %v, %d followups", resp, err, len(proxy.followups()))
	}
}

func TestResolveCancelBeforeResolve(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const sid = "sess-early"
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) {
		return http.StatusOK, &llm.Turn{Text: "x"}
	})
	if rec := f.do(t, http.MethodPost, hostapi.PathCancel, testToken, hostapi.OutcomeRequest{RequestID: "req-early"}); rec.Code != http.StatusNoContent {
		t.Fatalf("cancel of an unknown id: %d", rec.Code)
	}
	turn := &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c", Name: "clock", Arguments: scheduleArgs("never", t0.Add(time.Hour))}}}
	resp := f.resolve(t, resolveReq(llm.Chat, proxy, "req-early", sid, turn))
	if resp.Continued || resp.Reason != "cancelled" || resp.Hops != 0 {
		t.Fatalf("resolve after cancel: %+v", resp)
	}
	if n := len(proxy.followups()); n != 0 {
		t.Fatalf("%d followups", n)
	}
	if ts, _ := f.svc.store.ListTasks(sid); len(ts) != 0 {
		t.Fatalf("a cancelled resolve ran its tool: %+v", ts)
	}
	// Other ids are unaffected.
	if resp := f.resolve(t, resolveReq(llm.Chat, proxy, "req-other", sid, turn)); resp.Reason != "done" || resp.Hops != 1 {
		t.Fatalf("other request: %+v", resp)
	}
}

func TestResolveDefaultReentry(t *testing.T) {
	t.Parallel()
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) { return http.StatusOK, &llm.Turn{Text: "x"} })
	f := newFixture(t, func(c *Config) { c.Reentry = proxy.reentry() })
	req := resolveReq(llm.Chat, proxy, "req-1", "sess-re", &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c", Name: "clock", Arguments: getArgs}}})
	req.Reentry = ""
	if resp := f.resolve(t, req); resp.Hops != 1 || len(proxy.followups()) != 1 {
		t.Fatalf("followup without a reentry did not use the host's: %+v", resp)
	}
}

func TestResolveAndCancelRequireToken(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) { return http.StatusOK, &llm.Turn{Text: "x"} })
	body := resolveReq(llm.Chat, proxy, "req-1", "sess-auth", &llm.Turn{ToolCalls: []llm.ToolCall{{ID: "c", Name: "clock", Arguments: scheduleArgs("evil", t0.Add(time.Hour))}}})
	for _, path := range []string{hostapi.PathResolve, hostapi.PathCancel} {
		for _, tok := range []string{"", "wrong"} {
			if rec := f.do(t, http.MethodPost, path, tok, body); rec.Code != http.StatusUnauthorized {
				t.Errorf("%s with token %q: %d", path, tok, rec.Code)
			}
		}
	}
	if len(proxy.followups()) != 0 {
		t.Fatal("an unauthorized resolve sent a followup")
	}
	if ts, _ := f.svc.store.ListTasks("sess-auth"); len(ts) != 0 {
		t.Fatal("an unauthorized resolve ran a tool")
	}
	// The rejected cancel did not poison the id.
	if resp := f.resolve(t, body); resp.Reason != "done" {
		t.Fatalf("resolve after a rejected cancel: %+v", resp)
	}
}

func TestResolveBadRequests(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) { return http.StatusOK, &llm.Turn{Text: "x"} })
	good := resolveReq(llm.Chat, proxy, "req-1", "s", &llm.Turn{Text: "x"})
	cases := map[string]func(*hostapi.ResolveRequest){
		"no request id":  func(r *hostapi.ResolveRequest) { r.RequestID = "" },
		"bad protocol":   func(r *hostapi.ResolveRequest) { r.Protocol = "grpc" },
		"relative path":  func(r *hostapi.ResolveRequest) { r.Path = "v1/chat/completions" },
		"url as reentry": func(r *hostapi.ResolveRequest) { r.Reentry = "http://evil/x" },
		"no turn":        func(r *hostapi.ResolveRequest) { r.Turn = nil },
		"bad request":    func(r *hostapi.ResolveRequest) { r.Request = json.RawMessage(`{"messages":{}}`) },
		"broken item": func(r *hostapi.ResolveRequest) {
			r.Turn = &llm.Turn{Text: "x", Items: []llm.Item{{Kind: llm.ItemRaw, Raw: `{"type":"thinking"`}}}
		},
	}
	for name, mod := range cases {
		req := good
		mod(&req)
		if rec := f.do(t, http.MethodPost, hostapi.PathResolve, testToken, req); rec.Code != http.StatusBadRequest {
			t.Errorf("%s: %d %s", name, rec.Code, rec.Body)
		}
	}
	if rec := f.do(t, http.MethodPost, hostapi.PathResolve, testToken, "{not json"); rec.Code != http.StatusBadRequest {
		t.Errorf("malformed: %d", rec.Code)
	}
	if rec := f.do(t, http.MethodPost, hostapi.PathCancel, testToken, hostapi.OutcomeRequest{}); rec.Code != http.StatusBadRequest {
		t.Errorf("cancel without id: %d", rec.Code)
	}
	if rec := f.do(t, http.MethodGet, hostapi.PathResolve, testToken, nil); rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("GET resolve: %d", rec.Code)
	}
	if len(proxy.followups()) != 0 {
		t.Fatal("a bad request sent a followup")
	}
}

func TestPrepareMayContinue(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r0", SessionID: "sess-idle"}); ans.MayContinue {
		t.Error("idle session: mayContinue")
	}
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: "sess-sm", Directives: []hostapi.HostDirective{{Kind: "stopMessage", Text: "go", MaxRepeats: 1}}})
	if !ans.MayContinue {
		t.Error("active stopMessage: no mayContinue")
	}
	// A task hours away cannot be held for: no resolve round trip.
	f.schedule(t, "sess-far", "later", t0.Add(3*time.Hour))
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r2", SessionID: "sess-far"}); ans.MayContinue {
		t.Error("a task 3 h away: mayContinue")
	}
	// One due within holds.max of the response's end can be.
	f.schedule(t, "sess-task", "soon", t0.Add(150*time.Second))
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r2", SessionID: "sess-task"}); !ans.MayContinue {
		t.Error("pending task: no mayContinue")
	}
	// A task this very request gets injected is not pending any more.
	f.schedule(t, "sess-due", "now", t0.Add(10*time.Second))
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r3", SessionID: "sess-due"}); !ans.Reserved || ans.MayContinue {
		t.Errorf("only the request's own reminder: %+v", ans)
	}
	if ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r4"}); ans.MayContinue {
		t.Error("no session: mayContinue")
	}
}
