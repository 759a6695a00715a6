package llm

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

// followupBodies are the saved SDK requests by protocol plus odd shapes.
func followupBodies(t testing.TB) map[Protocol][][]byte {
	t.Helper()
	out := map[Protocol][][]byte{}
	files, _ := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	if len(files) == 0 {
		t.Fatal("no request fixtures")
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(name)
		switch {
		case strings.HasPrefix(base, "chat_"):
			out[Chat] = append(out[Chat], b)
		case strings.HasPrefix(base, "responses_"):
			out[Responses] = append(out[Responses], b)
		case strings.HasPrefix(base, "messages_"):
			out[Messages] = append(out[Messages], b)
		}
	}
	out[Chat] = append(out[Chat],
		[]byte(`{"model":"m","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"user","content":"hi"}]}`),
		[]byte(`{"messages":[]}`))
	out[Responses] = append(out[Responses],
		[]byte(`{"model":"m","input":"","stream":true}`),
		[]byte(`{"model":"m","input":null}`),
		[]byte(`{"model":"m"}`))
	out[Messages] = append(out[Messages],
		[]byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}],"stream":true}`))
	return out
}

// conversation decodes a followup's message list (Responses: input items).
func conversation(t *testing.T, p Protocol, body []byte) []map[string]any {
	t.Helper()
	var top map[string]any
	if err := json.Unmarshal(body, &top); err != nil {
		t.Fatalf("followup is not JSON: %v\n%s", err, body)
	}
	if s, _ := top["stream"].(bool); s || top["stream"] == nil {
		t.Fatalf("stream is %v, want false", top["stream"])
	}
	if so, ok := top["stream_options"]; ok && so != nil {
		t.Fatalf("stream_options kept on a non-streaming followup: %v", so)
	}
	key := "messages"
	if p == Responses {
		key = "input"
	}
	list, ok := top[key].([]any)
	if !ok {
		t.Fatalf("%s is %T, want a list", key, top[key])
	}
	var out []map[string]any
	for _, m := range list {
		mm, _ := m.(map[string]any)
		out = append(out, mm)
	}
	return out
}

// checkPairing asserts every tool call of the followup is answered and
// every answer follows its call; for Messages roles must alternate after
// the original (user-ending) conversation. Items before from are the
// original's.
func checkPairing(t *testing.T, p Protocol, msgs []map[string]any, from int) {
	t.Helper()
	pending := map[string]bool{}
	switch p {
	case Chat:
		for i, m := range msgs {
			switch m["role"] {
			case "assistant":
				if len(pending) > 0 {
					t.Fatalf("message %d: assistant before tool results %v", i, pending)
				}
				calls, _ := m["tool_calls"].([]any)
				for _, c := range calls {
					id := c.(map[string]any)["id"].(string)
					if id == "" || pending[id] {
						t.Fatalf("message %d: empty or duplicate tool call id %q", i, id)
					}
					pending[id] = true
				}
			case "tool":
				id, _ := m["tool_call_id"].(string)
				if !pending[id] {
					t.Fatalf("message %d: tool result %q answers no pending call", i, id)
				}
				delete(pending, id)
			default:
				if len(pending) > 0 {
					t.Fatalf("message %d (%v): calls %v unanswered", i, m["role"], pending)
				}
			}
		}
	case Responses:
		for i, m := range msgs {
			switch m["type"] {
			case "function_call":
				if i >= from {
					pending[m["call_id"].(string)] = true
				}
			case "function_call_output":
				id, _ := m["call_id"].(string)
				if !pending[id] && i >= from { // the fixtures' own items are not ours to judge
					t.Fatalf("item %d: output %q answers no call", i, id)
				}
				delete(pending, id)
			}
		}
	case Messages:
		prev := ""
		for i, m := range msgs {
			role, _ := m["role"].(string)
			if role == prev {
				t.Fatalf("message %d: role %q twice in a row", i, role)
			}
			prev = role
			blocks, _ := m["content"].([]any)
			if role == "user" {
				for _, b := range blocks {
					bm := b.(map[string]any)
					if bm["type"] == "tool_result" {
						id, _ := bm["tool_use_id"].(string)
						if !pending[id] {
							t.Fatalf("message %d: tool_result %q answers no tool_use of the previous turn", i, id)
						}
						delete(pending, id)
					}
				}
				if len(pending) > 0 {
					t.Fatalf("message %d: tool_use %v unanswered", i, pending)
				}
				// A user message with tool_result blocks must start with them.
				seenText := false
				for _, b := range blocks {
					switch b.(map[string]any)["type"] {
					case "tool_result":
						if seenText {
							t.Fatalf("message %d: tool_result after text", i)
						}
					default:
						seenText = true
					}
				}
				continue
			}
			for _, b := range blocks {
				bm := b.(map[string]any)
				if bm["type"] == "tool_use" {
					if _, ok := bm["input"].(map[string]any); !ok {
						t.Fatalf("message %d: tool_use input %T, want an object", i, bm["input"])
					}
					pending[bm["id"].(string)] = true
				}
			}
		}
	}
	if len(pending) > 0 && p != Messages {
		t.Fatalf("calls left unanswered: %v", pending)
	}
}

// originalKept asserts that every original message and every top-level
// member but stream(_options) and a string input is byte-identical.
func originalKept(t *testing.T, p Protocol, orig, followup []byte, lastMayChange bool) {
	t.Helper()
	var a, b map[string]json.RawMessage
	if err := json.Unmarshal(orig, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(followup, &b); err != nil {
		t.Fatal(err)
	}
	listKey := "messages"
	if p == Responses {
		listKey = "input"
	}
	for k, v := range a {
		switch k {
		case "stream", "stream_options":
			continue
		case listKey:
			var ol, fl []json.RawMessage
			if json.Unmarshal(v, &ol) != nil {
				continue // string or null input
			}
			if err := json.Unmarshal(b[k], &fl); err != nil || len(fl) < len(ol) {
				t.Fatalf("%s shrank or broke: %v", k, err)
			}
			for i := range ol {
				if lastMayChange && i == len(ol)-1 {
					continue
				}
				if string(ol[i]) != string(fl[i]) {
					t.Fatalf("%s[%d] changed:\n%s\n%s", k, i, ol[i], fl[i])
				}
			}
			continue
		}
		if string(b[k]) != string(v) {
			t.Fatalf("member %q changed: %s → %s", k, v, b[k])
		}
	}
}

func TestBuildFollowupToolResults(t *testing.T) {
	turn := &Turn{Text: "Let me check the time.", ToolCalls: []ToolCall{
		{ID: "c1", Name: "clock", Arguments: `{"action":"get","items":[],"taskId":""}`},
		{Name: "clock", Arguments: ""}, // no id: one is generated
	}}
	results := []ToolResult{
		{Name: "clock", Output: `{"ok":true,"nowMs":2}`},
		{CallID: "c1", Name: "clock", Output: `{"ok":true,"nowMs":1}`},
	}
	for p, bodies := range followupBodies(t) {
		for i, body := range bodies {
			t.Run(fmt.Sprintf("%v/%d", p, i), func(t *testing.T) {
				out, err := BuildFollowup(p, body, turn, results, "")
				if err != nil {
					t.Fatal(err)
				}
				if _, err := ParseRequest(p, out); err != nil {
					t.Fatalf("followup does not parse: %v\n%s", err, out)
				}
				originalKept(t, p, body, out, false)
				msgs := conversation(t, p, out)
				checkPairing(t, p, msgs, originalLen(t, p, body))
				s := string(out)
				for _, want := range []string{`"c1"`, `{\"ok\":true,\"nowMs\":1}`, `{\"ok\":true,\"nowMs\":2}`, "Let me check the time."} {
					if !strings.Contains(s, want) {
						t.Errorf("followup lacks %s:\n%s", want, s)
					}
				}
				// The generated id is used for both the call and its result.
				gen := turnCopyIDs(p, body, turn)[1]
				if strings.Count(s, `"`+gen+`"`) != 2 {
					t.Errorf("generated id %s should appear twice (call and result):\n%s", gen, s)
				}
				if turn.ToolCalls[1].ID != "" {
					t.Fatal("BuildFollowup modified the caller's turn")
				}
			})
		}
	}
}

