package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

// seedStreams adds the sample streams of one protocol plus rendered ones.
func seedStreams(f *testing.F, prefix string, p Protocol) {
	files, _ := filepath.Glob(filepath.Join("testdata", "responses", prefix+"_*.sse"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, uint16(len(data)/2))
		f.Add(bytes.ReplaceAll(data, []byte("\n"), []byte("\r")), uint16(7))
	}
	for _, turn := range canonicalTurns() {
		data := RenderSSE(p, turn, RenderOptions{ChunkBytes: 5, ChatUsage: true})
		f.Add(data, uint16(len(data)/3))
	}
	f.Add([]byte("data: [DONE]"), uint16(3))
	f.Add([]byte(":\r\n\r\ndata\r\ndata: {\"a\r\n\n\n"), uint16(5))
}

// fuzzStreamReader checks that the reader never panics, that two chunks give
// the same events as one, and that the events' Raw bytes reproduce the input.
func fuzzStreamReader(t *testing.T, p Protocol, data []byte, split uint16) {
	one, err1 := readAll(t, p, data)
	cut := int(split) % (len(data) + 1)
	two, err2 := readAll(t, p, data[:cut], data[cut:])
	if (err1 == nil) != (err2 == nil) {
		t.Fatalf("errors differ: %v vs %v", err1, err2)
	}
	if !reflect.DeepEqual(one, two) {
		t.Fatalf("split at %d changes the events:\n%v\n%v", cut, one, two)
	}
	if !bytes.Equal(joinRaw(one), data) {
		t.Fatalf("Raw does not reproduce the input")
	}
	var b TurnBuilder
	for _, ev := range one {
		b.Add(ev)
		// What the filter reads without building the turn agrees with it.
		turn := b.Turn()
		for _, names := range [][]string{nil, {"clock", "timer"}, callNames(turn)} {
			if got, want := b.CountCalls(names), len(turn.ServerCalls(names)); got != want {
				t.Fatalf("CountCalls(%q) = %d, the turn has %d", names, got, want)
			}
		}
		if b.Finish() != turn.Finish {
			t.Fatalf("Finish() = %v, the turn's %v", b.Finish(), turn.Finish)
		}
	}
	// Provider items rebuilt from deltas must be valid JSON objects, since
	// followups replay them verbatim (docs/architecture.md).
	if err := b.Turn().CheckItems(); err != nil {
		t.Fatalf("turn items: %v", err)
	}
}

// callNames lists the names of t's calls.
func callNames(t *Turn) []string {
	var names []string
	for _, c := range t.ToolCalls {
		names = append(names, c.Name)
	}
	return names
}

func FuzzStreamReaderChat(f *testing.F) {
	seedStreams(f, "chat", Chat)
	f.Fuzz(func(t *testing.T, data []byte, split uint16) { fuzzStreamReader(t, Chat, data, split) })
}

func FuzzStreamReaderResponses(f *testing.F) {
	seedStreams(f, "responses", Responses)
	f.Fuzz(func(t *testing.T, data []byte, split uint16) { fuzzStreamReader(t, Responses, data, split) })
}

func FuzzStreamReaderMessages(f *testing.F) {
	seedStreams(f, "messages", Messages)
	f.Fuzz(func(t *testing.T, data []byte, split uint16) { fuzzStreamReader(t, Messages, data, split) })
}

// FuzzParseResponse checks that parsing never panics and that whatever
// parses re-renders to valid JSON that parses to the same text and calls.
func FuzzParseResponse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "responses", "*.body.json"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(sampleProtocol(f, filepath.Base(file))), data)
	}
	for _, turn := range canonicalTurns() {
		for _, p := range allProtocols {
			f.Add(uint8(p), RenderJSON(p, turn))
		}
	}
	f.Add(uint8(Chat), []byte(`{"choices":[{"message":{"content":"\ud800"}}]}`))
	f.Fuzz(func(t *testing.T, proto uint8, body []byte) {
		p := Protocol(proto % 4)
		turn, err := ParseResponse(p, body)
		if err != nil {
			return
		}
		out := RenderJSON(p, turn)
		if !json.Valid(out) {
			t.Fatalf("rendered invalid JSON: %s", out)
		}
		again, err := ParseResponse(p, out)
		if err != nil {
			t.Fatalf("re-parse: %v\n%s", err, out)
		}
		if utf8.ValidString(turn.Text) && !strings.ContainsAny(turn.Text, "\u2028\u2029") && again.Text != turn.Text {
			t.Fatalf("text %q became %q", turn.Text, again.Text)
		}
		if len(again.ToolCalls) != len(turn.ToolCalls) {
			t.Fatalf("tool calls %d became %d", len(turn.ToolCalls), len(again.ToolCalls))
		}
		// Provider items are valid, survive rendering, and a followup that
		// replays them is valid JSON (docs/architecture.md).
		if err := turn.CheckItems(); err != nil {
			t.Fatalf("items: %v", err)
		}
		if rawCount(again) != rawCount(turn) {
			t.Fatalf("raw items %d became %d\n%s", rawCount(turn), rawCount(again), out)
		}
		req := map[Protocol]string{Chat: `{"messages":[{"role":"user","content":"x"}]}`,
			Responses: `{"input":[]}`, Messages: `{"messages":[{"role":"user","content":"x"}]}`}[p]
		var results []ToolResult
		for _, c := range turn.ToolCalls {
			results = append(results, ToolResult{CallID: c.ID, Name: c.Name, Output: "ok"})
		}
		if fu, err := BuildFollowup(p, []byte(req), turn, results, "go on"); err != nil {
			if !errors.Is(err, ErrFollowup) {
				t.Fatalf("followup: %v", err)
			}
		} else if !json.Valid(fu) {
			t.Fatalf("followup is not JSON:\n%s", fu)
		}
	})
}

