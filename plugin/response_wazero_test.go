package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/chimehq/chime/internal/ssecheck"
	"github.com/chimehq/chime/llm"
)

// TestModuleSplicesServerToolCallUnderWazero runs the SSE response path
// through the real chime.wasm: text streams through while the upstream
// answers, the clock call is withheld, the host's resolve gets the edited
// request, and its continuation is spliced into the same stream. A second
// stream's client goes away mid-resolve: one cancel.
func TestModuleSplicesServerToolCallUnderWazero(t *testing.T) {
	h := newHarness(t, `{"token":"t0k"}`)
	h.props["destination.address"] = []byte("127.0.0.1:10000")
	h.start()

	orig := &llm.Turn{ID: "msg_up", Model: "claude-x", Text: "Let me look at the time first.",
		ToolCalls: []llm.ToolCall{{ID: "toolu_srv", Name: "clock", Arguments: `{"action":"get"}`}},
		Finish:    llm.Finish{Reason: llm.FinishToolCalls}, Usage: llm.Usage{InputTokens: 40, OutputTokens: 12}}
	cont := &llm.Turn{Text: "It is 21:22 UTC.", Finish: llm.Finish{Reason: llm.FinishStop},
		Usage: llm.Usage{InputTokens: 60, OutputTokens: 6}}
	upstream := llm.RenderSSE(llm.Messages, orig, llm.RenderOptions{ChunkBytes: 6, Created: 1})
	// early is what may reach the client before the upstream ends: every
	// event before the text block closes (the continuation goes into it)
	// or the clock call starts.
	var early []byte
	evs, err := llm.NewStreamReader(llm.Messages).Feed(upstream)
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
		t.Fatalf("no text before the call in %s", upstream)
	}

	stream := func(id uint32) (resolve harnessCall) {
		t.Helper()
		h.effective = id
		h.call("proxy_on_context_create", id, 1)
		h.reqHeaders[id] = [][2]string{{":method", "POST"}, {":path", "/v1/messages"}, {":authority", "api"},
			{"x-api-key", "sk-ant"}, {"x-request-id", fmt.Sprintf("r%d", id)}}
		h.call("proxy_on_request_headers", id, uint32(len(h.reqHeaders[id])), 0)
		h.reqBody[id] = []byte(`{"model":"m","max_tokens":99,"stream":true,"messages":[{"role":"user","content":"time?"}]}`)
		h.call("proxy_on_request_body", id, uint32(len(h.reqBody[id])), 1)
		h.answer(h.calls[len(h.calls)-1].id, [][2]string{{":status", "200"}}, `{"ntp":{"status":"ok","offsetMs":0},"tools":["clock"]}`)
		if h.continued[id] != 1 || !bytes.Contains(h.setBody[id], []byte(`"name":"clock"`)) {
			t.Fatalf("stream %d: request not prepared: %s", id, h.setBody[id])
		}

		h.effective = id
		h.respHeaders[id] = [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}, {"content-length", "999"}}
		if a := h.call("proxy_on_response_headers", id, 3, 0); a != 0 {
			t.Fatalf("response headers action %d", a)
		}
		if slices.ContainsFunc(h.respHeaders[id], func(kv [2]string) bool { return kv[0] == "content-length" }) {
			t.Fatal("response content-length kept")
		}
		const chunk = 7
		checked := false
		for off := 0; off < len(upstream); off += chunk {
			end := min(off+chunk, len(upstream))
			a := h.responseBody(id, upstream[off:end], end == len(upstream))
			if end < len(upstream) && a != 0 {
				t.Fatalf("chunk at %d: action %d, the stream must flow", off, a)
			}
			if end == len(upstream) && a != 1 {
				t.Fatalf("end of stream action %d, want Pause while resolving", a)
			}
			if !checked && end > len(early) && end < len(upstream) {
				checked = true
				if !bytes.Equal(h.respSent[id], early) {
					t.Fatalf("mid-stream the client has %q, want the text so far %q", h.respSent[id], early)
				}
			}
		}
		resolve = h.calls[len(h.calls)-1]
		var req llm.ResolveRequest
		if err := json.Unmarshal(resolve.body, &req); err != nil {
			t.Fatal(err)
		}
		if p := pathOf(resolve.headers); p != llm.PathResolve || req.Reentry != "127.0.0.1:10000" || req.Headers["x-api-key"] != "sk-ant" ||
			!bytes.Equal(req.Request, h.setBody[id]) || req.Turn == nil || req.Turn.Text != orig.Text || len(req.Turn.ToolCalls) != 1 || !req.Streaming {
			t.Fatalf("resolve call %s: %s", p, resolve.body)
		}
		return resolve
	}

	// Stream 2: the host continues; the client gets one spliced turn.
	c := stream(2)
	h.answer(c.id, [][2]string{{":status", "200"}}, string(mustJSON(t, llm.ResolveResponse{Continued: true, Continuation: cont, Hops: 1})))
	if h.respContinued[2] != 1 {
		t.Fatalf("response resumed %d times", h.respContinued[2])
	}
	out := h.respSent[2]
	if bytes.Contains(out, []byte("clock")) || bytes.Contains(out, []byte("toolu_srv")) || !bytes.HasPrefix(out, early) {
		t.Fatalf("client stream:\n%s", out)
	}
	if _, err := ssecheck.Check("messages", out); err != nil {
		t.Fatalf("client stream: %v\n%s", err, out)
	}
	rd := llm.NewStreamReader(llm.Messages)
	evs, err = rd.Feed(out)
	rest, cerr := rd.Close()
	if err != nil || cerr != nil {
		t.Fatalf("client stream unreadable: %v %v", err, cerr)
	}
	var b llm.TurnBuilder
	starts, terminals := 0, 0
	for _, ev := range append(evs, rest...) {
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
	h.call("proxy_on_log", 2)
	h.call("proxy_on_done", 2)
	h.call("proxy_on_delete", 2)

	// Stream 3: the client goes away while the host holds.
	c = stream(3)
	h.call("proxy_on_log", 3)
	h.call("proxy_on_done", 3)
	h.call("proxy_on_delete", 3)
	var cancels []harnessCall
	for _, call := range h.calls {
		if pathOf(call.headers) == llm.PathCancel {
			cancels = append(cancels, call)
		}
	}
	if len(cancels) != 1 || string(cancels[0].body) != `{"requestId":"r3"}` {
		t.Fatalf("cancels %+v, want one for r3", cancels)
	}
	h.answer(c.id, [][2]string{{":status", "200"}}, `{"continued":false}`) // late: must touch nothing
	if h.respContinued[3] != 0 {
		t.Fatal("a finished stream was resumed")
	}

	if h.polls != 0 || len(h.unknown) != 0 {
		t.Fatalf("polls %d, unimplemented calls %q", h.polls, h.unknown)
	}
	for _, l := range h.logs {
		if strings.HasPrefix(l, "3 ") || strings.HasPrefix(l, "4 ") || strings.HasPrefix(l, "5 ") {
			t.Errorf("warning or error log: %s", l)
		}
	}
}