func originalLen(t *testing.T, p Protocol, body []byte) int {
	r, err := ParseRequest(p, body)
	if err != nil {
		t.Fatal(err)
	}
	return len(r.msgs)
}

func turnCopyIDs(p Protocol, body []byte, turn *Turn) []string {
	c := *turn
	c.ToolCalls = append([]ToolCall(nil), turn.ToolCalls...)
	AssignCallIDs(p, body, &c)
	var ids []string
	for _, tc := range c.ToolCalls {
		ids = append(ids, tc.ID)
	}
	return ids
}

func TestBuildFollowupUserText(t *testing.T) {
	const text = "continue \"now\"\n<**not a tag**>"
	for p, bodies := range followupBodies(t) {
		for i, body := range bodies {
			for _, turn := range []*Turn{{Text: "I am done."}, {}} {
				t.Run(fmt.Sprintf("%v/%d/%q", p, i, turn.Text), func(t *testing.T) {
					out, err := BuildFollowup(p, body, turn, nil, text)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := ParseRequest(p, out); err != nil {
						t.Fatalf("followup does not parse: %v\n%s", err, out)
					}
					// Messages: an empty turn's text joins the final user message.
					originalKept(t, p, body, out, p == Messages && turn.Text == "")
					msgs := conversation(t, p, out)
					checkPairing(t, p, msgs, originalLen(t, p, body))
					last := msgs[len(msgs)-1]
					if last["role"] != "user" {
						t.Fatalf("last message role %v, want user", last["role"])
					}
					raw, _ := json.Marshal(last["content"])
					if !strings.Contains(string(raw), `continue \"now\"\n\u003c**not a tag**\u003e`) &&
						!strings.Contains(string(raw), `continue \"now\"\n<**not a tag**>`) {
						t.Fatalf("last user message lacks the text: %s", raw)
					}
					if turn.Text != "" {
						prev := msgs[len(msgs)-2]
						if prev["role"] != "assistant" {
							t.Fatalf("message before the text has role %v, want assistant", prev["role"])
						}
					}
				})
			}
		}
	}
}