// rawCount counts a turn's ItemRaw entries.
func rawCount(t *Turn) int {
	n := 0
	for _, it := range t.Items {
		if it.Kind == ItemRaw {
			n++
		}
	}
	return n
}

// BenchmarkStreamReader measures SSE reader throughput on a long stream fed
// in 4 KiB chunks, as an upstream body arrives.
func BenchmarkStreamReader(b *testing.B) {
	turn := &Turn{ID: "bench", Model: "m", Text: strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000),
		ToolCalls: []ToolCall{{ID: "c", Name: "shell", Arguments: `{"cmd":"` + strings.Repeat("x", 4000) + `"}`}},
		Usage:     Usage{100, 200}}
	for _, p := range allProtocols {
		data := RenderSSE(p, turn, RenderOptions{ChunkBytes: 16, ChatUsage: true})
		// Chunks as a proxy reads them: 4 KB, and 64 KB (hundreds of
		// small events each).
		for _, chunk := range []int{4 << 10, 64 << 10} {
			b.Run(fmt.Sprintf("%v/%dKB", p, chunk>>10), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				b.ReportAllocs()
				for b.Loop() {
					r := NewStreamReader(p)
					var tb TurnBuilder
					for off := 0; off < len(data); off += chunk {
						evs, err := r.Feed(data[off:min(off+chunk, len(data))])
						if err != nil {
							b.Fatal(err)
						}
						for _, ev := range evs {
							tb.Add(ev)
						}
					}
					if _, err := r.Close(); err != nil {
						b.Fatal(err)
					}
					if tb.Turn().Text != turn.Text {
						b.Fatal("text mismatch")
					}
				}
			})
		}
	}
}

// BenchmarkStreamReaderShortAnswer reads a short Messages answer (7
// events, 868 bytes) that arrives in one chunk, as most answers to a
// quick request do: a fresh reader per answer, so its first allocations
// count. Run it under wazero too (docs/performance.md).
func BenchmarkStreamReaderShortAnswer(b *testing.B) {
	data, err := os.ReadFile("testdata/responses/messages_text.sse")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		r := NewStreamReader(Messages)
		evs, err := r.Feed(data)
		if err != nil || len(evs) != 7 {
			b.Fatalf("%d events, %v", len(evs), err)
		}
		if _, err := r.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderSSE measures rendering of the same long turn.
func BenchmarkRenderSSE(b *testing.B) {
	turn := &Turn{Text: strings.Repeat("The quick brown fox jumps over the lazy dog. ", 2000)}
	for _, p := range allProtocols {
		b.Run(p.String(), func(b *testing.B) {
			b.ReportAllocs()
			var n int
			for b.Loop() {
				n = len(RenderSSE(p, turn, RenderOptions{ChunkBytes: 16}))
			}
			b.SetBytes(int64(n))
		})
	}
}

// FuzzMessagesTextDelta: the shortcut for Messages' text deltas classifies
// every event exactly as the general path does, or leaves it to it.
func FuzzMessagesTextDelta(f *testing.F) {
	for _, d := range []string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
		`{"type":"content_block_delta","index":12,"delta":{"type":"text_delta","text":"a\nb \"q\" \u00e9 \ud83d\ude00 \\"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":""}}`,
		`{"type":"content_block_delta","index":01,"delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"content_block_delta","index":1234567890,"delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}} `,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x\q"}}`,
		"{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"x\ty\"}}",
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"},"extra":1}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{"}}`,
		`{"type":"content_block_delta", "index":0,"delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"content_block_delta","index":-1,"delta":{"type":"text_delta","text":"x"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}`,
	} {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fast := Event{Name: "content_block_delta", Data: data, Index: -1}
		var s1 classifyState
		s1.classify(Messages, &fast)
		general := Event{Name: "content_block_delta", Data: data, Index: -1}
		var s2 classifyState
		s2.general(Messages, &general)
		if !reflect.DeepEqual(fast, general) {
			t.Fatalf("%q:\nshortcut %+v\ngeneral  %+v", data, fast, general)
		}
	})
}

// BenchmarkClassifyTextDelta: classifying a long answer's text deltas by
// the shortcut and by the general path (validate, then gjson lookups).
func BenchmarkClassifyTextDelta(b *testing.B) {
	data := []byte(`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"func main() {\n\tfmt.Println(\"hi\")\n}"}}`)
	for _, path := range []string{"shortcut", "general"} {
		b.Run(path, func(b *testing.B) {
			var s classifyState
			for b.Loop() {
				ev := Event{Name: "content_block_delta", Data: data, Index: -1}
				if path == "shortcut" {
					s.classify(Messages, &ev)
				} else {
					s.general(Messages, &ev)
				}
				if ev.Text == "" {
					b.Fatal("no text")
				}
			}
		})
	}
}

// BenchmarkClassifyThinkingDelta: a thinking block's delta by the
// fixed-layout reading (messagesFixed) and by the general path.
func BenchmarkClassifyThinkingDelta(b *testing.B) {
	data := []byte(`{"type":"content_block_delta","index":1,"delta":{"type":"thinking_delta","thinking":"The user wants the failing tests: read the build log first, then grep it for FAIL lines and look at each stack trace."}}`)
	for _, path := range []string{"fixed", "general"} {
		b.Run(path, func(b *testing.B) {
			var s classifyState
			for b.Loop() {
				ev := Event{Name: "content_block_delta", Data: data, Index: -1}
				if path == "fixed" {
					s.classify(Messages, &ev)
				} else {
					s.general(Messages, &ev)
				}
			}
		})
	}
}
