package filter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/internal/ssecheck"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/proxytest"
	"github.com/tidwall/gjson"
)

var protocols = []llm.Protocol{llm.Chat, llm.Responses, llm.Messages}

const listener = "127.0.0.1:10000"

// Turns the upstream answers with. No id, text or argument mentions the
// server tool, so "clock" appearing anywhere in client bytes is a leak.
var (
	serverTurn = &llm.Turn{ID: "up-1", Model: "model-a", Text: "Let me check the time.",
		ToolCalls: []llm.ToolCall{{ID: "call_srv", Name: "clock", Arguments: `{"action":"get"}`}},
		Finish:    llm.Finish{Reason: llm.FinishToolCalls}, Usage: llm.Usage{InputTokens: 100, OutputTokens: 20}}
	stopTurn = &llm.Turn{ID: "up-2", Model: "model-a", Text: "Step one is done.",
		Finish: llm.Finish{Reason: llm.FinishStop}, Usage: llm.Usage{InputTokens: 50, OutputTokens: 7}}
	contTurn = &llm.Turn{ID: "cont-1", Model: "model-b", Text: "It is 21:22 UTC, so on to step two.",
		Finish: llm.Finish{Reason: llm.FinishStop}, Usage: llm.Usage{InputTokens: 130, OutputTokens: 10}}
	readFile = llm.ToolCall{ID: "call_read", Name: "read_file", Arguments: `{"path":"a.go"}`}
)

// rig is one LLM exchange through the filter: a request the host prepared,
// then an upstream response fed in chunks.
type rig struct {
	*env
	p    llm.Protocol
	sse  bool
	id   uint32
	sent string // the request body as forwarded upstream
}

func newRespEnv(t *testing.T, config string) *env {
	t.Helper()
	h := proxytest.NewHost(proxytest.Options{
		VMContext:           vmContext{now: func() time.Time { return wall }},
		PluginConfiguration: []byte(config),
		Clusters:            []string{"chime_host"},
		Properties:          map[string][]byte{"destination.address": []byte(listener)},
	})
	if !h.StartPlugin() {
		t.Fatalf("plugin rejected %q", config)
	}
	return &env{t, h}
}

func requestBody(p llm.Protocol, stream bool) string {
	switch p {
	case llm.Chat:
		return fmt.Sprintf(`{"model":"m","stream":%v,"messages":[{"role":"user","content":"what time is it? <**route:x**>"}]}`, stream)
	case llm.Responses:
		return fmt.Sprintf(`{"model":"m","stream":%v,"input":"what time is it? <**route:x**>"}`, stream)
	}
	return fmt.Sprintf(`{"model":"m","max_tokens":64,"stream":%v,"messages":[{"role":"user","content":"what time is it? <**route:x**>"}]}`, stream)
}

// exchange sends a request, answers prepare with prep and starts a 200
// response of the right content type.
func (e *env) exchange(p llm.Protocol, sse bool, prep hostapi.PrepareResponse) *rig {
	e.t.Helper()
	id := e.send(p, requestBody(p, sse), [2]string{"authorization", "Bearer sk-client"},
		[2]string{"x-session-id", "s-1"}, [2]string{"accept-encoding", "gzip, br"}, [2]string{"x-envoy-internal", "true"})
	if _, ok := header(e.h.GetRequestHeaders(id), "accept-encoding"); ok {
		e.t.Fatal("accept-encoding forwarded: the response could come compressed")
	}
	prep.NTP = ntp(0)
	e.answer(prep)
	r := &rig{env: e, p: p, sse: sse, id: id, sent: e.forwarded(id)}
	ct := "application/json"
	if sse {
		ct = "text/event-stream; charset=utf-8"
	}
	if got := e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", ct}, {"content-length", "77"}}, false); got != proxywasm.ActionContinue {
		e.t.Fatalf("response headers action %v", got)
	}
	if _, ok := header(e.h.GetResponseHeaders(id), "content-length"); ok {
		e.t.Fatal("response content-length kept")
	}
	return r
}

// upstream renders t as the provider would send it.
func (r *rig) upstream(t *llm.Turn) []byte {
	if r.sse {
		return llm.RenderSSE(r.p, t, llm.RenderOptions{ChunkBytes: 5, ChatUsage: true, Created: 1})
	}
	return llm.RenderJSON(r.p, t)
}

// feed delivers body in chunks of the sizes next returns (nil: one chunk)
// and returns the action of the last one.
func (r *rig) feed(body []byte, next func() int) proxywasm.Action {
	r.t.Helper()
	var action proxywasm.Action
	for off := 0; ; {
		n := len(body) - off
		if next != nil {
			n = min(max(1, next()), n)
		}
		eos := off+n == len(body)
		action = r.h.CallOnResponseBody(r.id, body[off:off+n], eos)
		if !eos && action != proxywasm.ActionContinue && r.sse {
			r.t.Fatalf("SSE chunk at %d paused: the stream must flow", off)
		}
		off += n
		if eos {
			return action
		}
	}
}

func (r *rig) resolveCalls() []proxytest.HttpCall { return r.calls(hostapi.PathResolve) }

// resolveCall returns the one resolve call and its body.
func (r *rig) resolveCall() (proxytest.HttpCall, hostapi.ResolveRequest) {
	r.t.Helper()
	cs := r.resolveCalls()
	if len(cs) != 1 {
		r.t.Fatalf("%d resolve calls, want 1", len(cs))
	}
	var req hostapi.ResolveRequest
	if err := json.Unmarshal(cs[0].Body, &req); err != nil {
		r.t.Fatalf("resolve body %s: %v", cs[0].Body, err)
	}
	return cs[0], req
}

// lastResolve is the newest resolve call (a rig's env may carry several).
func (r *rig) lastResolve() proxytest.HttpCall {
	r.t.Helper()
	cs := r.resolveCalls()
	if len(cs) == 0 {
		r.t.Fatal("no resolve call")
	}
	return cs[len(cs)-1]
}

