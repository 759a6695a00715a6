package llm

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// The splicer keeps one answer (docs/architecture.md#response-path, SSE): the
// continuation streams into the text block or message item the client
// already has open, and the closing events come once, with the whole text.

// withThinking returns stream with a provider item before everything else,
// as reasoning models send: a signed thinking block (Messages, index 0), an
// encrypted reasoning item (Responses, output_index 0, also in the final
// response) or reasoning_content (Chat). Later indexes and sequence numbers
// shift so the stream stays valid.
func withThinking(t testing.TB, p Protocol, stream []byte) []byte {
	t.Helper()
	var out []byte
	seq := 0
	set := func(data []byte, path string, v any) []byte {
		t.Helper()
		d, err := sjson.SetBytes(data, path, v)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	frame := func(name string, data []byte) {
		if p == Responses {
			data = set(data, "sequence_number", seq)
			seq++
		}
		if name != "" {
			out = append(out, "event: "+name+"\n"...)
		}
		out = append(out, "data: "...)
		out = append(out, data...)
		out = append(out, "\n\n"...)
	}
	reasoning := `{"id":"rs_1","type":"reasoning","summary":[],"encrypted_content":"gAAAA-secret"}`
	for i, ev := range mustRead(t, p, stream) {
		data := bytes.Clone(ev.Data)
		switch p {
		case Chat:
			frame("", data)
			if i == 0 {
				id := gjson.GetBytes(data, "id").String()
				frame("", []byte(`{"id":"`+id+`","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"reasoning_content":"let me think"},"finish_reason":null}]}`))
			}
			continue
		case Messages:
			if ev.Index >= 0 {
				data = set(data, "index", ev.Index+1)
			}
			frame(ev.Name, data)
			if ev.Type == "ping" {
				frame("content_block_start", []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`))
				frame("content_block_delta", []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"let me think"}}`))
				frame("content_block_delta", []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig=="}}`))
				frame("content_block_stop", []byte(`{"type":"content_block_stop","index":0}`))
			}
		case Responses:
			if ev.Index >= 0 {
				data = set(data, "output_index", ev.Index+1)
			}
			if ev.Kind.Has(KindTerminal) {
				items := []string{reasoning}
				for _, it := range gjson.GetBytes(data, "response.output").Array() {
					items = append(items, it.Raw)
				}
				d, err := sjson.SetRawBytes(data, "response.output", []byte("["+strings.Join(items, ",")+"]"))
				if err != nil {
					t.Fatal(err)
				}
				data = d
			}
			frame(ev.Name, data)
			if ev.Type == "response.in_progress" {
				frame("response.output_item.added", []byte(`{"type":"response.output_item.added","output_index":0,"item":{"id":"rs_1","type":"reasoning","summary":[]}}`))
				frame("response.output_item.done", []byte(`{"type":"response.output_item.done","output_index":0,"item":`+reasoning+`}`))
			}
		}
	}
	return out
}

// thinkingSeen reports whether the client stream carries the provider's
// thinking block or reasoning item, first, as the provider sent it.
func thinkingSeen(p Protocol, client []byte) bool {
	switch p {
	case Messages:
		return bytes.Contains(client, []byte(`"index":0,"content_block":{"type":"thinking"`)) &&
			bytes.Contains(client, []byte(`"signature":"sig=="`))
	case Responses:
		final := gjson.GetBytes(lastData(client), "response.output.0")
		return final.Get("type").String() == "reasoning" && final.Get("encrypted_content").String() == "gAAAA-secret"
	}
	return bytes.Contains(client, []byte(`"reasoning_content":"let me think"`))
}

func lastData(stream []byte) []byte {
	lines := bytes.Split(bytes.TrimSpace(stream), []byte("\n"))
	return bytes.TrimPrefix(lines[len(lines)-1], []byte("data: "))
}

// TestSpliceOneTextBlock: for stopMessage (or a hold) and for a server-tool
// interception, with and without a thinking item first, and with client
// calls in either turn, the client gets one text block or message item
// holding the whole reply, at the index it opened; client calls follow it.
func TestSpliceOneTextBlock(t *testing.T) {
	clock := ToolCall{ID: "call_srv", Name: "clock", Arguments: `{"action":"get","items":[],"taskId":""}`}
	read := ToolCall{ID: "call_read", Name: "read_file", Arguments: `{"path":"a.go"}`}
	shell := ToolCall{ID: "call_sh", Name: "shell", Arguments: `{"cmd":"make"}`}
	cases := []struct {
		name       string
		orig, cont *Turn
		wantCalls  []ToolCall
	}{
		{"stop", &Turn{Text: "part one.", Finish: Finish{Reason: FinishStop}}, &Turn{Text: "part two."}, nil},
		{"length", &Turn{Text: "part one.", Finish: Finish{Reason: FinishLength}}, &Turn{Text: "part two."}, nil},
		{"clock", &Turn{Text: "part one.", ToolCalls: []ToolCall{clock}}, &Turn{Text: "part two."}, nil},
		{"clock then client call", &Turn{Text: "part one.", ToolCalls: []ToolCall{clock}},
			&Turn{Text: "part two.", ToolCalls: []ToolCall{shell}}, []ToolCall{shell}},
		{"mixed", &Turn{Text: "part one.", ToolCalls: []ToolCall{read, clock}},
			&Turn{Text: "part two.", ToolCalls: []ToolCall{shell}}, []ToolCall{read, shell}},
		{"no original text", &Turn{ToolCalls: []ToolCall{clock}}, &Turn{Text: "part two."}, nil},
		{"no continuation text", &Turn{Text: "part one.", ToolCalls: []ToolCall{clock}}, &Turn{ToolCalls: []ToolCall{shell}}, []ToolCall{shell}},
	}
	for _, c := range cases {
		c.orig.ID, c.orig.Model, c.orig.Usage = "o-1", "m", Usage{10, 3}
		c.cont.Usage = Usage{20, 4}
		for _, p := range allProtocols {
			for _, thinking := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/thinking=%v", c.name, p, thinking), func(t *testing.T) {
					stream := RenderSSE(p, c.orig, RenderOptions{ChunkBytes: 3, ChatUsage: true, Created: 1})
					if thinking {
						stream = withThinking(t, p, stream)
					}
					client := filterSplice(t, p, stream, 1<<30, []string{"clock"}, c.cont)
					evs := mustRead(t, p, client)
					checkFraming(t, p, evs)
					got, _ := buildTurn(evs)
					want := Merge(c.orig, c.cont)
					want.ToolCalls = c.wantCalls
					want.Finish = c.cont.effectiveFinish()
					assertSameTurn(t, got, want)
					if thinking && !thinkingSeen(p, client) {
						t.Errorf("the thinking item did not reach the client first:\n%s", client)
					}
					first := 0
					if thinking && p != Chat {
						first = 1
					}
					checkTextAt(t, p, evs, first, want.Text)
				})
			}
		}
	}
}