func TestBuildFollowupShapes(t *testing.T) {
	turn := &Turn{Text: "hi", ToolCalls: []ToolCall{{ID: "x", Name: "clock", Arguments: `{"a":1}`}}}
	res := []ToolResult{{CallID: "x", Output: `{"ok":true}`}}
	cases := []struct {
		p         Protocol
		body, out string
	}{
		{Chat, `{"messages":[{"role":"user","content":"q"}],"stream":true}`,
			`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":"hi","tool_calls":[{"id":"x","type":"function","function":{"name":"clock","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"x","content":"{\"ok\":true}"}],"stream":false}`},
		{Responses, `{"input":"q"}`,
			`{"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"hi"}]},{"type":"function_call","call_id":"x","name":"clock","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"x","output":"{\"ok\":true}"}],"stream":false}`},
		{Messages, `{"messages":[{"role":"user","content":"q"}]}`,
			`{"messages":[{"role":"user","content":"q"},{"role":"assistant","content":[{"type":"text","text":"hi"},{"type":"tool_use","id":"x","name":"clock","input":{"a":1}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"{\"ok\":true}"}]}],"stream":false}`},
	}
	for _, c := range cases {
		out, err := BuildFollowup(c.p, []byte(c.body), turn, res, "")
		if err != nil {
			t.Fatal(err)
		}
		if string(out) != c.out {
			t.Errorf("%v:\n got %s\nwant %s", c.p, out, c.out)
		}
	}
	// Messages: results and text share one user message, text last.
	out, err := BuildFollowup(Messages, []byte(`{"messages":[{"role":"user","content":"q"}]}`), turn, res, "go on")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"role":"user","content":[{"type":"tool_result","tool_use_id":"x","content":"{\"ok\":true}"},{"type":"text","text":"go on"}]}]`; !strings.Contains(string(out), want) {
		t.Errorf("Messages results+text:\n%s", out)
	}
	// Messages, empty assistant turn: the text joins the final user message.
	out, err = BuildFollowup(Messages, []byte(`{"messages":[{"role":"user","content":"q"}]}`), &Turn{}, nil, "go on")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"messages":[{"role":"user","content":[{"type":"text","text":"q"},{"type":"text","text":"go on"}]}],"stream":false}`; string(out) != want {
		t.Errorf("Messages empty turn:\n got %s\nwant %s", out, want)
	}
}