func (r *rig) answerResolve(ans hostapi.ResolveResponse) {
	r.t.Helper()
	r.h.CallOnHttpCallResponse(r.lastResolve().ID, [][2]string{{":status", "200"}}, must(json.Marshal(ans)), nil)
}

func (r *rig) out() []byte { return r.h.GetSentResponseBody(r.id) }

// readTurn decodes what a client received: a JSON body, or an SSE stream
// accumulated the way SDKs do, after checking its framing: one start, one
// finish, one terminal at the very end, valid JSON in every event.
func readTurn(t testing.TB, p llm.Protocol, sse bool, out []byte) *llm.Turn {
	t.Helper()
	if !sse {
		turn, err := llm.ParseResponse(p, out)
		if err != nil {
			t.Fatalf("client JSON: %v\n%s", err, out)
		}
		if n := jsonTextBlocks(p, out); n > 1 {
			t.Fatalf("client JSON has %d text blocks or message items, want one:\n%s", n, out)
		}
		return turn
	}
	// One answer, as agent CLIs read it (docs/architecture.md): one text block or message
	// item, done events with the whole text.
	if _, err := ssecheck.Check(p.String(), out); err != nil {
		t.Fatalf("client stream: %v\n%s", err, out)
	}
	rd := llm.NewStreamReader(p)
	evs, err := rd.Feed(out)
	if err != nil {
		t.Fatal(err)
	}
	rest, err := rd.Close()
	if err != nil {
		t.Fatalf("client stream: %v\n%s", err, out)
	}
	evs = append(evs, rest...)
	var b llm.TurnBuilder
	count := map[llm.EventKind]int{}
	for i, ev := range evs {
		for _, k := range []llm.EventKind{llm.KindStart, llm.KindFinish, llm.KindTerminal, llm.KindError} {
			if ev.Kind.Has(k) {
				count[k]++
			}
		}
		if len(ev.Data) > 0 && ev.Type != "[DONE]" && !json.Valid(ev.Data) {
			t.Fatalf("event %d is not JSON: %q", i, ev.Raw)
		}
		if p != llm.Chat && ev.Name != ev.Type {
			t.Fatalf("event %d: name %q, type %q", i, ev.Name, ev.Type)
		}
		b.Add(ev)
	}
	if count[llm.KindStart] != 1 || count[llm.KindFinish] != 1 || count[llm.KindTerminal] != 1 || count[llm.KindError] != 0 {
		t.Fatalf("client stream has %v start/finish/terminal/error events, want 1/1/1/0:\n%s", count, out)
	}
	if len(evs) == 0 || !evs[len(evs)-1].Kind.Has(llm.KindTerminal) {
		t.Fatalf("client stream does not end with its terminal event:\n%s", out)
	}
	return b.Turn()
}

// jsonTextBlocks counts the text blocks (Messages) or message items
// (Responses) of a JSON body; Chat has one content string.
func jsonTextBlocks(p llm.Protocol, body []byte) int {
	var items []gjson.Result
	typ := "text"
	switch p {
	case llm.Messages:
		items = gjson.GetBytes(body, "content").Array()
	case llm.Responses:
		items, typ = gjson.GetBytes(body, "output").Array(), "message"
	default:
		return 1
	}
	n := 0
	for _, it := range items {
		if it.Get("type").String() == typ {
			n++
			if p == llm.Responses && len(it.Get("content").Array()) != 1 {
				n++ // a second part is a second answer too
			}
		}
	}
	return n
}

// upstreamTurn is the turn as the filter can know it from the wire.
func (r *rig) upstreamTurn(body []byte) *llm.Turn {
	r.t.Helper()
	if !r.sse {
		turn, err := llm.ParseResponse(r.p, body)
		if err != nil {
			r.t.Fatal(err)
		}
		return turn
	}
	return readTurn(r.t, r.p, true, body)
}

func sameTurn(t *testing.T, what string, got, want *llm.Turn) {
	t.Helper()
	norm := func(tc *llm.Turn) string {
		c := *tc
		c.Finish.Raw = ""
		if len(c.ToolCalls) == 0 {
			c.ToolCalls = nil
		}
		return string(must(json.Marshal(c)))
	}
	if g, w := norm(got), norm(want); g != w {
		t.Fatalf("%s:\n got  %s\n want %s", what, g, w)
	}
}

func minusServer(t *llm.Turn) *llm.Turn { return withoutServerCalls(t, []string{"clock"}) }

func noServerCall(t *testing.T, out []byte) {
	t.Helper()
	if bytes.Contains(out, []byte("clock")) || bytes.Contains(out, []byte("call_srv")) {
		t.Fatalf("the client saw a server-tool call:\n%s", out)
	}
}

func modes() []bool { return []bool{false, true} }

func modeName(p llm.Protocol, sse bool) string {
	if sse {
		return p.String() + "/sse"
	}
	return p.String() + "/json"
}