// checkTextAt asserts that the text lives at index idx (Messages block,
// Responses output item) and that every tool call comes after it.
func checkTextAt(t *testing.T, p Protocol, evs []Event, idx int, text string) {
	t.Helper()
	if p == Chat || text == "" {
		return
	}
	for _, ev := range evs {
		if ev.Kind.Has(KindTextDelta) && ev.Index != idx {
			t.Errorf("text at index %d, want %d: %q", ev.Index, idx, ev.Raw)
		}
		for _, c := range ev.Calls {
			if c.Index <= idx {
				t.Errorf("tool call at index %d, before the text at %d", c.Index, idx)
			}
		}
	}
}

// TestSpliceTailEvents pins the bytes after what was forwarded: the
// continuation's deltas into the open block, then the held closing events
// once, carrying the whole text, then the finish and terminal.
func TestSpliceTailEvents(t *testing.T) {
	orig := &Turn{ID: "o", Model: "m", Text: "part one.", Finish: Finish{Reason: FinishStop}, Usage: Usage{5, 2}}
	cont := &Turn{Text: "part two.", Finish: Finish{Reason: FinishStop}, Usage: Usage{7, 3}}
	const whole = "part one.\n\npart two."
	want := map[Protocol][]string{
		Chat: {`{"content":"\n\npart two."}`, `"finish_reason":"stop"`, `"usage":{"prompt_tokens":12,"completion_tokens":5`, `[DONE]`},
		Messages: {
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"\n\npart two."}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":12,"output_tokens":5`,
			`{"type":"message_stop"}`,
		},
		Responses: {
			`"type":"response.output_text.delta","sequence_number":5,"item_id":"msg_chime_0","output_index":0,"content_index":0,"delta":"\n\npart two."`,
			`"type":"response.output_text.done","sequence_number":6,"item_id":"msg_chime_0","output_index":0,"content_index":0,"text":"` + jsonText(whole) + `"`,
			`"type":"response.content_part.done","sequence_number":7,"item_id":"msg_chime_0","output_index":0,"content_index":0,"part":{"type":"output_text","annotations":[],"logprobs":[],"text":"` + jsonText(whole) + `"}`,
			`"type":"response.output_item.done","sequence_number":8,"output_index":0,"item":{"id":"msg_chime_0","type":"message","status":"completed","role":"assistant","content":[{"type":"output_text","annotations":[],"logprobs":[],"text":"` + jsonText(whole) + `"}]}`,
			`"type":"response.completed","sequence_number":9,`,
		},
	}
	for _, p := range allProtocols {
		stream := RenderSSE(p, orig, RenderOptions{ChunkBytes: 100, ChatUsage: true, Created: 1})
		evs := mustRead(t, p, stream)
		sp := NewSplicer(p)
		var forwarded []byte
		stopped := false
		for _, ev := range evs {
			stopped = stopped || ev.MustHold()
			if !stopped {
				forwarded = append(forwarded, ev.Raw...)
			}
			sp.Add(ev, !stopped)
		}
		tail := sp.Continue(cont, RenderOptions{ChunkBytes: 512})
		tailEvs := mustRead(t, p, tail)
		if len(tailEvs) != len(want[p]) {
			t.Fatalf("%s: tail has %d events, want %d:\n%s", p, len(tailEvs), len(want[p]), tail)
		}
		for i, ev := range tailEvs {
			if !bytes.Contains(ev.Raw, []byte(want[p][i])) {
				t.Errorf("%s: tail event %d is\n%s\nwant it to contain\n%s", p, i, ev.Raw, want[p][i])
			}
		}
		all := mustRead(t, p, append(forwarded, tail...))
		checkFraming(t, p, all)
		if got, _ := buildTurn(all); got.Text != whole {
			t.Errorf("%s: text %q", p, got.Text)
		}
		if p == Responses && gjson.GetBytes(lastData(tail), "response.output.0.content.0.text").String() != whole {
			t.Errorf("response.completed lacks the whole text: %s", lastData(tail))
		}
	}
}

