package llm

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/internal/ssecheck"
)

var allProtocols = []Protocol{Chat, Responses, Messages}

// checkFraming asserts the protocol-level validity of a complete stream: one
// start, one terminal at the end, valid JSON everywhere, and per protocol the
// index and sequence rules clients rely on.
func checkFraming(t testing.TB, p Protocol, evs []Event) {
	t.Helper()
	if n := countKind(evs, KindStart); n != 1 {
		t.Errorf("%d start events, want 1", n)
	}
	if n := countKind(evs, KindTerminal); n != 1 {
		t.Errorf("%d terminal events, want 1", n)
	}
	if n := countKind(evs, KindFinish); n != 1 {
		t.Errorf("%d finish events, want 1", n)
	}
	if len(evs) == 0 || !evs[len(evs)-1].Kind.Has(KindTerminal) {
		t.Fatalf("stream does not end with its terminal event")
	}
	for _, ev := range evs {
		if len(ev.Data) > 0 && ev.Type != "[DONE]" && !json.Valid(ev.Data) {
			t.Fatalf("invalid JSON in %q", ev.Raw)
		}
		if p != Chat && ev.Name != ev.Type {
			t.Errorf("event name %q does not match type %q", ev.Name, ev.Type)
		}
	}
	switch p {
	case Chat:
		id := ""
		seen := map[int]string{}
		for _, ev := range evs {
			if ev.Type == "[DONE]" || len(ev.Data) == 0 {
				continue
			}
			got := gjson.GetBytes(ev.Data, "id").String()
			if id == "" {
				id = got
			}
			if got != id {
				t.Errorf("chunk id %q differs from %q", got, id)
			}
			for _, c := range ev.Calls {
				if c.ID != "" {
					if prev, dup := seen[c.Index]; dup {
						t.Errorf("tool call index %d started twice (%s, %s)", c.Index, prev, c.ID)
					}
					seen[c.Index] = c.ID
				}
			}
		}
	case Responses:
		seq := 0
		added := map[int]bool{}
		done := map[int]bool{}
		for _, ev := range evs {
			if got := int(gjson.GetBytes(ev.Data, "sequence_number").Int()); got != seq {
				t.Errorf("sequence_number %d, want %d (%s)", got, seq, ev.Type)
			}
			seq++
			switch ev.Type {
			case "response.output_item.added":
				if added[ev.Index] {
					t.Errorf("output_index %d added twice", ev.Index)
				}
				if ev.Index != len(added) {
					t.Errorf("output_index %d added out of order", ev.Index)
				}
				added[ev.Index] = true
			case "response.output_item.done":
				if !added[ev.Index] || done[ev.Index] {
					t.Errorf("output_index %d done without add or twice", ev.Index)
				}
				done[ev.Index] = true
			case "response.completed", "response.incomplete":
				out := gjson.GetBytes(ev.Data, "response.output").Array()
				if len(out) != len(added) || len(done) != len(added) {
					t.Errorf("final output has %d items; %d added, %d done", len(out), len(added), len(done))
				}
			}
		}
	case Messages:
		open := map[int]bool{}
		started := 0
		for _, ev := range evs {
			switch ev.Type {
			case "content_block_start":
				if ev.Index != started {
					t.Errorf("block %d started, want %d", ev.Index, started)
				}
				started++
				open[ev.Index] = true
			case "content_block_delta":
				if !open[ev.Index] {
					t.Errorf("delta for block %d that is not open", ev.Index)
				}
			case "content_block_stop":
				if !open[ev.Index] {
					t.Errorf("stop for block %d that is not open", ev.Index)
				}
				delete(open, ev.Index)
			case "message_delta", "message_stop":
				if len(open) > 0 {
					t.Errorf("%s with blocks still open: %v", ev.Type, open)
				}
			}
		}
		if evs[0].Type != "message_start" {
			t.Errorf("first event %s", evs[0].Type)
		}
	}
	// One answer, as agent CLIs read it (docs/architecture.md), by an independent parser.
	if _, err := ssecheck.Check(p.String(), joinRaw(evs)); err != nil {
		t.Errorf("%v\n%s", err, joinRaw(evs))
	}
}

func TestRenderSSERoundTrip(t *testing.T) {
	for name, turn := range canonicalTurns() {
		for _, p := range allProtocols {
			for _, chunk := range []int{1, 3, 0, 1000} {
				t.Run(fmt.Sprintf("%s/%s/%d", name, p, chunk), func(t *testing.T) {
					stream := RenderSSE(p, turn, RenderOptions{ChunkBytes: chunk, ChatUsage: true, Created: 1700000000})
					evs := mustRead(t, p, stream)
					checkFraming(t, p, evs)
					got, _ := buildTurn(evs)
					assertSameTurn(t, got, turn)
				})
			}
		}
	}
}

func TestRenderSSEChunking(t *testing.T) {
	turn := canonicalTurns()["tools"]
	for _, p := range allProtocols {
		evs := mustRead(t, p, RenderSSE(p, turn, RenderOptions{}))
		texts, args := 0, 0
		for _, ev := range evs {
			if ev.Kind.Has(KindTextDelta) {
				texts++
			}
			if ev.Kind.Has(KindToolCallArgs) {
				args++
			}
		}
		if texts < 2 || args < 4 {
			t.Errorf("%s: %d text deltas and %d argument deltas; want the turn split up", p, texts, args)
		}
	}
	// Multi-byte runes are never split, even with one-byte chunks.
	evs := mustRead(t, Chat, RenderSSE(Chat, &Turn{Text: "日本☕"}, RenderOptions{ChunkBytes: 1}))
	var pieces []string
	for _, ev := range evs {
		if ev.Kind.Has(KindTextDelta) {
			pieces = append(pieces, ev.Text)
		}
	}
	if strings.Join(pieces, "|") != "日|本|☕" {
		t.Errorf("pieces %q", pieces)
	}
}

func TestRenderSSEChatUsageOption(t *testing.T) {
	turn := &Turn{Text: "x", Usage: Usage{1, 2}}
	without := mustRead(t, Chat, RenderSSE(Chat, turn, RenderOptions{}))
	with := mustRead(t, Chat, RenderSSE(Chat, turn, RenderOptions{ChatUsage: true}))
	if countKind(without, KindUsage) != 0 || countKind(with, KindUsage) != 1 {
		t.Errorf("usage chunks: %d without, %d with", countKind(without, KindUsage), countKind(with, KindUsage))
	}
	if got, _ := buildTurn(with); got.Usage != (Usage{1, 2}) {
		t.Errorf("usage %+v", got.Usage)
	}
}

func TestRenderSSEFramingBytes(t *testing.T) {
	msg := string(RenderSSE(Messages, &Turn{Text: "hi"}, RenderOptions{}))
	if !strings.HasPrefix(msg, "event: message_start\ndata: {\"type\":\"message_start\"") ||
		!strings.HasSuffix(msg, "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n") {
		t.Errorf("messages framing:\n%s", msg)
	}
	chat := string(RenderSSE(Chat, &Turn{Text: "hi"}, RenderOptions{}))
	if strings.Contains(chat, "event:") || !strings.HasSuffix(chat, "data: [DONE]\n\n") {
		t.Errorf("chat framing:\n%s", chat)
	}
	resp := string(RenderSSE(Responses, &Turn{Text: "hi", Finish: Finish{Reason: FinishLength}}, RenderOptions{}))
	if !strings.Contains(resp, "event: response.incomplete\ndata: {\"type\":\"response.incomplete\"") {
		t.Errorf("responses length should end with response.incomplete:\n%s", resp)
	}
}
