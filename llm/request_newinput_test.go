package llm

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Directives typed by a user in the tests below.
const (
	dirStop  = `<**stopMessage:"go on",1**>`
	dirClock = `<**clock:{"dueAt":"2026-02-03T09:00:00Z","task":"t"}**>`
	dirRoute = `<**route:never**>`
)

// Client capture files (testdata/clients, see its README).
const (
	ccTurn1     = "claude-code-2.1.197-messages-turn1.json"
	ccRoundtrip = "claude-code-2.1.197-messages-tool-roundtrip.json"
	cxTurn1     = "codex-cli-0.169-responses-turn1.json"
)

// clientBody returns the request body of a captured client request.
func clientText(t testing.TB, name string) string { return string(clientBody(t, name)) }

// jset sets path to a string value; jraw sets it to raw JSON. A path
// ending in ".-1" appends to an array.
func jset(t testing.TB, body, path, value string) string {
	t.Helper()
	out, err := sjson.Set(body, path, value)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func jraw(t testing.TB, body, path string, raws ...string) string {
	t.Helper()
	for _, raw := range raws {
		var err error
		if body, err = sjson.SetRaw(body, path, raw); err != nil {
			t.Fatal(err)
		}
	}
	return body
}

// typed prefixes a text at path with a directive, as a user typing it.
func typed(t testing.TB, body, path, directive string) string {
	t.Helper()
	return jset(t, body, path, directive+gjson.Get(body, path).Str)
}

type dirAt struct {
	raw string
	pos int
}

func TestNewUserInputBoundary(t *testing.T) {
	// Claude Code: the typed text is the second text block of the first
	// user message; a role:"system" message follows it.
	ccT1 := typed(t, clientText(t, ccTurn1), "messages.0.content.1.text", dirStop)
	ccRT := typed(t, clientText(t, ccRoundtrip), "messages.0.content.1.text", dirStop)
	// Codex: two developer messages, the environment context (a user
	// message), then the typed text.
	cxT1 := typed(t, clientText(t, cxTurn1), "input.3.content.0.text", dirStop)
	reasoning := `{"type":"reasoning","id":"rs_1","summary":[],"encrypted_content":"gAAAAB"}`
	cxAnswer := `{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"hello","annotations":[]}]}`
	cxCall := `{"type":"function_call","id":"fc_1","name":"exec_command","arguments":"{\"cmd\":\"echo hi\"}","call_id":"call_1"}`
	cxOutput := `{"type":"function_call_output","call_id":"call_1","output":"hi ` + dirRoute + `"}`

	tests := []struct {
		name    string
		proto   Protocol
		body    string
		first   int
		want    []dirAt
		removed int
	}{
		{name: "claude code turn 1 as captured", proto: Messages, body: clientText(t, ccTurn1), first: 0},
		{name: "claude code turn 1, directive typed (system message follows)", proto: Messages, body: ccT1,
			first: 0, want: []dirAt{{dirStop, 0}}, removed: 1},
		{name: "claude code: a trailing system message is not user text", proto: Messages,
			body:  jset(t, ccT1, "messages.1.content", dirRoute+"agent types"),
			first: 0, want: []dirAt{{dirStop, 0}}, removed: 1},
		{name: "claude code tool round trip: only a tool_result is new", proto: Messages, body: ccRT,
			first: -1, removed: 1},
		{name: "claude code tool round trip, text typed while the tool ran", proto: Messages,
			body:  jraw(t, ccRT, "messages.3.content.-1", `{"type":"text","text":"`+strings.ReplaceAll(dirRoute, `"`, `\"`)+`also this"}`),
			first: 3, want: []dirAt{{dirRoute, 1}}, removed: 2},
		{name: "claude code later turn", proto: Messages,
			body: jraw(t, ccRT, "messages.-1",
				`{"role":"assistant","content":[{"type":"text","text":"hi-from-claude"}]}`,
				`{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"thanks `+strings.ReplaceAll(dirClock, `"`, `\"`)+`"}]}`,
				`{"role":"system","content":"Available agent types"}`),
			first: 5, want: []dirAt{{dirClock, 1}}, removed: 2},
		{name: "messages prefill: a trailing assistant message is the client's", proto: Messages,
			body:  `{"messages":[{"role":"user","content":"` + strings.ReplaceAll(dirStop, `"`, `\"`) + `json please"},{"role":"assistant","content":"{"}]}`,
			first: 0, want: []dirAt{{dirStop, 0}}, removed: 1},

		{name: "codex turn 1 as captured", proto: Responses, body: clientText(t, cxTurn1), first: 2},
		{name: "codex turn 1, directive typed", proto: Responses, body: cxT1,
			first: 2, want: []dirAt{{dirStop, 1}}, removed: 1},
		{name: "codex turn 2", proto: Responses,
			body:  jraw(t, cxT1, "input.-1", reasoning, cxAnswer, `{"type":"message","role":"user","content":[{"type":"input_text","text":"next"}]}`),
			first: 6, removed: 1},
		{name: "codex turn 2, directive typed again", proto: Responses,
			body: jraw(t, cxT1, "input.-1", reasoning, cxAnswer,
				`{"type":"message","role":"user","content":[{"type":"input_text","text":"`+strings.ReplaceAll(dirStop, `"`, `\"`)+`next"}]}`),
			first: 6, want: []dirAt{{dirStop, 2}}, removed: 2},
		{name: "codex tool round trip", proto: Responses, body: jraw(t, cxT1, "input.-1", reasoning, cxCall, cxOutput),
			first: -1, removed: 1},
		{name: "codex: a developer message after the user's is not user text", proto: Responses,
			body:  jraw(t, cxT1, "input.-1", `{"type":"message","role":"developer","content":[{"type":"input_text","text":"`+dirRoute+`"}]}`),
			first: 2, want: []dirAt{{dirStop, 1}}, removed: 1},
		{name: "responses: an unknown item type ends the new input", proto: Responses,
			body:  `{"input":[{"role":"user","content":"` + dirRoute + `"},{"type":"web_search_call","id":"ws_1","status":"completed"},{"role":"user","content":"x"}]}`,
			first: 2, removed: 1},
		{name: "responses string input", proto: Responses, body: `{"input":"` + dirRoute + `x"}`,
			first: 0, want: []dirAt{{dirRoute, 0}}, removed: 1},
		{name: "responses previous_response_id: only new items", proto: Responses,
			body:  `{"previous_response_id":"resp_1","input":[{"type":"function_call_output","call_id":"c","output":"x"},{"role":"user","content":[{"type":"input_text","text":"` + dirRoute + `"}]}]}`,
			first: 1, want: []dirAt{{dirRoute, 0}}, removed: 1},

		{name: "chat tool round trip", proto: Chat,
			body: `{"messages":[{"role":"system","content":"` + dirRoute + `"},{"role":"user","content":"` + dirRoute + `go"},` +
				`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":"` + dirRoute + `"}]}`,
			first: -1, removed: 1},
		{name: "chat later turn", proto: Chat,
			body: `{"messages":[{"role":"user","content":"` + dirRoute + `go"},` +
				`{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"bash","arguments":"{}"}}]},` +
				`{"role":"tool","tool_call_id":"c1","content":"ok"},{"role":"assistant","content":"done"},` +
				`{"role":"user","content":[{"type":"text","text":"` + dirRoute + `"}]}]}`,
			first: 4, want: []dirAt{{dirRoute, 1}}, removed: 2},
		{name: "chat: every new user message counts; an image-only one is no turn", proto: Chat,
			body: `{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"u"}}]},` +
				`{"role":"user","content":"` + dirRoute + `"},{"role":"user","content":"<**route:b**>"}]}`,
			first: 1, want: []dirAt{{dirRoute, 0}, {"<**route:b**>", 1}}, removed: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := []byte(tt.body)
			r := parse(t, tt.proto, tt.body)
			if got := r.FirstNewUserMessage(); got != tt.first {
				t.Errorf("FirstNewUserMessage = %d, want %d", got, tt.first)
			}
			var got []dirAt
			for _, d := range r.Directives() {
				got = append(got, dirAt{d.Raw, d.Position})
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("directives = %v, want %v", got, tt.want)
			}
			// A resent body gives the same answer (what the host keys on).
			again := parse(t, tt.proto, tt.body)
			for i, d := range again.Directives() {
				if i >= len(got) || d.Raw != got[i].raw || d.Position != got[i].pos {
					t.Errorf("second parse differs at %d: %+v", i, d)
				}
			}
			if n := r.StripDirectives(); n != tt.removed {
				t.Errorf("StripDirectives = %d, want %d", n, tt.removed)
			}
			out := []byte(edited(t, r))
			userAfter, otherAfter := texts(t, tt.proto, out)
			for _, s := range userAfter {
				if hasCompleteTag(s) {
					t.Errorf("user text still holds a tag: %q", s)
				}
			}
			if _, otherBefore := texts(t, tt.proto, body); !slices.Equal(otherBefore, otherAfter) {
				t.Errorf("non-user text changed: %q -> %q", otherBefore, otherAfter)
			}
		})
	}
}