func pathOf(headers [][2]string) string {
	for _, kv := range headers {
		if kv[0] == ":path" {
			return kv[1]
		}
	}
	return ""
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// BenchmarkSSEResponseUnderWazero measures the SSE response path in
// chime.wasm: a 32 KiB Chat stream of small text deltas (the common case,
// no server-tool call) fed in 1 KiB chunks, each event parsed, forwarded
// and tracked for a possible splice.
func BenchmarkSSEResponseUnderWazero(b *testing.B) {
	h := newHarness(b, "")
	h.start()
	turn := &llm.Turn{ID: "c", Model: "m", Text: strings.Repeat("lorem ipsum ", 2700), Finish: llm.Finish{Reason: llm.FinishStop}}
	upstream := llm.RenderSSE(llm.Chat, turn, llm.RenderOptions{ChunkBytes: 16, Created: 1})
	b.SetBytes(int64(len(upstream)))
	id := uint32(1)
	for b.Loop() {
		id++
		h.effective = id
		h.call("proxy_on_context_create", id, 1)
		h.reqHeaders[id] = [][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {"x-request-id", "r"}}
		h.call("proxy_on_request_headers", id, 3, 0)
		h.reqBody[id] = []byte(`{"stream":true,"messages":[{"role":"user","content":"go"}]}`)
		h.call("proxy_on_request_body", id, uint32(len(h.reqBody[id])), 1)
		h.answer(h.calls[len(h.calls)-1].id, [][2]string{{":status", "200"}}, `{"ntp":{"status":"ok"}}`)
		h.effective = id
		h.respHeaders[id] = [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}
		h.call("proxy_on_response_headers", id, 2, 0)
		for off := 0; off < len(upstream); off += 1024 {
			end := min(off+1024, len(upstream))
			h.responseBody(id, upstream[off:end], end == len(upstream))
		}
		if !bytes.Equal(h.respSent[id], upstream) {
			b.Fatal("stream changed")
		}
		h.call("proxy_on_log", id)
		h.call("proxy_on_done", id)
		h.call("proxy_on_delete", id)
		for _, m := range []map[uint32][]byte{h.reqBody, h.setBody, h.respSent} {
			delete(m, id)
		}
		delete(h.reqHeaders, id)
		delete(h.respHeaders, id)
	}
}
