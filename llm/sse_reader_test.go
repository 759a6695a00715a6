package llm

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// readAll feeds data in the given chunks and closes the reader.
func readAll(t testing.TB, p Protocol, chunks ...[]byte) ([]Event, error) {
	r := NewStreamReader(p)
	var evs []Event
	for _, c := range chunks {
		got, err := r.Feed(c)
		evs = append(evs, got...)
		if err != nil {
			return evs, err
		}
	}
	got, err := r.Close()
	return append(evs, got...), err
}

func buildTurn(evs []Event) (*Turn, *TurnBuilder) {
	var b TurnBuilder
	for _, ev := range evs {
		b.Add(ev)
	}
	return b.Turn(), &b
}

func joinRaw(evs []Event) []byte {
	var out []byte
	for _, ev := range evs {
		out = append(out, ev.Raw...)
	}
	return out
}

func countKind(evs []Event, k EventKind) int {
	n := 0
	for _, ev := range evs {
		if ev.Kind.Has(k) {
			n++
		}
	}
	return n
}

func TestStreamReaderSamples(t *testing.T) {
	for name, s := range samples(t, "*.sse") {
		t.Run(name, func(t *testing.T) {
			p := sampleProtocol(t, name)
			evs, err := readAll(t, p, s[0])
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(joinRaw(evs), s[0]) {
				t.Fatal("concatenated Raw differs from the input")
			}
			got, b := buildTurn(evs)
			if want := decodeTurn(t, s[1]); !reflect.DeepEqual(got, want) {
				t.Errorf("got  %+v\nwant %+v", got, want)
			}
			if !b.Terminated() {
				t.Error("terminal event not recognised")
			}
			if countKind(evs, KindStart) != 1 || countKind(evs, KindTerminal) != 1 {
				t.Errorf("want one start and one terminal: %v", evs)
			}
			if last := evs[len(evs)-1]; !last.Kind.Has(KindTerminal) {
				t.Errorf("last event %v is not terminal", last)
			}
		})
	}
}

// TestStreamReaderEverySplit feeds every sample split at every byte offset,
// and byte by byte, and expects exactly the events of a single feed.
func TestStreamReaderEverySplit(t *testing.T) {
	for name, s := range samples(t, "*.sse") {
		p := sampleProtocol(t, name)
		data := s[0]
		want, err := readAll(t, p, data)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i <= len(data); i++ {
			got, err := readAll(t, p, data[:i], data[i:])
			if err != nil {
				t.Fatalf("%s split %d: %v", name, i, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("%s split at %d differs:\n got  %v\n want %v", name, i, got, want)
			}
		}
		bytewise := make([][]byte, len(data))
		for i := range data {
			bytewise[i] = data[i : i+1]
		}
		got, err := readAll(t, p, bytewise...)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s byte by byte differs (%v)", name, err)
		}
	}
}

func TestStreamReaderLineEndings(t *testing.T) {
	s := samples(t, "chat_text.sse")["chat_text.sse"]
	want, _ := buildTurn(mustRead(t, Chat, s[0]))
	for name, eol := range map[string]string{"crlf": "\r\n", "cr": "\r"} {
		data := bytes.ReplaceAll(s[0], []byte("\n"), []byte(eol))
		evs := mustRead(t, Chat, data)
		if got, _ := buildTurn(evs); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v want %+v", name, got, want)
		}
		if !bytes.Equal(joinRaw(evs), data) {
			t.Errorf("%s: Raw does not reproduce the input", name)
		}
	}
}