func TestPreviousResponseID(t *testing.T) {
	body := `{"previous_response_id":"resp_9","input":"x"}`
	if got := parse(t, Responses, body).PreviousResponseID(); got != "resp_9" {
		t.Errorf("Responses: %q", got)
	}
	if got := parse(t, Chat, `{"previous_response_id":"resp_9","messages":[]}`).PreviousResponseID(); got != "" {
		t.Errorf("Chat has no previous_response_id: %q", got)
	}
}

// newInputOracle computes FirstNewUserMessage and the directives of the
// new user input with encoding/json, independently of the byte scanner
// (the rules are in request_newinput.go).
func newInputOracle(p Protocol, body []byte) (first int, dirs []dirAt) {
	var doc map[string]any
	if json.Unmarshal(body, &doc) != nil {
		return -1, nil
	}
	textType, listKey := "text", "messages"
	if p == Responses {
		textType, listKey = "input_text", "input"
	}
	var list []any
	switch v := doc[listKey].(type) {
	case []any:
		list = v
	case string:
		if p == Responses {
			list = []any{map[string]any{"role": "user", "content": v}}
		}
	}
	isModel := func(i int) bool {
		m, _ := list[i].(map[string]any)
		if m == nil {
			return false
		}
		assistant := m["role"] == "assistant"
		typ, _ := m["type"].(string)
		if p != Responses || typ == "" || typ == "message" {
			return assistant
		}
		return !strings.HasSuffix(typ, "_output") && typ != "mcp_approval_response"
	}
	start, last := 0, len(list)-1
	if p == Messages && last >= 0 && isModel(last) {
		last--
	}
	for i := last; i >= 0; i-- {
		if isModel(i) {
			start = i + 1
			break
		}
	}
	first, turns := -1, 0
	for i, el := range list {
		m, _ := el.(map[string]any)
		if m == nil || m["role"] != "user" {
			continue
		}
		var userTexts []string
		isTurn := false
		switch c := m["content"].(type) {
		case string:
			userTexts, isTurn = []string{c}, true
		case []any:
			for _, part := range c {
				pm, _ := part.(map[string]any)
				if s, ok := pm["text"].(string); ok && pm["type"] == textType {
					userTexts, isTurn = append(userTexts, s), true
				}
			}
		}
		if !isTurn {
			continue
		}
		if i >= start {
			if first < 0 {
				first = i
			}
			for _, s := range userTexts {
				for _, d := range ParseDirectives(s) {
					dirs = append(dirs, dirAt{d.Raw, turns})
				}
			}
		}
		turns++
	}
	return first, dirs
}

