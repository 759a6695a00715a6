package llm

import (
	"bytes"
	"fmt"
	"testing"
)

// filterSplice plays the filter (plugin/internal/filter/response.go): it
// forwards the first limit events, but nothing from the first server-tool
// call or the first must-hold event on; then, like its sseEnding, it
// continues with cont plus the original's client calls the client has not
// seen. It returns what the client receives.
func filterSplice(t testing.TB, p Protocol, original []byte, limit int, server []string, cont *Turn) []byte {
	t.Helper()
	evs := mustRead(t, p, original)
	sp := NewSplicer(p)
	var b TurnBuilder
	var out []byte
	stopped := false
	seen := 0
	for i, ev := range evs {
		if i >= limit || ev.StartsToolCall(server) || ev.MustHold() {
			stopped = true
		}
		if !stopped {
			out = append(out, ev.Raw...)
		}
		sp.Add(ev, !stopped)
		b.Add(ev)
		if !stopped {
			seen = b.NumCalls()
		}
	}
	withheld := Turn{ToolCalls: b.Turn().ToolCalls[seen:]}
	rest := *cont
	rest.ToolCalls = append(withheld.ClientCalls(server), cont.ToolCalls...)
	// The filter's finishFor: calls the client saw make a stop tool_calls.
	if seen+len(rest.ToolCalls) > 0 && (rest.Finish.Reason == FinishNone || rest.Finish.Reason == FinishStop) {
		rest.Finish = Finish{Reason: FinishToolCalls}
	}
	return append(out, sp.Continue(&rest, RenderOptions{ChunkBytes: 4})...)
}

func TestSpliceServerToolCall(t *testing.T) {
	orig := &Turn{ID: "orig-1", Model: "model-a", Text: "Let me check the time.",
		ToolCalls: []ToolCall{{ID: "call_srv", Name: "clock", Arguments: `{"action":"get"}`}},
		Finish:    Finish{Reason: FinishToolCalls}, Usage: Usage{InputTokens: 100, OutputTokens: 20}}
	cont := &Turn{ID: "cont-1", Model: "model-b", Text: "It is 15:04 — right now.", Finish: Finish{Reason: FinishStop},
		Usage: Usage{InputTokens: 130, OutputTokens: 10}}
	want := Merge(orig, cont)
	for _, p := range allProtocols {
		stream := RenderSSE(p, orig, RenderOptions{ChunkBytes: 5, ChatUsage: true, Created: 1})
		n := len(mustRead(t, p, stream))
		for limit := 0; limit <= n; limit++ {
			t.Run(fmt.Sprintf("%s/%d", p, limit), func(t *testing.T) {
				client := filterSplice(t, p, stream, limit, []string{"clock"}, cont)
				evs := mustRead(t, p, client)
				checkFraming(t, p, evs)
				got, _ := buildTurn(evs)
				assertSameTurn(t, got, want)
			})
		}
	}
}

func TestSpliceStopContinuation(t *testing.T) {
	// stopMessage: the original stopped; the continuation adds text and a client call.
	orig := &Turn{ID: "o", Model: "m", Text: "Step one done.\n", Finish: Finish{Reason: FinishStop}, Usage: Usage{10, 3}}
	cont := &Turn{Text: "Now step two.", ToolCalls: []ToolCall{{ID: "c9", Name: "shell", Arguments: `{"cmd":"make test"}`}},
		Finish: Finish{Reason: FinishToolCalls}, Usage: Usage{20, 6}}
	want := Merge(orig, cont)
	if want.Text != "Step one done.\nNow step two." {
		t.Fatalf("merge text %q", want.Text)
	}
	for _, p := range allProtocols {
		stream := RenderSSE(p, orig, RenderOptions{ChunkBytes: 3, ChatUsage: true})
		n := len(mustRead(t, p, stream))
		for limit := 0; limit <= n; limit++ {
			client := filterSplice(t, p, stream, limit, nil, cont)
			evs := mustRead(t, p, client)
			checkFraming(t, p, evs)
			got, _ := buildTurn(evs)
			assertSameTurn(t, got, want)
		}
	}
}