// TestServerToolCallResolvedAndSpliced: per protocol and mode, a turn with
// a clock call is withheld, the host gets everything it needs to run it and
// follow up, and the client gets one turn with the text of both turns and
// never the call.
func TestServerToolCallResolvedAndSpliced(t *testing.T) {
	for _, p := range protocols {
		for _, sse := range modes() {
			t.Run(modeName(p, sse), func(t *testing.T) {
				e := newRespEnv(t, `{"token":"tok","resolveTimeoutMs":1800000}`)
				r := e.exchange(p, sse, hostapi.PrepareResponse{Tools: []string{"clock"}})
				body := r.upstream(serverTurn)
				orig := r.upstreamTurn(body)
				if got := r.feed(body, nil); got != proxywasm.ActionPause {
					t.Fatalf("end of stream action %v, want Pause while resolving", got)
				}
				if e.h.ResumedResponse(r.id) != 0 || bytes.Contains(r.out(), []byte("[DONE]")) || bytes.Contains(r.out(), []byte("message_stop")) {
					t.Fatal("the response ended before the host answered")
				}

				c, req := r.resolveCall()
				if c.TimeoutMs != 1800000 || c.Upstream != "chime_host" {
					t.Fatalf("resolve call to %s, timeout %d", c.Upstream, c.TimeoutMs)
				}
				for k, want := range map[string]string{":method": "POST", "authorization": "Bearer tok", "content-type": "application/json"} {
					if got, _ := header(c.Headers, k); got != want {
						t.Fatalf("resolve header %s = %q", k, got)
					}
				}
				if raw := gjson.GetBytes(c.Body, "request").Raw; raw != r.sent {
					t.Fatalf("resolve request bytes differ from what went upstream:\n%s\n%s", raw, r.sent)
				}
				if strings.Contains(r.sent, "<**") || !strings.Contains(r.sent, `"clock"`) {
					t.Fatalf("captured body is not the edited one: %s", r.sent)
				}
				if _, prep := e.lastPrepare(); req.RequestID != prep.RequestID || req.SessionID != "s-1" || req.Protocol != p.String() || req.Path != paths[p] ||
					req.Reentry != listener || req.Streaming != sse || req.Timezone != "UTC" || !slices.Equal(req.ServerTools, []string{"clock"}) {
					t.Fatalf("resolve request %+v", req)
				}
				wantHeaders := map[string]string{"authorization": "Bearer sk-client", "x-session-id": "s-1", "host": "api", "content-type": "application/json"}
				if fmt.Sprint(req.Headers) != fmt.Sprint(wantHeaders) {
					t.Fatalf("followup headers %v, want %v", req.Headers, wantHeaders)
				}
				sameTurn(t, "resolve turn", req.Turn, orig)

				r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: contTurn, Reason: "done", Hops: 1})
				if e.h.ResumedResponse(r.id) != 1 {
					t.Fatalf("response resumed %d times", e.h.ResumedResponse(r.id))
				}
				out := r.out()
				noServerCall(t, out)
				got := readTurn(t, p, sse, out)
				sameTurn(t, "client turn", got, llm.Merge(minusServer(orig), contTurn))
				if !strings.Contains(got.Text, serverTurn.Text) || !strings.Contains(got.Text, contTurn.Text) {
					t.Fatalf("client text %q lacks a turn", got.Text)
				}
				for name, want := range map[string]uint64{MetricResolves: 1, MetricServerToolCalls: 1, MetricResolveFailures: 0} {
					if got := e.counter(name); got != want {
						t.Errorf("%s = %d, want %d", name, got, want)
					}
				}
				e.h.CompleteHttpContext(r.id)
				if n := len(e.calls(hostapi.PathCancel)); n != 0 {
					t.Fatalf("%d cancels after a finished resolve", n)
				}
			})
		}
	}
}

// TestStopFinish: a stop finish is resolved only when prepare said the
// host may continue; otherwise, or when the host adds nothing, the client
// gets the upstream bytes untouched.
func TestStopFinish(t *testing.T) {
	for _, p := range protocols {
		for _, sse := range modes() {
			t.Run(modeName(p, sse), func(t *testing.T) {
				e := newRespEnv(t, "")

				// No MayContinue: no resolve, and nothing waits.
				r := e.exchange(p, sse, hostapi.PrepareResponse{Tools: []string{"clock"}})
				body := r.upstream(stopTurn)
				if got := r.feed(body, nil); got != proxywasm.ActionContinue {
					t.Fatalf("action %v", got)
				}
				if n := len(r.resolveCalls()); n != 0 {
					t.Fatalf("%d resolve calls without MayContinue", n)
				}
				if !bytes.Equal(r.out(), body) {
					t.Fatalf("bytes changed:\n%s\nwant\n%s", r.out(), body)
				}

				// MayContinue: resolved and merged.
				r = e.exchange(p, sse, hostapi.PrepareResponse{MayContinue: true})
				body = r.upstream(stopTurn)
				orig := r.upstreamTurn(body)
				if got := r.feed(body, nil); got != proxywasm.ActionPause {
					t.Fatalf("action %v, want Pause", got)
				}
				_, req := r.resolveCall()
				sameTurn(t, "resolve turn", req.Turn, orig)
				r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: contTurn, Reason: "done", Hops: 1})
				sameTurn(t, "client turn", readTurn(t, p, sse, r.out()), llm.Merge(orig, contTurn))

				// MayContinue, but the host adds nothing: untouched.
				r = e.exchange(p, sse, hostapi.PrepareResponse{MayContinue: true})
				if got := r.feed(body, nil); got != proxywasm.ActionPause {
					t.Fatalf("action %v, want Pause", got)
				}
				r.answerResolve(hostapi.ResolveResponse{Continued: false, Reason: "done"})
				if !bytes.Equal(r.out(), body) {
					t.Fatalf("not continued, bytes changed:\n%s\nwant\n%s", r.out(), body)
				}
				if got := e.counter(MetricResolves); got != 2 {
					t.Fatalf("resolves = %d", got)
				}
			})
		}
	}
}

