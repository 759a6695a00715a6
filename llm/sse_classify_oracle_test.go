package llm

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// chatByGet is classifyState.chat as it was, one gjson Get per field:
// the oracle of FuzzChatClassify.
func (s *classifyState) chatByGet(root gjson.Result, ev *Event) {
	ev.Type = root.Get("object").String()
	if e := root.Get("error"); e.Exists() {
		ev.Kind = KindError
		ev.ErrorMessage = errorText(e)
		return
	}
	if !s.started {
		s.started = true
		ev.Kind |= KindStart
		ev.ID = root.Get("id").String()
		ev.Model = root.Get("model").String()
	}
	for _, choice := range root.Get("choices").Array() {
		if choice.Get("index").Int() != 0 {
			continue // only the first choice is canonical (n>1 is not supported)
		}
		ev.Index = 0
		delta := choice.Get("delta")
		if c := delta.Get("content"); c.Type == gjson.String && c.Str != "" {
			ev.Kind |= KindTextDelta
			ev.Text = c.Str
		}
		for _, tc := range delta.Get("tool_calls").Array() {
			cd := CallDelta{Index: int(tc.Get("index").Int()), ID: tc.Get("id").String()}
			fn := tc.Get("function")
			cd.Name = fn.Get("name").String()
			cd.Arguments = fn.Get("arguments").String()
			if cd.ID != "" || cd.Name != "" {
				ev.Kind |= KindToolCallStart
			}
			if cd.Arguments != "" {
				ev.Kind |= KindToolCallArgs
			}
			ev.Calls = append(ev.Calls, cd)
		}
		if extra := chatExtraFields(delta); extra != "" {
			ev.PartKind, ev.Part = PartFields, extra
		}
		if fr := choice.Get("finish_reason"); fr.Type == gjson.String && fr.Str != "" {
			ev.Kind |= KindFinish
			ev.Finish = Finish{Reason: classifyFinish(Chat, fr.Str), Raw: fr.Str}
		}
		break
	}
	if u := root.Get("usage"); u.IsObject() {
		s.setUsage(ev, intOr(u.Get("prompt_tokens"), -1), intOr(u.Get("completion_tokens"), -1))
	}
}

// FuzzChatClassify: reading a Chat chunk's members in one pass classifies
// it exactly as a Get per field did, for any event data.
func FuzzChatClassify(f *testing.F) {
	for _, d := range savedEventData(f, "chat_*.sse") {
		f.Add(d, false)
		f.Add(d, true)
	}
	for _, d := range []string{`{"choices":{"index":0,"delta":{"content":"x"}}}`, `{"choices":"x"}`, `{"choices":null}`,
		`{"object":"a","object":"b","choices":[{"index":1},{"index":0,"delta":{"content":"y","content":"z"},"finish_reason":"stop"}]}`,
		`{"error":{"message":"m"}}`, `{"obj\u0065ct":"e","usage":{"prompt_tokens":3}}`, `{"choices":[{"delta":"s","index":0}]}`} {
		f.Add([]byte(d), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, started bool) {
		if !gjson.ValidBytes(data) {
			return
		}
		root := gjson.ParseBytes(data)
		if !root.IsObject() {
			return
		}
		a, b := classifyState{started: started}, classifyState{started: started}
		var got, want Event
		a.chat(root, &got)
		b.chatByGet(root, &want)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(a, b) {
			t.Fatalf("%s:\n got %+v\nwant %+v", data, got, want)
		}
	})
}

// savedEventData returns the data lines of the saved streams matching
// glob (testdata/responses).
func savedEventData(f *testing.F, glob string) [][]byte {
	files, _ := filepath.Glob(filepath.Join("testdata", "responses", glob))
	var out [][]byte
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				out = append(out, []byte(d))
			}
		}
	}
	return out
}