func mustRead(t testing.TB, p Protocol, data []byte) []Event {
	t.Helper()
	evs, err := readAll(t, p, data)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestStreamReaderFields(t *testing.T) {
	data := "\n\n: comment only\n\n" +
		"id: 7\nretry: 10\nevent: message_start\ndata: {\"type\":\"message_start\",\ndata:\"message\":{\"id\":\"m1\",\"model\":\"c\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"data\n\n" +
		"event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"max_tokens\"},\"usage\":{\"output_tokens\":9}}\n\n"
	evs := mustRead(t, Messages, []byte(data))
	if len(evs) != 5 {
		t.Fatalf("want 5 events, got %d: %v", len(evs), evs)
	}
	if evs[0].Kind != KindOther || string(evs[0].Raw) != "\n\n: comment only\n\n" {
		t.Errorf("comment block: %v %q", evs[0], evs[0].Raw)
	}
	start := evs[1]
	if !start.Kind.Has(KindStart|KindUsage) || start.ID != "m1" || start.Model != "c" || start.Name != "message_start" {
		t.Errorf("start: %v", start)
	}
	if string(start.Data) != "{\"type\":\"message_start\",\n\"message\":{\"id\":\"m1\",\"model\":\"c\",\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}" {
		t.Errorf("multi-line data joined wrongly: %q", start.Data)
	}
	if evs[2].Kind != KindOther || evs[2].Type != "ping" {
		t.Errorf("ping: %v", evs[2])
	}
	if evs[3].Kind != KindOther || len(evs[3].Data) != 0 {
		t.Errorf("a bare 'data' field has empty data: %v", evs[3])
	}
	// message_delta lacks input_tokens: the cumulative usage keeps message_start's.
	if d := evs[4]; !d.Kind.Has(KindFinish|KindUsage) || d.Finish != (Finish{FinishLength, "max_tokens"}) || d.Usage != (Usage{3, 9}) {
		t.Errorf("message_delta: %v", d)
	}
}

func TestStreamReaderClose(t *testing.T) {
	evs, err := readAll(t, Chat, []byte("data: {\"choices\":[]}\n\ndata: [DONE]"))
	if !errors.Is(err, ErrIncompleteEvent) {
		t.Fatalf("want ErrIncompleteEvent, got %v", err)
	}
	if len(evs) != 2 || !evs[1].Kind.Has(KindTerminal) || string(evs[1].Raw) != "data: [DONE]" {
		t.Fatalf("unterminated final event should still be parsed: %v", evs)
	}
	evs, err = readAll(t, Chat, []byte("data: [DONE]\n\n\n"))
	if err != nil || len(evs) != 2 || string(evs[1].Raw) != "\n" || evs[1].Kind != KindOther {
		t.Fatalf("trailing blank line: %v %v", evs, err)
	}
	evs, err = readAll(t, Chat, []byte("data: [DONE]\r"))
	if !errors.Is(err, ErrIncompleteEvent) || len(evs) != 1 || !evs[0].Kind.Has(KindTerminal) {
		t.Fatalf("final CR ends the line at EOF: %v %v", evs, err)
	}
	r := NewStreamReader(Chat)
	if _, err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Feed([]byte("x")); err == nil {
		t.Error("Feed after Close must fail")
	}
}

func TestStreamReaderTooLarge(t *testing.T) {
	r := NewStreamReader(Chat)
	big := bytes.Repeat([]byte("a"), 1<<20)
	var err error
	for i := 0; i <= MaxEventBytes>>20 && err == nil; i++ {
		_, err = r.Feed(big)
	}
	if !errors.Is(err, ErrEventTooLarge) {
		t.Fatalf("want ErrEventTooLarge, got %v", err)
	}
	if _, err := r.Feed([]byte("\n\n")); !errors.Is(err, ErrEventTooLarge) {
		t.Error("the reader must stay failed")
	}
}

func TestStreamReaderErrorsAndJunk(t *testing.T) {
	cases := []struct {
		p    Protocol
		data string
		kind EventKind
		msg  string
	}{
		{Chat, "data: {\"error\":{\"message\":\"rate limited\",\"type\":\"rate_limit\"}}\n\n", KindError, "rate limited"},
		{Responses, "event: error\ndata: {\"type\":\"error\",\"code\":\"server_error\",\"message\":\"oops\"}\n\n", KindError, "oops"},
		{Messages, "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n", KindError, "Overloaded"},
		{Chat, "data: {not json\n\n", KindOther, ""},
		{Messages, "data: [1,2]\n\n", KindOther, ""},
	}
	for _, c := range cases {
		evs := mustRead(t, c.p, []byte(c.data))
		if len(evs) != 1 || evs[0].Kind != c.kind || evs[0].ErrorMessage != c.msg {
			t.Errorf("%s %q: got %v (%q)", c.p, c.data, evs, evs[0].ErrorMessage)
		}
	}
	var b TurnBuilder
	b.Add(mustRead(t, Messages, []byte(cases[2].data))[0])
	if b.ErrorMessage() != "Overloaded" {
		t.Errorf("builder error message %q", b.ErrorMessage())
	}
}

func TestStreamReaderChatMultiMeaning(t *testing.T) {
	// One chunk: start, text, two tool calls (one with its whole arguments), finish and usage.
	data := `data: {"id":"c1","model":"m","choices":[{"index":1,"delta":{"content":"other choice"}},{"index":0,"delta":{"role":"assistant","content":"hi",` +
		`"tool_calls":[{"index":0,"id":"a","function":{"name":"f","arguments":"{}"}},{"index":1,"id":"b","function":{"name":"g"}}]},"finish_reason":"tool_calls"}],` +
		`"usage":{"prompt_tokens":1,"completion_tokens":2}}` + "\n\n"
	evs := mustRead(t, Chat, []byte(data))
	want := KindStart | KindTextDelta | KindToolCallStart | KindToolCallArgs | KindFinish | KindUsage
	if len(evs) != 1 || evs[0].Kind != want {
		t.Fatalf("kinds %v, want %v", evs[0].Kind, want)
	}
	got, _ := buildTurn(evs)
	exp := &Turn{ID: "c1", Model: "m", Text: "hi", ToolCalls: []ToolCall{{"a", "f", "{}"}, {"b", "g", ""}},
		Finish: Finish{FinishToolCalls, "tool_calls"}, Usage: Usage{1, 2}}
	if !reflect.DeepEqual(got, exp) {
		t.Errorf("got %+v\nwant %+v", got, exp)
	}
	if s := want.String(); s != "start|text|tool_start|tool_args|finish|usage" || KindOther.String() != "other" {
		t.Errorf("kind string %q", s)
	}
}

func TestEventHelpers(t *testing.T) {
	evs := mustRead(t, Chat, samples(t, "chat_tools.sse")["chat_tools.sse"][0])
	var starts, holds []int
	for i, ev := range evs {
		if ev.StartsToolCall([]string{"read_file"}) {
			starts = append(starts, i)
		}
		if ev.MustHold() {
			holds = append(holds, i)
		}
	}
	// Event 5 starts read_file; 7 is the finish, 8 the usage chunk, 9 [DONE].
	if !reflect.DeepEqual(starts, []int{5}) || !reflect.DeepEqual(holds, []int{7, 8, 9}) {
		t.Errorf("starts %v holds %v", starts, holds)
	}
	if evs[2].StartsToolCall(nil) || evs[1].MustHold() {
		t.Error("no server tools means no call is a server call; text is not held")
	}
}

func TestStreamReaderLongCROnlyInput(t *testing.T) {
	// CR-only line endings in one large chunk must parse in linear time.
	one := []byte("data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\r\r")
	data := bytes.Repeat(one, 20000)
	evs := mustRead(t, Chat, data)
	if len(evs) != 20000 {
		t.Fatalf("%d events", len(evs))
	}
	if got, _ := buildTurn(evs); len(got.Text) != 20000 {
		t.Errorf("text length %d", len(got.Text))
	}
}

// TestEventsOutliveLaterFeeds: an event Feed returned keeps its bytes and
// strings however many events and chunks follow (the reader reuses its
// result slice and packs events into shared blocks).
func TestEventsOutliveLaterFeeds(t *testing.T) {
	for _, name := range []string{"messages_tool.sse", "messages_think.sse", "responses_tool.sse", "chat_tools.sse"} {
		data, err := os.ReadFile(filepath.Join("testdata", "responses", name))
		if err != nil {
			t.Fatal(err)
		}
		p := Messages
		switch {
		case strings.HasPrefix(name, "responses"):
			p = Responses
		case strings.HasPrefix(name, "chat"):
			p = Chat
		}
		type kept struct {
			ev                      Event
			raw, data, text, evName string
		}
		var held []kept
		r := NewStreamReader(p)
		for i := 0; i < len(data); i += 7 { // small chunks: many Feeds
			evs, err := r.Feed(data[i:min(i+7, len(data))])
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range evs {
				held = append(held, kept{ev, string(ev.Raw), string(ev.Data), ev.Text, ev.Name})
			}
		}
		// Many more events after: each must leave the held ones alone.
		for range 200 {
			if _, err := r.Feed([]byte("event: ping\ndata: {\"type\": \"ping\"}\n\n")); err != nil {
				t.Fatal(err)
			}
		}
		if len(held) < 3 {
			t.Fatalf("%s: %d events", name, len(held))
		}
		for i, k := range held {
			if string(k.ev.Raw) != k.raw || string(k.ev.Data) != k.data || k.ev.Text != k.text || k.ev.Name != k.evName {
				t.Fatalf("%s: event %d changed after later feeds", name, i)
			}
		}
	}
}

// TestEventNameInterned: a name the protocols send comes back as the same
// string without an allocation; any other name comes back as itself.
func TestEventNameInterned(t *testing.T) {
	known := 0
	for l, names := range eventNames {
		for _, n := range names {
			known++
			b := []byte(n)
			if len(n) != l || eventName(b) != n {
				t.Errorf("eventName(%q) = %q", n, eventName(b))
			}
			if a := testing.AllocsPerRun(10, func() { _ = eventName(b) }); a != 0 {
				t.Errorf("eventName(%q) allocates %v times", n, a)
			}
		}
	}
	if known != 25 {
		t.Errorf("%d known names, want 25", known)
	}
	for _, n := range []string{"", "message_star", "message_startx", "Message_start", strings.Repeat("x", 80)} {
		if got := eventName([]byte(n)); got != n {
			t.Errorf("eventName(%q) = %q", n, got)
		}
	}
}