// TestJSONAndSSEGiveOneAnswer: a stopMessage or hold continuation and a
// server-tool interception, with or without client calls after, give a
// JSON client and an SSE client the same turn: one text block or message
// item with the text of both turns joined as llm.Merge joins them.
func TestJSONAndSSEGiveOneAnswer(t *testing.T) {
	shell := llm.ToolCall{ID: "call_sh", Name: "shell", Arguments: `{"cmd":"make"}`}
	withCall := *contTurn
	withCall.ToolCalls = []llm.ToolCall{shell}
	withCall.Finish = llm.Finish{Reason: llm.FinishToolCalls}
	cases := []struct {
		name       string
		orig, cont *llm.Turn
		prep       hostapi.PrepareResponse
	}{
		{"stopMessage", stopTurn, contTurn, hostapi.PrepareResponse{MayContinue: true}},
		{"clock", serverTurn, contTurn, hostapi.PrepareResponse{Tools: []string{"clock"}}},
		{"clock then client call", serverTurn, &withCall, hostapi.PrepareResponse{Tools: []string{"clock"}}},
	}
	for _, p := range protocols {
		for _, c := range cases {
			t.Run(p.String()+"/"+c.name, func(t *testing.T) {
				e := newRespEnv(t, "")
				var turns []*llm.Turn
				for _, sse := range modes() {
					r := e.exchange(p, sse, c.prep)
					r.feed(r.upstream(c.orig), nil)
					r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: c.cont, Reason: "done", Hops: 1})
					noServerCall(t, r.out())
					turns = append(turns, readTurn(t, p, sse, r.out()))
				}
				want := llm.Merge(minusServer(c.orig), c.cont)
				if want.Text != c.orig.Text+"\n\n"+c.cont.Text {
					t.Fatalf("merge text %q", want.Text)
				}
				sameTurn(t, "json", turns[0], want)
				sameTurn(t, "sse", turns[1], want)
			})
		}
	}
}

// TestHeldCloseReplayedUntouched: the text's close is held until the end of
// the stream; when nothing continues, the client gets every upstream byte
// unchanged, client calls after the text included.
func TestHeldCloseReplayedUntouched(t *testing.T) {
	turn := *stopTurn
	turn.ToolCalls = []llm.ToolCall{readFile}
	turn.Finish = llm.Finish{Reason: llm.FinishToolCalls}
	for _, p := range protocols {
		e := newRespEnv(t, "")
		r := e.exchange(p, true, hostapi.PrepareResponse{Tools: []string{"clock"}, MayContinue: true})
		body := r.upstream(&turn)
		if got := r.feed(body, func() int { return 7 }); got != proxywasm.ActionContinue {
			t.Fatalf("%s: action %v", p, got)
		}
		if !bytes.Equal(r.out(), body) {
			t.Fatalf("%s: bytes changed:\n%s\nwant\n%s", p, r.out(), body)
		}
		if n := len(r.resolveCalls()); n != 0 {
			t.Fatalf("%s: %d resolves for a client call", p, n)
		}
	}
}

// TestEarlyTextStreamsThrough: text deltas before the server-tool call
// reach the client as their chunk passes, not at the end of the stream;
// nothing after the call's first event does.
func TestEarlyTextStreamsThrough(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			e := newRespEnv(t, "")
			r := e.exchange(p, true, hostapi.PrepareResponse{Tools: []string{"clock"}})
			body := r.upstream(serverTurn)
			rd := llm.NewStreamReader(p)
			evs, err := rd.Feed(body)
			if err != nil || len(evs) < 4 {
				t.Fatalf("upstream events %d, %v", len(evs), err)
			}
			var wantEarly []byte
			var text strings.Builder
			seenCall, held := false, false
			for i, ev := range evs {
				last := i == len(evs)-1
				if got := e.h.CallOnResponseBody(r.id, ev.Raw, last); !last && got != proxywasm.ActionContinue {
					t.Fatalf("event %d: action %v", i, got)
				}
				if ev.StartsToolCall([]string{"clock"}) {
					seenCall = true
				}
				// From the text's close on, everything waits (docs/architecture.md#sse-responses).
				held = held || ev.MustHold()
				if !seenCall && !held {
					wantEarly = append(wantEarly, ev.Raw...)
					text.WriteString(ev.Text)
				}
				if !last && !bytes.Equal(r.out(), wantEarly) {
					t.Fatalf("after event %d (%v) the client has\n%q\nwant\n%q", i, ev, r.out(), wantEarly)
				}
			}
			if text.String() != serverTurn.Text || !seenCall {
				t.Fatalf("early text %q", text.String())
			}
			r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: contTurn})
			if out := r.out(); !bytes.HasPrefix(out, wantEarly) {
				t.Fatal("the continuation does not extend what was forwarded")
			}
		})
	}
}

// TestResolveFailureFailsOpen: when the host fails, the client gets the
// original turn minus the server-tool call, and the failure is counted.
func TestResolveFailureFailsOpen(t *testing.T) {
	failures := []struct {
		name    string
		headers [][2]string
		body    string
	}{
		{"timeout", nil, ""},
		{"5xx", [][2]string{{":status", "503"}}, "down"},
		{"garbage", [][2]string{{":status", "200"}}, "{"},
	}
	for _, p := range protocols {
		for _, sse := range modes() {
			t.Run(modeName(p, sse), func(t *testing.T) {
				e := newRespEnv(t, "")
				for i, f := range failures {
					r := e.exchange(p, sse, hostapi.PrepareResponse{Tools: []string{"clock"}})
					body := r.upstream(serverTurn)
					orig := r.upstreamTurn(body)
					r.feed(body, nil)
					e.h.CallOnHttpCallResponse(r.lastResolve().ID, f.headers, []byte(f.body), nil)
					if e.h.ResumedResponse(r.id) != 1 {
						t.Fatalf("%s: response not resumed", f.name)
					}
					out := r.out()
					noServerCall(t, out)
					got := readTurn(t, p, sse, out)
					want := &llm.Turn{ID: orig.ID, Model: orig.Model, Text: orig.Text, Finish: llm.Finish{Reason: llm.FinishStop}, Usage: orig.Usage}
					sameTurn(t, f.name, got, want)
					if got := e.counter(MetricResolveFailures); got != uint64(i+1) {
						t.Fatalf("%s: resolve failures = %d", f.name, got)
					}
					e.h.CompleteHttpContext(r.id)
				}
			})
		}
	}
}