func TestBuildFollowupErrors(t *testing.T) {
	body := []byte(`{"messages":[{"role":"user","content":"q"}]}`)
	calls := &Turn{ToolCalls: []ToolCall{{ID: "a", Name: "clock"}, {ID: "b", Name: "clock"}}}
	cases := map[string]struct {
		turn    *Turn
		results []ToolResult
		text    string
	}{
		"unanswered call":   {calls, []ToolResult{{CallID: "a"}}, ""},
		"no results":        {calls, nil, "continue"},
		"foreign result":    {calls, []ToolResult{{CallID: "a"}, {CallID: "b"}, {CallID: "zzz"}}, ""},
		"duplicate result":  {calls, []ToolResult{{CallID: "a"}, {CallID: "a"}}, ""},
		"nothing to send":   {&Turn{Text: "x"}, nil, ""},
		"result, no calls":  {&Turn{Text: "x"}, []ToolResult{{CallID: "a"}}, ""},
		"unnamed, no match": {calls, []ToolResult{{Name: "clock"}, {Name: "clock"}}, ""},
	}
	for name, c := range cases {
		_, err := BuildFollowup(Chat, body, c.turn, c.results, c.text)
		if !errors.Is(err, ErrFollowup) {
			t.Errorf("%s: err %v, want ErrFollowup", name, err)
		}
	}
	if _, err := BuildFollowup(Chat, []byte(`{"messages":`), &Turn{Text: "x"}, nil, "y"); !errors.Is(err, ErrMalformedJSON) {
		t.Errorf("malformed body: %v", err)
	}
	if _, err := BuildFollowup(Unknown, body, &Turn{Text: "x"}, nil, "y"); !errors.Is(err, ErrBodyShape) {
		t.Errorf("unknown protocol: %v", err)
	}
}

func TestAssignCallIDs(t *testing.T) {
	a := &Turn{ToolCalls: []ToolCall{{ID: "keep"}, {}, {}}}
	b := &Turn{ToolCalls: []ToolCall{{ID: "keep"}, {}, {}}}
	AssignCallIDs(Messages, []byte("req-1"), a)
	AssignCallIDs(Messages, []byte("req-1"), b)
	if a.ToolCalls[0].ID != "keep" || a.ToolCalls[1].ID == "" || a.ToolCalls[1].ID == a.ToolCalls[2].ID {
		t.Fatalf("ids %+v", a.ToolCalls)
	}
	if a.ToolCalls[1].ID != b.ToolCalls[1].ID || !strings.HasPrefix(a.ToolCalls[1].ID, "toolu_") {
		t.Fatalf("ids not stable: %q %q", a.ToolCalls[1].ID, b.ToolCalls[1].ID)
	}
	c := &Turn{ToolCalls: []ToolCall{{}}}
	AssignCallIDs(Chat, []byte("req-2, a longer conversation"), c)
	if c.ToolCalls[0].ID == a.ToolCalls[1].ID || !strings.HasPrefix(c.ToolCalls[0].ID, "call_") {
		t.Fatalf("another hop got the same id %q", c.ToolCalls[0].ID)
	}
	AssignCallIDs(Chat, nil, nil) // no panic
}