// FuzzNewUserInput checks the new-input boundary, the directives read and
// their positions against newInputOracle on any body (docs/directives.md). Seeds: the
// three client captures with directives typed in, and the request seeds.
func FuzzNewUserInput(f *testing.F) {
	seed := func(p Protocol, body string) { f.Add(uint8(p-Chat), []byte(body)) }
	cc := typed(f, clientText(f, ccTurn1), "messages.0.content.1.text", dirStop)
	seed(Messages, cc)
	seed(Messages, typed(f, clientText(f, ccRoundtrip), "messages.0.content.1.text", dirClock))
	cx := typed(f, clientText(f, cxTurn1), "input.3.content.0.text", dirStop)
	seed(Responses, cx)
	seed(Responses, jraw(f, cx, "input.-1", `{"type":"reasoning","summary":[]}`, `{"type":"message","role":"assistant","content":[]}`,
		`{"role":"user","content":[{"type":"input_text","text":"<**route:x**>"}]}`))
	seed(Messages, jraw(f, cc, "messages.-1", `{"role":"assistant","content":"{"}`))
	for _, b := range requestSeeds(f) {
		for p := Chat; p <= Messages; p++ {
			f.Add(uint8(p-Chat), b)
		}
	}
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		p := Protocol(mode%3) + Chat
		r, err := ParseRequest(p, body)
		if err != nil {
			if !errors.Is(err, ErrMalformedJSON) && !errors.Is(err, ErrBodyShape) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		first := r.FirstNewUserMessage()
		var got []dirAt
		for _, d := range r.Directives() {
			if d.Position < 0 {
				t.Fatalf("negative position %+v", d)
			}
			got = append(got, dirAt{d.Raw, d.Position})
		}
		if !utf8.Valid(body) {
			return // encoding/json rewrites invalid UTF-8, so the oracle cannot compare
		}
		wantFirst, want := newInputOracle(p, body)
		if first != wantFirst {
			t.Fatalf("FirstNewUserMessage = %d, oracle %d\n%s", first, wantFirst, body)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("directives %v, oracle %v\n%s", got, want, body)
		}
	})
}