// TestResolveDispatchFailure: a resolve that cannot even be sent fails
// open at once, without pausing.
func TestResolveDispatchFailure(t *testing.T) {
	for _, sse := range modes() {
		h := proxytest.NewHost(proxytest.Options{VMContext: vmContext{now: func() time.Time { return wall }}, Clusters: []string{"elsewhere"}})
		if !h.StartPlugin() {
			t.Fatal("start")
		}
		e := &env{t, h}
		id := e.h.InitializeHttpContext()
		e.h.CallOnRequestHeaders(id, reqHeaders(llm.Messages), false)
		e.h.CallOnRequestBody(id, []byte(requestBody(llm.Messages, sse)), true) // prepare fails: fail open
		r := &rig{env: e, p: llm.Messages, sse: sse, id: id}
		ct := "application/json"
		if sse {
			ct = "text/event-stream"
		}
		e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", ct}}, false)
		body := r.upstream(serverTurn)
		if got := r.feed(body, nil); got != proxywasm.ActionContinue {
			t.Fatalf("sse %v: action %v, want Continue", sse, got)
		}
		noServerCall(t, r.out())
		if got := readTurn(t, llm.Messages, sse, r.out()); got.Text != serverTurn.Text || len(got.ToolCalls) != 0 {
			t.Fatalf("client turn %+v", got)
		}
		if v, _ := h.GetCounterValue(MetricResolveFailures); v != 1 {
			t.Fatalf("resolve failures %d", v)
		}
	}
}

// TestDisconnectWhileResolvingCancelsOnce: the client goes away during a
// hold; the host is told to cancel exactly once, and its late answer
// touches nothing.
func TestDisconnectWhileResolvingCancelsOnce(t *testing.T) {
	for _, sse := range modes() {
		e := newRespEnv(t, `{"token":"tok"}`)
		r := e.exchange(llm.Chat, sse, hostapi.PrepareResponse{MayContinue: true})
		r.feed(r.upstream(stopTurn), nil)
		c, _ := r.resolveCall()
		e.h.CompleteHttpContext(r.id)
		cancels := e.calls(hostapi.PathCancel)
		if len(cancels) != 1 {
			t.Fatalf("sse %v: %d cancels, want 1", sse, len(cancels))
		}
		if _, prep := e.lastPrepare(); string(cancels[0].Body) != `{"requestId":"`+prep.RequestID+`"}` {
			got := string(cancels[0].Body)
			t.Fatalf("cancel body %s", got)
		}
		if auth, _ := header(cancels[0].Headers, "authorization"); auth != "Bearer tok" {
			t.Fatal("cancel without the token")
		}
		e.h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}},
			must(json.Marshal(hostapi.ResolveResponse{Continued: true, Continuation: contTurn})), nil)
		e.h.CallOnHttpCallResponse(cancels[0].ID, [][2]string{{":status", "204"}}, nil, nil)
		if n := len(e.calls(hostapi.PathCancel)); n != 1 {
			t.Fatalf("%d cancels after the late answer", n)
		}
		for _, l := range e.h.GetLogs(proxywasm.LogLevelWarn) {
			t.Errorf("late answer logged: %s", l)
		}
		if got := e.counter(MetricResolveFailures); got != 0 {
			t.Fatalf("a cancelled resolve counted as failed: %d", got)
		}
	}
}

// TestMixedCallsKeepClientCalls: a turn with a client call and a server
// call, in either order. The client gets the client call exactly once,
// whether the host continues (repeating it in the continuation, docs/architecture.md)
// or not; never the server call.
func TestMixedCallsKeepClientCalls(t *testing.T) {
	server := serverTurn.ToolCalls[0]
	orders := map[string][]llm.ToolCall{"client first": {readFile, server}, "server first": {server, readFile}}
	for _, p := range protocols {
		for _, sse := range modes() {
			for order, calls := range orders {
				t.Run(modeName(p, sse)+"/"+order, func(t *testing.T) {
					mixed := *serverTurn
					mixed.ToolCalls = calls
					e := newRespEnv(t, "")

					// Continued: the host ran the clock and hands back the client call.
					r := e.exchange(p, sse, hostapi.PrepareResponse{Tools: []string{"clock"}})
					body := r.upstream(&mixed)
					orig := r.upstreamTurn(body)
					r.feed(body, nil)
					cont := &llm.Turn{Text: "Reading the file now.", ToolCalls: []llm.ToolCall{orig.ClientCalls([]string{"clock"})[0]},
						Finish: llm.Finish{Reason: llm.FinishToolCalls}, Usage: llm.Usage{InputTokens: 3, OutputTokens: 4}}
					r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: cont, Reason: "client_tools"})
					noServerCall(t, r.out())
					got := readTurn(t, p, sse, r.out())
					sameTurn(t, "continued", got, llm.Merge(minusServer(orig), cont))

					// Not continued: the withheld client call is re-emitted.
					r = e.exchange(p, sse, hostapi.PrepareResponse{Tools: []string{"clock"}})
					r.feed(body, nil)
					e.h.CallOnHttpCallResponse(r.lastResolve().ID, [][2]string{{":status", "200"}}, []byte(`{"continued":false}`), nil)
					noServerCall(t, r.out())
					got = readTurn(t, p, sse, r.out())
					want := minusServer(orig)
					if len(want.ToolCalls) != 1 || want.ToolCalls[0].Name != "read_file" || want.Finish.Reason != llm.FinishToolCalls {
						t.Fatalf("expectation wrong: %+v", want)
					}
					sameTurn(t, "not continued", got, want)
				})
			}
		}
	}
}

// TestChunkBoundariesAnywhere: the SSE result does not depend on where the
// upstream's chunks break: one byte at a time, or at random.
func TestChunkBoundariesAnywhere(t *testing.T) {
	one := func() int { return 1 }
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			e := newRespEnv(t, "")
			var want []byte
			for i := range 25 {
				next := one
				if i > 0 {
					rng := rand.New(rand.NewPCG(uint64(i), 7))
					next = func() int { return 1 + rng.IntN(1+rng.IntN(300)) }
				}
				r := e.exchange(p, true, hostapi.PrepareResponse{Tools: []string{"clock"}})
				r.feed(r.upstream(serverTurn), next)
				r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: contTurn})
				out := r.out()
				noServerCall(t, out)
				readTurn(t, p, true, out)
				if want == nil {
					want = out
				} else if !bytes.Equal(out, want) {
					t.Fatalf("chunking %d changed the client bytes:\n%s\nwant\n%s", i, out, want)
				}

				// A plain stop passes byte for byte, however it is cut.
				r = e.exchange(p, true, hostapi.PrepareResponse{})
				body := r.upstream(stopTurn)
				r.feed(body, next)
				if !bytes.Equal(r.out(), body) {
					t.Fatalf("chunking %d changed a plain stream", i)
				}
			}
		})
	}
}