func TestSpliceMixedCalls(t *testing.T) {
	// A client call precedes the server call: the client already saw it, so
	// the continuation's calls are numbered after it.
	orig := &Turn{ID: "o", Model: "m", Text: "Working.", ToolCalls: []ToolCall{
		{ID: "c_read", Name: "read_file", Arguments: `{"path":"a.go"}`},
		{ID: "c_clock", Name: "clock", Arguments: `{"action":"get"}`},
	}, Finish: Finish{Reason: FinishToolCalls}, Usage: Usage{5, 5}}
	cont := &Turn{ToolCalls: []ToolCall{{ID: "c_shell", Name: "shell", Arguments: `{"cmd":"date"}`}},
		Finish: Finish{Reason: FinishToolCalls}, Usage: Usage{7, 2}}
	for _, p := range allProtocols {
		stream := RenderSSE(p, orig, RenderOptions{ChatUsage: true})
		client := filterSplice(t, p, stream, 1<<30, []string{"clock"}, cont)
		evs := mustRead(t, p, client)
		checkFraming(t, p, evs)
		got, _ := buildTurn(evs)
		want := &Turn{ID: "o", Model: "m", Text: "Working.", ToolCalls: []ToolCall{orig.ToolCalls[0], cont.ToolCalls[0]},
			Finish: Finish{Reason: FinishToolCalls}, Usage: Usage{12, 7}}
		assertSameTurn(t, got, want)
		for _, c := range got.ToolCalls {
			if c.Name == "clock" {
				t.Errorf("%s: the client saw a server tool call", p)
			}
		}
	}
}

func TestSpliceSamples(t *testing.T) {
	// Real-looking provider streams, including a Chat chunk that carries the
	// last text together with finish_reason (withheld, so re-emitted).
	cont := &Turn{Text: "More.", Finish: Finish{Reason: FinishStop}, Usage: Usage{1, 1}}
	for name, s := range samples(t, "*.sse") {
		p := sampleProtocol(t, name)
		orig := decodeTurn(t, s[1])
		server := []string{"clock"}
		client := filterSplice(t, p, s[0], 1<<30, server, cont)
		evs := mustRead(t, p, client)
		checkFraming(t, p, evs)
		got, _ := buildTurn(evs)
		want := Merge(orig, cont)
		// A client call withheld with the server call is given back.
		want.ToolCalls = append(orig.ClientCalls(server), cont.ToolCalls...)
		if len(want.ToolCalls) > 0 {
			want.Finish = Finish{Reason: FinishToolCalls}
		}
		assertSameTurn(t, got, want)
	}
}

func TestSpliceOpenItems(t *testing.T) {
	// The filter stopped forwarding in the middle of a block or item: the
	// splicer closes it with what the client saw and re-emits the rest.
	orig := &Turn{ID: "o", Model: "m", Text: "abcdefghijklmnopqrstuvwxyz", Finish: Finish{Reason: FinishStop}, Usage: Usage{1, 2}}
	cont := &Turn{Text: "Z", Finish: Finish{Reason: FinishLength}, Usage: Usage{3, 4}}
	for _, p := range []Protocol{Responses, Messages} {
		stream := RenderSSE(p, orig, RenderOptions{ChunkBytes: 4})
		evs := mustRead(t, p, stream)
		limit := 0
		for i, ev := range evs {
			if ev.Kind.Has(KindTextDelta) {
				limit = i + 2 // two deltas forwarded, the rest withheld
				break
			}
		}
		client := filterSplice(t, p, stream, limit, nil, cont)
		got := mustRead(t, p, client)
		checkFraming(t, p, got)
		turn, _ := buildTurn(got)
		assertSameTurn(t, turn, Merge(orig, cont))
	}
}

// TestSpliceMalformedStartOnce: an upstream whose start event is not
// valid JSON still started the client's stream when it was forwarded; the
// continuation must not start it again (docs/failures.md: one start event, always).
func TestSpliceMalformedStartOnce(t *testing.T) {
	orig := &Turn{ID: "o", Model: "m", Text: "Step one done.", Finish: Finish{Reason: FinishStop}, Usage: Usage{10, 3}}
	cont := &Turn{Text: "Now step two.", Finish: Finish{Reason: FinishStop}, Usage: Usage{20, 6}}
	for p, start := range map[Protocol]string{Messages: "message_start", Responses: "response.created"} {
		stream := RenderSSE(p, orig, RenderOptions{ChunkBytes: 5})
		evs := mustRead(t, p, stream)
		if evs[0].Type != start {
			t.Fatalf("%s: first event %q", p, evs[0].Type)
		}
		// The start event's data cut short: not JSON any more.
		bad := []byte("event: " + start + "\ndata: {\"type\":\"" + start + "\",\"broken\n\n")
		malformed := append(bad, stream[len(evs[0].Raw):]...)
		for limit := 1; limit <= len(evs); limit++ {
			client := filterSplice(t, p, malformed, limit, nil, cont)
			if n := bytes.Count(client, []byte("event: "+start+"\n")); n != 1 {
				t.Fatalf("%s, %d forwarded: %d %s events, want 1:\n%s", p, limit, n, start, client)
			}
		}
	}
}
