package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/internal/ssecheck"

	"github.com/chimehq/chime/llm"
)

// sseUpstream streams body in chunks of 7 bytes, flushing each, and holds
// the last chunk until the request's gate (keyed by x-request-id) opens.
// It records the request body it received.
type sseUpstream struct {
	body     []byte
	mu       sync.Mutex
	gates    map[string]chan struct{}
	requests map[string][]byte
}

func (u *sseUpstream) gate(id string) chan struct{} {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.gates[id] == nil {
		u.gates[id] = make(chan struct{})
	}
	return u.gates[id]
}

func (u *sseUpstream) request(id string) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.requests[id]
}

func (u *sseUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	if r.URL.Path != "/v1/messages" {
		io.WriteString(w, `{"id":"x","choices":[]}`)
		return
	}
	id := r.Header.Get("x-request-id")
	u.mu.Lock()
	u.requests[id] = b
	u.mu.Unlock()
	gate := u.gate(id)
	w.Header().Set("content-type", "text/event-stream")
	w.Header().Set("content-length", strconv.Itoa(len(u.body)))
	const chunk = 7
	for off := 0; off < len(u.body); off += chunk {
		if end := min(off+chunk, len(u.body)); end == len(u.body) {
			select {
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Write(u.body[off:min(off+chunk, len(u.body))])
		w.(http.Flusher).Flush()
	}
}

// TestModuleSplicesServerToolCall runs the SSE response path through the
// real chime.wasm in the runtime: text streams through to the client while
// the upstream is still answering, the clock call is withheld, the host's
// resolve gets the edited request, and its continuation is spliced into
// the same stream. A second stream's client goes away mid-resolve: one
// cancel, and the host's late answer touches nothing.
func TestModuleSplicesServerToolCall(t *testing.T) {
	orig := &llm.Turn{ID: "msg_up", Model: "claude-x", Text: "Let me look at the time first.",
		ToolCalls: []llm.ToolCall{{ID: "toolu_srv", Name: "clock", Arguments: `{"action":"get"}`}},
		Finish:    llm.Finish{Reason: llm.FinishToolCalls}, Usage: llm.Usage{InputTokens: 40, OutputTokens: 12}}
	cont := &llm.Turn{Text: "It is 21:22 UTC.", Finish: llm.Finish{Reason: llm.FinishStop},
		Usage: llm.Usage{InputTokens: 60, OutputTokens: 6}}
	up := &sseUpstream{body: llm.RenderSSE(llm.Messages, orig, llm.RenderOptions{ChunkBytes: 6, Created: 1}),
		gates: map[string]chan struct{}{}, requests: map[string][]byte{}}
	// early is what may reach the client before the upstream ends: every
	// event before the text block closes (the continuation goes into it)
	// or the clock call starts.
	var early []byte
	evs, err := llm.NewStreamReader(llm.Messages).Feed(up.body)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.StartsToolCall([]string{"clock"}) || ev.MustHold() {
			break
		}
		early = append(early, ev.Raw...)
	}
	if !bytes.Contains(early, []byte("text_delta")) {
		t.Fatalf("no text before the call in %s", up.body)
	}

	s := mustStart(t, stackOptions{pluginConfig: `{"token":"t0k"}`, upstream: up.ServeHTTP})
	s.host.handle(hostapi.PathPrepare, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		io.WriteString(w, `{"ntp":{"status":"ok","offsetMs":0},"tools":["clock"]}`)
	})
	// Resolves are keyed by the filter's own request id (docs/failures.md), which
	// the test learns when the call arrives; each waits for its answer.
	resolveArrived := make(chan string, 2)
	var answersMu sync.Mutex
	answers := map[string]chan string{}
	answer := func(rid string) chan string {
		answersMu.Lock()
		defer answersMu.Unlock()
		if answers[rid] == nil {
			answers[rid] = make(chan string, 1)
		}
		return answers[rid]
	}
	s.host.handle(hostapi.PathResolve, func(w http.ResponseWriter, _ *http.Request, body []byte) {
		var req hostapi.ResolveRequest
		json.Unmarshal(body, &req)
		ch := answer(req.RequestID)
		resolveArrived <- req.RequestID
		io.WriteString(w, <-ch)
	})
	cancels := make(chan []byte, 2)
	s.host.handle(hostapi.PathCancel, func(w http.ResponseWriter, _ *http.Request, body []byte) {
		cancels <- body
		w.WriteHeader(http.StatusNoContent)
	})

	// stream sends one streaming request and returns the response once the
	// client has the text before the call and the host has the resolve.
	stream := func(ctx context.Context, id string) (*http.Response, hostapi.ResolveRequest, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.url+"/v1/messages",
			strings.NewReader(`{"model":"m","max_tokens":99,"stream":true,"messages":[{"role":"user","content":"time?"}]}`))
		req.Header.Set("content-type", "application/json")
		req.Header.Set("x-api-key", "sk-ant")
		req.Header.Set("x-request-id", id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || resp.ContentLength != -1 {
			t.Fatalf("stream %s: status %d, content-length %d (the filter must drop the upstream's)", id, resp.StatusCode, resp.ContentLength)
		}
		// The upstream is still holding its last bytes: the text so far
		// must already have reached the client.
		got := make([]byte, len(early))
		if _, err := io.ReadFull(resp.Body, got); err != nil || !bytes.Equal(got, early) {
			t.Fatalf("stream %s: mid-stream the client has %q (%v), want the text so far %q", id, got, err, early)
		}
		close(up.gate(id))
		var rid string
		select {
		case rid = <-resolveArrived:
			if rid == id || len(rid) != 32 {
				t.Fatalf("resolve for %q: not the filter's own id for client id %s", rid, id)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("stream %s: no resolve call\nlog:\n%s", id, s.logs.dump())
		}
		if sent := up.request(id); !bytes.Contains(sent, []byte(`"name":"clock"`)) {
			t.Fatalf("stream %s: request not prepared: %s", id, sent)
		}
		calls := s.host.callsTo(hostapi.PathResolve)
		var rr hostapi.ResolveRequest
		if err := json.Unmarshal(calls[len(calls)-1].body, &rr); err != nil {
			t.Fatal(err)
		}
		if rr.Reentry != s.srv.Addr("chime") || rr.Headers["x-api-key"] != "sk-ant" || !bytes.Equal(rr.Request, up.request(id)) ||
			rr.Turn == nil || rr.Turn.Text != orig.Text || len(rr.Turn.ToolCalls) != 1 || !rr.Streaming {
			t.Fatalf("stream %s: resolve call %s", id, calls[len(calls)-1].body)
		}
		return resp, rr, rid
	}

	// Stream r2: the host continues; the client gets one spliced turn.
	resp, _, rid2 := stream(context.Background(), "r2")
	answer(rid2) <- string(mustJSON(t, hostapi.ResolveResponse{Continued: true, Continuation: cont, Hops: 1}))
	rest, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	out := append(bytes.Clone(early), rest...)
	if bytes.Contains(out, []byte("clock")) || bytes.Contains(out, []byte("toolu_srv")) {
		t.Fatalf("client stream:\n%s", out)
	}
	if _, err := ssecheck.Check("messages", out); err != nil {
		t.Fatalf("client stream: %v\n%s", err, out)
	}
	rd := llm.NewStreamReader(llm.Messages)
	evs, err = rd.Feed(out)
	last, cerr := rd.Close()
	if err != nil || cerr != nil {
		t.Fatalf("client stream unreadable: %v %v", err, cerr)
	}
	var b llm.TurnBuilder
	starts, terminals := 0, 0
	for _, ev := range append(evs, last...) {
		b.Add(ev)
		if ev.Kind.Has(llm.KindStart) {
			starts++
		}
		if ev.Kind.Has(llm.KindTerminal) {
			terminals++
		}
	}
	got, want := b.Turn(), llm.Merge(&llm.Turn{ID: orig.ID, Model: orig.Model, Text: orig.Text, Usage: orig.Usage}, cont)
	if starts != 1 || terminals != 1 || got.Text != want.Text || got.Usage != want.Usage || len(got.ToolCalls) != 0 ||
		got.Finish.Reason != llm.FinishStop {
		t.Fatalf("client turn %+v (%d starts, %d terminals), want %+v", got, starts, terminals, want)
	}

	// Stream r3: the client goes away while the host holds.
	ctx, cancel := context.WithCancel(context.Background())
	resp, _, rid3 := stream(ctx, "r3")
	cancel()
	resp.Body.Close()
	select {
	case body := <-cancels:
		if string(body) != `{"requestId":"`+rid3+`"}` {
			t.Fatalf("cancel %s, want one for r3", body)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no cancel after the client left\nlog:\n%s", s.logs.dump())
	}
	answer(rid3) <- `{"continued":false}` // late: must touch nothing
	// A later request on the same VM: the late answer was delivered
	// before this one's own calls finished.
	if r, _ := s.post(http.DefaultClient, "/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"hi"}]}`)); r.StatusCode != 200 {
		t.Fatalf("next request: %d", r.StatusCode)
	}
	if n := len(s.host.callsTo(hostapi.PathCancel)); n != 1 {
		t.Errorf("%d cancels, want 1", n)
	}
	for _, r := range s.logs.guest(slog.LevelDebug - 4) {
		if strings.Contains(r.Msg, "request "+rid3+": resolved") {
			t.Errorf("the late answer reached a finished stream: %s", r.Msg)
		}
	}
	s.checkHealthy()
	if warns := s.logs.guest(slog.LevelWarn); len(warns) != 0 {
		t.Errorf("warning or error logs: %+v", warns)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkSSEResponse measures the SSE response path of chime.wasm in
// the runtime: a 32 KiB Chat stream of small text deltas (the common case,
// no server-tool call), each event parsed, forwarded and tracked for a
// possible splice.
func BenchmarkSSEResponse(b *testing.B) {
	turn := &llm.Turn{ID: "c", Model: "m", Text: strings.Repeat("lorem ipsum ", 2700), Finish: llm.Finish{Reason: llm.FinishStop}}
	upstream := llm.RenderSSE(llm.Chat, turn, llm.RenderOptions{ChunkBytes: 16, Created: 1})
	s := mustStart(b, stackOptions{upstream: func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("content-type", "text/event-stream")
		for off := 0; off < len(upstream); off += 1024 {
			w.Write(upstream[off:min(off+1024, len(upstream))])
			w.(http.Flusher).Flush()
		}
	}})
	c := &http.Client{}
	b.SetBytes(int64(len(upstream)))
	for b.Loop() {
		resp, body := s.post(c, "/v1/chat/completions", []byte(`{"stream":true,"messages":[{"role":"user","content":"go"}]}`), "x-request-id", "r")
		if resp.StatusCode != 200 || !bytes.Equal(body, upstream) {
			b.Fatalf("status %d; stream changed", resp.StatusCode)
		}
		s.host.reset()
	}
}