// fuzzFastPath checks a classifier fast path against general: whenever
// fast takes an event, it classifies it exactly as general does from
// state, and it leaves an event it refuses alone; and it takes at least
// three events of the saved streams matching glob.
func fuzzFastPath(f *testing.F, p Protocol, glob string, state classifyState, fast func(*Event) bool, seeds []string) {
	taken := 0
	for _, d := range savedEventData(f, glob) {
		f.Add(d)
		if ev := (Event{Data: d, Index: -1}); fast(&ev) {
			taken++
		}
	}
	if taken < 3 {
		f.Fatalf("the fast path took %d events of the saved streams", taken)
	}
	for _, d := range seeds {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got := Event{Data: data, Index: -1}
		if !fast(&got) {
			if !reflect.DeepEqual(got, Event{Data: data, Index: -1}) {
				t.Fatalf("a refused event was changed: %+v", got)
			}
			return
		}
		st := state
		want := Event{Data: data, Index: -1}
		st.general(p, &want)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(st, state) {
			t.Fatalf("%s:\n fast %+v\n slow %+v", data, got, want)
		}
	})
}

// FuzzChatTextDelta: chatTextDelta (chunks after the first) against
// general.
func FuzzChatTextDelta(f *testing.F) {
	fuzzFastPath(f, Chat, "chat_*.sse", classifyState{started: true}, chatTextDelta, []string{
		`{"object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"a\u00e9\n"}}]}`,
		`{"object":"x","choices":[{"index":0,"delta":{"content":""}}],"usage":null}`,
		`{"object":"x","object":"y","choices":[{"delta":{"content":"d"}}]}`,
		`{"object":"x","choices":[{"index":0,"delta":{"content":"d"}},{"index":1}]}`,
		`{"object":"x","choices":[{"index":00,"delta":{"content":"d"}}]}`,
		`{"object":"x","choices":[{"index":0,"delta":{"content":"d","role":"assistant"}}]}`,
		`{"object":"x","choices":[{"index":0,"delta":{"content":"d"},"finish_reason":"stop"}]}`,
		`{"object":"x","error":{"message":"m"},"choices":[{"index":0,"delta":{"content":"d"}}]}`,
		` {"object" : "x" , "choices" : [ { "delta" : { "content" : "d" } } ] } `,
		"{\"object\":\"x\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\xfe\"}}]}",
		`{"object":"x","choices":[{"index":0,"delta":{"content":"\ud800"}}]}`,
	})
}

// FuzzResponsesTextDelta: responsesTextDelta against general.
func FuzzResponsesTextDelta(f *testing.F) {
	fuzzFastPath(f, Responses, "responses_*.sse", classifyState{}, responsesTextDelta, []string{
		`{"type":"response.output_text.delta","output_index":12,"delta":"a\u00e9\n"}`,
		`{"type":"response.output_text.delta","delta":""}`,
		`{"type":"response.output_text.delta","type":"x","delta":"d"}`,
		`{"type":"response.output_text.delta","output_index":01,"delta":"d"}`,
		`{"type":"response.output_text.delta","output_index":1.5,"delta":"d"}`,
		`{"type":"response.output_text.delta","output_index":-1,"delta":"d"}`,
		`{"type":"response.output_text.delta","output_index":99999999999,"delta":"d"}`,
		`{"type":"response.output_text.delt\u0061","delta":"d"}`,
		`{"type":"response.output_text.delta","delta":7}`,
		` { "delta" : "d" , "type" : "response.output_text.delta" , "logprobs" : [ {"x":1} ] } `,
		`{"type":"response.function_call_arguments.delta","sequence_number":10,"item_id":"fc_1","output_index":1,"delta":"{\"a\":"}`,
		`{"type":"response.function_call_arguments.delta","item_id":"fc_1","delta":"x"}`,
		`{"type":"response.function_call_arguments.delta","output_index":2,"delta":""}`,
		`{"type":"response.function_call_arguments.delta","output_index":2,"delta":"x","name":"clock"}`,
		`{"type":"response.function_call_arguments.done","output_index":2,"delta":"x"}`,
	})
}