// TestChatSplitToolName: Chat may stream a tool name in pieces. A name
// that could still become a server tool is withheld until it is known.
func TestChatSplitToolName(t *testing.T) {
	chunk := func(delta string) string {
		return `data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":null}]}` + "\n\n"
	}
	stream := func(first, second string) string {
		return chunk(`{"role":"assistant","content":"Hi."}`) +
			chunk(`{"tool_calls":[{"index":0,"id":"call_x","type":"function","function":{"name":"`+first+`","arguments":""}}]}`) +
			chunk(`{"tool_calls":[{"index":0,"function":{"name":"`+second+`","arguments":"{}"}}]}`) +
			`data: {"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}` + "\n\n" +
			"data: [DONE]\n\n"
	}
	e := newRespEnv(t, "")

	r := e.exchange(llm.Chat, true, hostapi.PrepareResponse{Tools: []string{"clock"}})
	r.feed([]byte(stream("clo", "ck")), func() int { return 40 })
	if len(r.resolveCalls()) != 1 {
		t.Fatal("split server-tool name not resolved")
	}
	r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: contTurn})
	noServerCall(t, r.out())
	if got := readTurn(t, llm.Chat, true, r.out()); got.Text != "Hi.\n\n"+contTurn.Text || len(got.ToolCalls) != 0 {
		t.Fatalf("client turn %+v", got)
	}

	// "c"+"at" looked like it might become "clock": withheld, then given
	// back whole as the client call it is.
	r = e.exchange(llm.Chat, true, hostapi.PrepareResponse{Tools: []string{"clock"}})
	r.feed([]byte(stream("c", "at")), nil)
	if len(e.calls(hostapi.PathResolve)) != 1 {
		t.Fatal("a client call was resolved")
	}
	got := readTurn(t, llm.Chat, true, r.out())
	want := &llm.Turn{ID: "c1", Model: "m", Text: "Hi.", ToolCalls: []llm.ToolCall{{ID: "call_x", Name: "cat", Arguments: "{}"}},
		Finish: llm.Finish{Reason: llm.FinishToolCalls}}
	sameTurn(t, "client call", got, want)
}

// TestResponsesNotOursPassUntouched: followups, errors, other types and
// bodies the filter cannot read are never touched or resolved.
func TestResponsesNotOursPassUntouched(t *testing.T) {
	clockJSON := llm.RenderJSON(llm.Chat, serverTurn)
	cases := []struct {
		name    string
		headers [][2]string
		body    []byte
	}{
		{"5xx", [][2]string{{":status", "500"}, {"content-type", "application/json"}}, clockJSON},
		{"gzip", [][2]string{{":status", "200"}, {"content-type", "application/json"}, {"content-encoding", "gzip"}}, clockJSON},
		{"text/plain", [][2]string{{":status", "200"}, {"content-type", "text/plain"}}, clockJSON},
		{"not JSON", [][2]string{{":status", "200"}, {"content-type", "application/json"}}, []byte(`{"choices":[`)},
		{"provider error", [][2]string{{":status", "200"}, {"content-type", "application/json"}}, []byte(`{"error":{"type":"x","message":"clock"}}`)},
	}
	e := newRespEnv(t, `{"token":"s3cret"}`)
	for _, tc := range cases {
		id := e.send(llm.Chat, requestBody(llm.Chat, false))
		e.answer(hostapi.PrepareResponse{NTP: ntp(0), Tools: []string{"clock"}, MayContinue: true})
		e.h.CallOnResponseHeaders(id, append(tc.headers, [2]string{"content-length", "9"}), false)
		if got := e.h.CallOnResponseBody(id, tc.body, true); got != proxywasm.ActionContinue {
			t.Fatalf("%s: action %v", tc.name, got)
		}
		if got := e.h.GetSentResponseBody(id); !bytes.Equal(got, tc.body) {
			t.Fatalf("%s: body changed to %s", tc.name, got)
		}
	}

	// A followup's answer is the host's to read: untouched even with a clock call.
	id := e.h.InitializeHttpContext()
	e.h.CallOnRequestHeaders(id, reqHeaders(llm.Chat, [2]string{hostapi.HeaderFollowup, hostapi.FollowupMarker("s3cret", "req-1", wall)}), false)
	e.h.CallOnRequestBody(id, []byte(requestBody(llm.Chat, true)), true)
	checks := e.calls(hostapi.PathFollowup)
	e.h.CallOnHttpCallResponse(checks[len(checks)-1].ID, [][2]string{{":status", "204"}}, nil, nil)
	e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false)
	stream := llm.RenderSSE(llm.Chat, serverTurn, llm.RenderOptions{})
	e.h.CallOnResponseBody(id, stream, true)
	if !bytes.Equal(e.h.GetSentResponseBody(id), stream) {
		t.Fatal("followup response changed")
	}
	if n := len(e.calls(hostapi.PathResolve)); n != 0 {
		t.Fatalf("%d resolve calls for responses that are not ours", n)
	}
}