// FuzzBuildFollowup: any body ParseRequest accepts gives a followup that
// parses again, with stream false and every original message kept.
func FuzzBuildFollowup(f *testing.F) {
	for p, bodies := range followupBodies(f) {
		for _, b := range bodies {
			f.Add(uint8(p-Chat), b, "some text", `{"x":1}`, true)
			f.Add(uint8(p-Chat), b, "", "", false)
		}
	}
	f.Add(uint8(0), []byte(`{"messages":[]}`), "\u2028\x00\"", "not json", true)
	f.Fuzz(func(t *testing.T, mode uint8, body []byte, text, args string, withCall bool) {
		p := Protocol(mode%3) + Chat
		if _, err := ParseRequest(p, body); err != nil {
			return
		}
		turn := &Turn{Text: text}
		var results []ToolResult
		user := ""
		if withCall {
			turn.ToolCalls = []ToolCall{{Name: "clock", Arguments: args}}
			results = []ToolResult{{Name: "clock", Output: args}}
		} else {
			user = "continue" + text
		}
		out, err := BuildFollowup(p, body, turn, results, user)
		if err != nil {
			t.Fatalf("BuildFollowup on a parsed body: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("invalid JSON:\n%s", out)
		}
		r, err := ParseRequest(p, out)
		if err != nil {
			t.Fatalf("followup does not parse: %v\n%s", err, out)
		}
		if r.Stream() {
			t.Fatal("followup streams")
		}
		orig, _ := ParseRequest(p, body)
		if len(r.msgs) < len(orig.msgs) {
			t.Fatalf("followup lost messages: %d < %d", len(r.msgs), len(orig.msgs))
		}
	})
}

// TestBuildFollowupTrailingSystem: Claude Code ends its request with a
// role:"system" message (mid-conversation-system beta). A followup keeps it
// where the client put it: the assistant turn answers the conversation
// including it and goes after it, the user turn after that; an empty turn's
// text joins the user message before it, as AppendUserText does. With
// system messages set aside roles alternate, as the Messages API requires.
func TestBuildFollowupTrailingSystem(t *testing.T) {
	r := parse(t, Messages, clientText(t, ccTurn1))
	must(t, r.AppendUserText("TAG")) // the body as the provider received it
	request := edited(t, r)
	system := gjson.Get(request, "messages.1").Raw
	if gjson.Get(system, "role").Str != "system" {
		t.Fatalf("capture changed: messages.1 is %.80s", system)
	}
	call := &Turn{Text: "running it", ToolCalls: []ToolCall{{ID: "toolu_1", Name: "clock", Arguments: `{}`}}}
	res := []ToolResult{{CallID: "toolu_1", Output: `{"ok":true}`}}
	cases := []struct {
		name     string
		turn     *Turn
		results  []ToolResult
		text     string
		roles    string
		lastUser string // the types of the final user message's blocks
	}{
		{"text turn and user text", &Turn{Text: "hello"}, nil, "go on", "user system assistant user", "text"},
		{"tool results", call, res, "", "user system assistant user", "tool_result"},
		{"tool results and user text", call, res, "go on", "user system assistant user", "tool_result text"},
		{"empty turn", &Turn{}, nil, "go on", "user system", "text text text text"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, err := BuildFollowup(Messages, []byte(request), c.turn, c.results, c.text)
			if err != nil {
				t.Fatal(err)
			}
			msgs := gjson.GetBytes(out, "messages").Array()
			var roles, seq []string
			lastUser := -1
			for i, m := range msgs {
				role := m.Get("role").Str
				roles = append(roles, role)
				if role != "system" {
					seq = append(seq, role)
				}
				if role == "user" {
					lastUser = i
				}
			}
			if got := strings.Join(roles, " "); got != c.roles {
				t.Fatalf("roles %q, want %q", got, c.roles)
			}
			for k, role := range seq {
				if want := []string{"user", "assistant"}[k%2]; role != want {
					t.Fatalf("non-system message %d is %s, want %s: %v", k, role, want, roles)
				}
			}
			if got := msgs[1].Raw; got != system {
				t.Errorf("system message changed or moved: %.120s", got)
			}
			var types []string
			for _, b := range msgs[lastUser].Get("content").Array() {
				types = append(types, b.Get("type").Str)
			}
			if got := strings.Join(types, " "); got != c.lastUser {
				t.Errorf("final user message blocks %q, want %q", got, c.lastUser)
			}
			if c.text != "" {
				if got := msgs[lastUser].Get("content.@reverse.0.text").Str; got != c.text {
					t.Errorf("final user block text %q, want %q", got, c.text)
				}
			}
			if got := msgs[0].Get("content.#(text==\"TAG\").text").Str; got != "TAG" {
				t.Errorf("the time tag left the first user message: %s", msgs[0].Raw)
			}
		})
	}
}