// FuzzMessagesFixed: messagesFixed against general, with text blocks open
// so that a block's end may be a text's end (block starts aside).
func FuzzMessagesFixed(f *testing.F) {
	state := classifyState{textBlocks: []int{0, 2}}
	fast := func(ev *Event) bool {
		if bytes.HasPrefix(ev.Data, []byte(blockStartHead)) {
			return false // records a text block: FuzzMessagesBlockStart's
		}
		if bytes.HasPrefix(ev.Data, []byte(messageStartHead)) || bytes.HasPrefix(ev.Data, []byte(messageDeltaHead)) {
			return false // records the start and usage: FuzzMessagesEnvelope's
		}
		s := classifyState{textBlocks: []int{0, 2}}
		return s.messagesFixed(ev)
	}
	fuzzFastPath(f, Messages, "messages_*.sse", state, fast, []string{
		`{"type":"message_stop"}`, `{"type":"message_stop"} `, `{"type":"ping"}`, `{"type": "ping"}`,
		`{"type":"content_block_stop","index":0}`, `{"type":"content_block_stop","index":1}`,
		`{"type":"content_block_stop","index":2}`, `{"type":"content_block_stop","index":02}`,
		`{"type":"content_block_stop","index":0,"x":1}`, `{"type":"content_block_stop","index":1234567890}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"a\":"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"x","y":1}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":7}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"thinking_delta","thinking":"hm \u00e9"}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"signature_delta","signature":"EqQ="}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"thinking_delta","thinking":"a","type":"b"}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"th\u0069nking_delta","thinking":"a"}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"text_delta","text":"a"}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"x"} }`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"x"}}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"x",}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":"x","n":[1,{"d":[[[]]]}]}}`,
		`{"type":"content_block_delta","index":3,"delta":}`, `{"type":"content_block_delta","index":3,"delta":{}}`,
		`{"type":"content_block_delta","index":3,"delta":{"type":""}}`, `{"type":"content_block_delta","index":3,"delta":{"type":"`,
	})
}