func TestFollowupHeaders(t *testing.T) {
	got := followupHeaders([][2]string{
		{":method", "POST"}, {":authority", "api.example"}, {":path", "/v1/messages"}, {"X-Api-Key", "k"},
		{"anthropic-version", "2023-06-01"}, {"anthropic-beta", "a"}, {"anthropic-beta", "b"}, {"content-length", "9"},
		{"accept-encoding", "gzip"}, {"x-request-id", "r"}, {"x-forwarded-for", "1.2.3.4"}, {"connection", "close"},
		{hostapi.HeaderFollowup, "forged"}, {"x-chime-timezone", "Asia/Tokyo"},
	})
	want := map[string]string{"host": "api.example", "x-api-key": "k", "anthropic-version": "2023-06-01",
		"anthropic-beta": "a, b", "x-chime-timezone": "Asia/Tokyo"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("followup headers %v, want %v", got, want)
	}
}

// FuzzSSEResponse feeds arbitrary upstream SSE bytes, cut into chunks of
// any size, through the filter with a failing host. Whatever the bytes, the
// filter must not panic, a client must never see a server-tool call start,
// and a stream without any tool call passes byte for byte.
func FuzzSSEResponse(f *testing.F) {
	for i, p := range protocols {
		opts := llm.RenderOptions{ChunkBytes: 3, ChatUsage: true, Created: 1}
		mixed := *serverTurn
		mixed.ToolCalls = []llm.ToolCall{readFile, serverTurn.ToolCalls[0]}
		f.Add(llm.RenderSSE(p, serverTurn, opts), uint8(i), uint8(5))
		f.Add(llm.RenderSSE(p, &mixed, opts), uint8(i), uint8(64))
		f.Add(llm.RenderSSE(p, stopTurn, opts), uint8(i), uint8(1))
	}
	f.Add([]byte("data: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"x\",\"function\":{\"name\":\"clo\"}}]}}]}\r\n\r\ndata: [DONE]"), uint8(0), uint8(9))
	f.Add([]byte("event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n\n\n: tail"), uint8(2), uint8(2))
	f.Fuzz(checkSSEResponse)
}

// checkSSEResponse is FuzzSSEResponse's property check.
func checkSSEResponse(t *testing.T, upstream []byte, proto, chunk uint8) {
	p := protocols[int(proto)%len(protocols)]
	size := int(chunk) + 1
	e := newRespEnv(t, "")
	injected := []string{"clock"}
	r := e.exchange(p, true, hostapi.PrepareResponse{Tools: injected})
	if len(upstream) == 0 {
		upstream = []byte("\n")
	}
	r.feed(upstream, func() int { return size })
	if cs := r.resolveCalls(); len(cs) > 0 {
		e.h.CallOnHttpCallResponse(cs[0].ID, nil, nil, nil)
	}
	if logs := e.h.GetLogs(proxywasm.LogLevelCritical); len(logs) > 0 {
		t.Fatalf("panic: %q", logs)
	}
	out := r.out()
	rd := llm.NewStreamReader(p)
	evs, _ := rd.Feed(out)
	rest, _ := rd.Close()
	var b llm.TurnBuilder
	for _, ev := range append(evs, rest...) {
		if ev.StartsToolCall(injected) {
			t.Fatalf("client saw a server-tool call start: %v\nupstream %q\nclient %q", ev, upstream, out)
		}
		b.Add(ev)
	}
	if p != llm.Chat { // Chat names may be split; the reader sees pieces
		for _, c := range b.Turn().ToolCalls {
			if slices.Contains(injected, c.Name) {
				t.Fatalf("client saw a server-tool call %v", c)
			}
		}
	}
	up := llm.NewStreamReader(p)
	upEvs, _ := up.Feed(upstream)
	upRest, _ := up.Close()
	if !slices.ContainsFunc(append(upEvs, upRest...), func(ev llm.Event) bool { return ev.Kind.Has(llm.KindToolCallStart) }) &&
		!bytes.Equal(out, upstream) {
		t.Fatalf("a stream without tool calls changed:\n%q\n%q", upstream, out)
	}
}

// TestMalformedStartEventOnce: an upstream whose first SSE event (the
// start) is not JSON, with stopMessage set: the client gets one start
// event, never the upstream's and a spliced one (docs/failures.md).
func TestMalformedStartEventOnce(t *testing.T) {
	for p, start := range map[llm.Protocol]string{llm.Messages: "message_start", llm.Responses: "response.created"} {
		e := newRespEnv(t, "")
		r := e.exchange(p, true, hostapi.PrepareResponse{MayContinue: true})
		body := r.upstream(stopTurn)
		first := bytes.Index(body, []byte("\n\n")) + 2
		if !bytes.Contains(body[:first], []byte("event: "+start)) {
			t.Fatalf("%s: first event %q", p, body[:first])
		}
		body = append([]byte("event: "+start+"\ndata: {\"type\":\""+start+"\",\"broken\n\n"), body[first:]...)
		if got := r.feed(body, nil); got != proxywasm.ActionPause {
			t.Fatalf("%s: action %v: the stop finish must be resolved", p, got)
		}
		r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: contTurn, Reason: "done", Hops: 1})
		if n := bytes.Count(r.out(), []byte("event: "+start+"\n")); n != 1 {
			t.Fatalf("%s: %d %s events, want 1:\n%s", p, n, start, r.out())
		}
		if !bytes.Contains(r.out(), []byte(contTurn.Text)) {
			t.Fatalf("%s: continuation missing:\n%s", p, r.out())
		}
	}
}

// TestNeedlesFindWhatNamesFind: searching a body for the needles of a tool
// list answers as searching for every name does, for bodies holding any
// name, part of one, or none; the seven server tools need two searches.
func TestNeedlesFindWhatNamesFind(t *testing.T) {
	all := append([]string{hostapi.ClockToolName}, hostapi.TimerToolNames()...)
	lists := [][]string{all, hostapi.TimerToolNames(), {"read_timer", "stop_timer"}, {"timer", "timer"}, {"ab", "b", "abc", "c"}, nil}
	var p pluginContext
	if got := p.needles(all); !slices.Equal(got, []string{"clock", "timer"}) {
		t.Errorf("needles of the server tools = %q, want [clock timer]", got)
	}
	for _, names := range lists {
		needles := p.needles(names)
		var bodies []string
		for _, n := range append(slices.Clone(names), "tim", "clo", "xyz", "stop_time", `\u0074imer`) {
			bodies = append(bodies, `{"name":"`+n+`"}`, n, "")
		}
		for _, b := range bodies {
			if got, want := mayNameServerTool([]byte(b), needles), mayNameServerTool([]byte(b), names); got != want {
				t.Errorf("names %q, body %q: needles %q say %v, names say %v", names, b, needles, got, want)
			}
		}
	}
}