// jsonText is s as it appears inside a JSON string.
func jsonText(s string) string { return strings.ReplaceAll(s, "\n", `\n`) }

// fuzzBytes hands out the fuzzer's bytes one decision at a time (zero once
// they run out).
type fuzzBytes []byte

func (f *fuzzBytes) next() int {
	if len(*f) == 0 {
		return 0
	}
	b := (*f)[0]
	*f = (*f)[1:]
	return int(b)
}

var fuzzPieces = []string{"part one.", " ", "\n", "ü☕ 日本", "line\n", `"q" <b> & \`, "\n\npart two.", "x"}

func (f *fuzzBytes) text() string {
	var sb strings.Builder
	for range f.next() % 4 {
		sb.WriteString(fuzzPieces[f.next()%len(fuzzPieces)])
	}
	return sb.String()
}

// FuzzSplice builds a random original turn of a random protocol (text
// pieces, a thinking item, server and client calls in any order, any
// finish, any chunking), plays the filter over its stream and splices a
// random continuation. The client's stream must always be one valid
// answer: framing, one text block or message item, done events with the
// whole text, and the turn Merge gives for JSON.
func FuzzSplice(f *testing.F) {
	f.Add([]byte{0, 0, 1, 0, 0, 0, 1, 7, 0, 0})
	f.Add([]byte{1, 1, 2, 0, 3, 1, 0, 1, 0, 1, 1, 1, 6, 1, 1, 4, 3, 0})
	f.Add([]byte{2, 1, 3, 0, 4, 5, 2, 1, 0, 0, 1, 2, 1, 2, 1, 1, 1, 2, 0, 9, 1})
	f.Add([]byte{2, 0, 0, 1, 1, 1, 0, 1, 6, 0, 0, 200, 3})
	f.Add([]byte{1, 0, 2, 7, 3, 0, 0, 1, 0, 0, 2, 1, 1, 5, 2, 0, 255, 17})
	f.Add([]byte{0, 1, 1, 2, 2, 1, 0, 1, 1, 1, 1, 1, 0, 3, 1, 2, 2, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzBytes(data)
		p := allProtocols[in.next()%len(allProtocols)]
		thinking := in.next()%2 == 1
		orig := &Turn{ID: "o-1", Model: "m", Text: in.text(), Usage: Usage{InputTokens: 11, OutputTokens: 5}}
		client := 0
		for i := range in.next() % 4 {
			c := ToolCall{ID: fmt.Sprintf("call_%d", i), Name: "clock", Arguments: `{"action":"get"}`}
			if in.next()%2 == 1 {
				c.Name, c.Arguments = []string{"read_file", "shell"}[i%2], `{"path":"a b.go"}`
				client++
			}
			orig.ToolCalls = append(orig.ToolCalls, c)
		}
		switch in.next() % 3 {
		case 1:
			orig.Finish = Finish{Reason: FinishLength}
		case 2:
			orig.Finish = Finish{Reason: FinishStop}
		}
		cont := &Turn{Text: in.text(), Usage: Usage{InputTokens: 20, OutputTokens: 7}}
		for i := range in.next() % 3 {
			cont.ToolCalls = append(cont.ToolCalls, ToolCall{ID: fmt.Sprintf("cont_%d", i), Name: "shell", Arguments: `{"cmd":"ls"}`})
		}
		if in.next()%2 == 1 {
			cont.Finish = Finish{Reason: FinishLength}
		}
		opts := RenderOptions{ChunkBytes: 1 + in.next()%16, ChatUsage: in.next()%2 == 1, Created: 1}
		stream := RenderSSE(p, orig, opts)
		if thinking {
			stream = withThinking(t, p, stream)
		}
		// The filter stops forwarding at a server call or the text's close;
		// a cut anywhere else (never inside a client call) also must hold.
		limit := 1 << 30
		if cut := in.next(); cut >= 128 && client == 0 {
			limit = cut - 128
		}
		out := filterSplice(t, p, stream, limit, []string{"clock"}, cont)
		evs, err := readAll(t, p, out)
		if err != nil {
			t.Fatalf("client stream: %v\n%s", err, out)
		}
		checkFraming(t, p, evs)
		got, _ := buildTurn(evs)
		want := Merge(orig, cont)
		want.ToolCalls = append(orig.ClientCalls([]string{"clock"}), cont.ToolCalls...)
		want.Finish = (&Turn{ToolCalls: want.ToolCalls, Finish: cont.Finish}).effectiveFinish()
		if p == Chat && !opts.ChatUsage {
			want.Usage = Usage{} // no usage chunk was asked for
		}
		assertSameTurn(t, got, want)
		// The filter's own rule always forwards a leading thinking item; an
		// arbitrary cut may withhold it, and withheld ones are dropped.
		if thinking && limit == 1<<30 && !thinkingSeen(p, out) {
			t.Errorf("the thinking item is missing:\n%s", out)
		}
		if t.Failed() {
			t.Logf("original:\n%s\nclient:\n%s", stream, out)
		}
	})
}