// FuzzMessagesBlockStart: messagesFixed on content_block_start against
// general, the text blocks it records included.
func FuzzMessagesBlockStart(f *testing.F) {
	taken := 0
	for _, d := range savedEventData(f, "messages_*.sse") {
		f.Add(d)
		s := classifyState{}
		if ev := (Event{Data: d, Index: -1}); bytes.HasPrefix(d, []byte(blockStartHead)) && s.messagesFixed(&ev) {
			taken++
		}
	}
	if taken < 3 {
		f.Fatalf("the fast path took %d block starts of the saved streams", taken)
	}
	for _, d := range []string{
		`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`{"type":"content_block_start","index":2,"content_block":{"type":"text","text":"hi \u00e9"}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"a","x":1}}`,
		`{"type":"content_block_start","index":1,"content_block":{"type":"text","text":7}}`,
		`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_1","name":"Bash","input":{}}}`,
		`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"t\u0031","name":"cl\u006fck","input":{}}}`,
		`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"t","name":"n","input":{"a":1}}}`,
		`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":1,"name":"n","input":{}}}`,
		`{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","name":"n","id":"t","input":{}}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"redacted_thinking","data":"x"}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking"} }`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"thinking",}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"th\u0069nking"}}`,
		`{"type":"content_block_start","index":0,"content_block":}`, `{"type":"content_block_start","index":0,"content_block":{}}`,
		`{"type":"content_block_start","index":01,"content_block":{"type":"text","text":""}}`,
	} {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fastState := classifyState{textBlocks: []int{2}}
		got := Event{Data: data, Index: -1}
		if !fastState.messagesFixed(&got) {
			if !reflect.DeepEqual(got, Event{Data: data, Index: -1}) || !reflect.DeepEqual(fastState, classifyState{textBlocks: []int{2}}) {
				t.Fatalf("a refused event was changed: %+v %+v", got, fastState)
			}
			return
		}
		slowState := classifyState{textBlocks: []int{2}}
		want := Event{Data: data, Index: -1}
		slowState.general(Messages, &want)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(fastState, slowState) {
			t.Fatalf("%s:\n fast %+v %+v\n slow %+v %+v", data, got, fastState, want, slowState)
		}
	})
}

// FuzzMessagesEnvelope: messagesFixed on message_start and message_delta
// against general, from a stream not yet started and from one that has
// started and counted usage; the state they leave included.
func FuzzMessagesEnvelope(f *testing.F) {
	taken := 0
	for _, d := range savedEventData(f, "messages_*.sse") {
		f.Add(d)
		s := classifyState{}
		if ev := (Event{Data: d, Index: -1}); (bytes.HasPrefix(d, []byte(messageStartHead)) ||
			bytes.HasPrefix(d, []byte(messageDeltaHead))) && s.messagesFixed(&ev) {
			taken++
		}
	}
	if taken < 6 {
		f.Fatalf("the fast path took %d message starts and deltas of the saved streams", taken)
	}
	for _, d := range []string{
		`{"type":"message_start","message":{"id":"m","model":"x","usage":{"input_tokens":25,"output_tokens":1}}}`,
		`{"type":"message_start","message":{"id":"m\u0031","model":"x\n","usage":{"output_tokens":1}}}`,
		`{"type":"message_start","message":{"id":1,"model":"x"}}`,
		`{"type":"message_start","message":{"id":null,"model":"x"}}`,
		`{"type":"message_start","message":{"id":"a","id":"b"}}`,
		`{"type":"message_start","message":{"\u0069d":"a"}}`,
		`{"type":"message_start","message":{},"index":3}`,
		`{"type":"message_start","message":{},"index":"3"}`,
		`{"type":"message_start","message":{},"index":-3}`,
		`{"type":"message_start","message":{},"index":1.5}`,
		`{"type":"message_start","message":{"usage":{"input_tokens":1e3}}}`,
		`{"type":"message_start","message":{"usage":{"input_tokens":9999999999}}}`,
		`{"type":"message_start","message":{"usage":{"input_tokens":null,"output_tokens":"4"}}}`,
		`{"type":"message_start","message":{"usage":[1]}}`,
		`{"type":"message_start","message":{"usage":{}}} `,
		`{"type":"message_start","message":{"usage":{"input_tokens":01}}}`,
		`{"type":"message_start","message":{"model":"m"},"message":{"model":"n"}}`,
		`{"type":"message_start","message":{"model":"m"},"type":"x"}`,
		`{"type":"message_start","message":{"model":"m",}}`,
		`{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}`,
		`{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null}}`,
		`{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":15,"input_tokens":3}}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool\u005fuse"}}`,
		`{"type":"message_delta","delta":{"stop_reason":7}}`,
		`{"type":"message_delta","delta":[{"stop_reason":"x"}]}`,
		`{"type":"message_delta","delta":"end_turn"}`,
		`{"type":"message_delta","delta":{"stop_reason":"a","stop_reason":"b"}}`,
		`{"type":"message_delta","delta":{"stop_reason":"a"},"delta":{"stop_reason":"b"}}`,
		`{"type":"message_delta","usage":{"output_tokens":15},"usage":{"output_tokens":16}}`,
		`{"type":"message_delta","usage":{"output_tokens":-15}}`,
		`{"type":"message_delta","usage":{"output_tokens":15}`,
		`{"type":"message_delta","usage":{"output_tokens":15}}}`,
		`{"type":"message_delta"}`,
	} {
		f.Add([]byte(d))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, state := range []classifyState{{}, {started: true, usage: Usage{InputTokens: 7, OutputTokens: 9}}} {
			fastState := state
			got := Event{Data: data, Index: -1}
			if !fastState.messagesFixed(&got) {
				if !reflect.DeepEqual(got, Event{Data: data, Index: -1}) || !reflect.DeepEqual(fastState, state) {
					t.Fatalf("a refused event was changed: %+v %+v", got, fastState)
				}
				continue
			}
			slowState := state
			want := Event{Data: data, Index: -1}
			slowState.general(Messages, &want)
			if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(fastState, slowState) {
				t.Fatalf("%s:\n fast %+v %+v\n slow %+v %+v", data, got, fastState, want, slowState)
			}
		}
	})
}