// A JSON answer is buffered to its end before any of it goes on. With
// allowOnHeadersStopIteration its headers wait for it too and leave with
// its length (content-length of the bytes that go out, spliced or not)
// instead of a chunked body; SSE headers, and any headers without the
// option, go on at once without a length. Held headers whose length is
// right keep it as it came, without a header write.
func TestJSONAnswerKeepsItsLength(t *testing.T) {
	for _, p := range protocols {
		for _, hold := range []bool{false, true} {
			for _, sse := range modes() {
				for _, turn := range []*llm.Turn{stopTurn, serverTurn} {
					for _, upstreamLength := range []string{"wrong", "right", "padded", "none"} {
						name := fmt.Sprintf("%s/hold=%v/%s/%s", modeName(p, sse), hold, turn.ID, upstreamLength)
						t.Run(name, func(t *testing.T) {
							e := newRespEnv(t, fmt.Sprintf(`{"token":"tok","allowOnHeadersStopIteration":%v}`, hold))
							id := e.h.InitializeHttpContext()
							e.h.CallOnRequestHeaders(id, reqHeaders(p, [2]string{"x-session-id", "s-1"}), false) // held for the route with the option
							e.h.CallOnRequestBody(id, []byte(requestBody(p, sse)), true)
							e.answer(hostapi.PrepareResponse{Tools: []string{"clock"}, NTP: ntp(0)})
							r := &rig{env: e, p: p, sse: sse, id: id}
							ct := "application/json"
							if sse {
								ct = "text/event-stream"
							}
							held := hold && !sse
							want := proxywasm.ActionContinue
							if held {
								want = proxywasm.ActionPause
							}
							body := r.upstream(turn)
							headers := [][2]string{{":status", "200"}, {"content-type", ct}}
							switch upstreamLength {
							case "wrong":
								headers = append(headers, [2]string{"content-length", "77"})
							case "right":
								headers = append(headers, [2]string{"content-length", strconv.Itoa(len(body))})
							case "padded": // the same length, written otherwise: a rewrite would show
								headers = append(headers, [2]string{"content-length", "0" + strconv.Itoa(len(body))})
							}
							if got := e.h.CallOnResponseHeaders(id, headers, false); got != want {
								t.Fatalf("response headers action %v, want %v", got, want)
							}
							action := r.feed(body, nil)
							if turn == serverTurn {
								if action != proxywasm.ActionPause {
									t.Fatalf("end of stream action %v, want Pause while resolving", action)
								}
								r.answerResolve(hostapi.ResolveResponse{Continued: true, Continuation: contTurn, Reason: "done", Hops: 1})
							} else if action != proxywasm.ActionContinue {
								t.Fatalf("end of stream action %v", action)
							}
							out := r.out()
							if turn == stopTurn && !bytes.Equal(out, body) {
								t.Fatalf("a plain answer changed:\n%s\n%s", out, body)
							}
							cl, ok := header(e.h.GetResponseHeaders(id), "content-length")
							wantLength := strconv.Itoa(len(out))
							if upstreamLength == "padded" && bytes.Equal(out, body) {
								wantLength = "0" + wantLength // the answer as it came: its headers untouched
							}
							switch {
							case held && (!ok || cl != wantLength):
								t.Fatalf("content-length %q (set %v), want %s", cl, ok, wantLength)
							case !held && ok:
								t.Fatalf("content-length %q on headers that went on before the body", cl)
							}
						})
					}
				}
			}
		}
	}
}

func TestIsMediaType(t *testing.T) {
	for _, c := range []struct {
		ct, want string
		ok       bool
	}{
		{"application/json", "application/json", true},
		{"Application/JSON; charset=utf-8", "application/json", true},
		{" application/json ;charset=utf-8", "application/json", true},
		{"application/json\t", "application/json", true},
		{"application/jsonl", "application/json", false},
		{"application/json-seq", "application/json", false},
		{"application/jso", "application/json", false},
		{"", "application/json", false},
		{"text/event-stream;charset=utf-8", "text/event-stream", true},
		{"text/plain", "text/event-stream", false},
	} {
		if got := isMediaType(c.ct, c.want); got != c.ok {
			t.Errorf("isMediaType(%q, %q) = %v, want %v", c.ct, c.want, got, c.ok)
		}
	}
}

func TestIs2xx(t *testing.T) {
	for status, want := range map[string]bool{
		"200": true, "204": true, "299": true, "199": false, "300": false,
		"2": false, "2000": false, "2x0": false, "": false, "500": false, " 200": false,
	} {
		if got := is2xx(status); got != want {
			t.Errorf("is2xx(%q) = %v, want %v", status, got, want)
		}
	}
}

// FuzzContains: contains is bytes.Contains.
func FuzzContains(f *testing.F) {
	for _, c := range [][2]string{{"", ""}, {"abc", ""}, {"", "a"}, {"clock", "clock"}, {"cloc", "clock"},
		{`{"name":"read_timer"}`, "timer"}, {`cccclock`, "clock"}, {`\\u0063`, `\u`}, {"aab", "ab"}} {
		f.Add([]byte(c[0]), c[1])
	}
	f.Fuzz(func(t *testing.T, body []byte, needle string) {
		if got, want := contains(body, needle), bytes.Contains(body, []byte(needle)); got != want {
			t.Fatalf("contains(%q, %q) = %v, want %v", body, needle, got, want)
		}
	})
}
