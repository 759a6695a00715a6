package llm

import (
	"bytes"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chimehq/chime/llm/internal/reqscan"
	"github.com/tidwall/gjson"
)

// This file holds an independent oracle for request edits: it decodes the
// whole body with encoding/json (fine in tests) and walks it with maps, so
// the byte-level editor is checked against a different implementation.

// texts splits every text in a decoded request into user text, which
// chime must strip, and other text (system, assistant, tool results),
// which it must leave alone.
func texts(t *testing.T, p Protocol, body []byte) (user, other []string) {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("body does not decode: %v\n%s", err, body)
	}
	partTexts := func(content any, textTypes ...string) (out []string) {
		switch c := content.(type) {
		case string:
			return []string{c}
		case []any:
			for _, p := range c {
				m, _ := p.(map[string]any)
				if typ, _ := m["type"].(string); slices.Contains(textTypes, typ) {
					s, _ := m["text"].(string)
					out = append(out, s)
				}
			}
		}
		return out
	}
	for _, k := range []string{"system", "instructions"} {
		other = append(other, partTexts(doc[k], "text")...)
	}
	list := func(k string) []map[string]any {
		var out []map[string]any
		arr, _ := doc[k].([]any)
		for _, m := range arr {
			if m, ok := m.(map[string]any); ok {
				out = append(out, m)
			}
		}
		return out
	}
	switch p {
	case Chat:
		for _, m := range list("messages") {
			if m["role"] == "user" {
				user = append(user, partTexts(m["content"], "text")...)
			} else {
				other = append(other, partTexts(m["content"], "text")...)
			}
		}
	case Responses:
		if in, ok := doc["input"].(string); ok {
			user = append(user, in)
		}
		for _, it := range list("input") {
			switch {
			case it["role"] == "user":
				user = append(user, partTexts(it["content"], "input_text")...)
			case it["role"] != nil:
				other = append(other, partTexts(it["content"], "input_text", "output_text")...)
			case it["type"] == "function_call_output":
				other = append(other, partTexts(it["output"], "input_text")...)
			}
		}
	case Messages:
		for _, m := range list("messages") {
			if m["role"] != "user" {
				other = append(other, partTexts(m["content"], "text")...)
				continue
			}
			user = append(user, partTexts(m["content"], "text")...)
			if blocks, ok := m["content"].([]any); ok {
				for _, b := range blocks {
					if b, ok := b.(map[string]any); ok && b["type"] == "tool_result" {
						other = append(other, partTexts(b["content"], "text")...)
					}
				}
			}
		}
	}
	return user, other
}

type editWant struct {
	kinds   []DirectiveKind // directives of the new user input (docs/directives.md)
	removed int
	session string
	stream  bool
}

// checkEdits runs the filter's request-path edits on body and checks the
// result against the oracle and the docs/protocols.md#protocol-table.
func checkEdits(t *testing.T, p Protocol, body []byte, hdr HeaderGetter, want editWant) []byte {
	t.Helper()
	r, err := ParseRequest(p, body)
	if err != nil {
		t.Fatalf("ParseRequest: %v", err)
	}
	var kinds []DirectiveKind
	for _, d := range r.Directives() {
		if d.Err != nil {
			t.Errorf("directive %q: %v", d.Raw, d.Err)
		}
		kinds = append(kinds, d.Kind)
	}
	if !slices.Equal(kinds, want.kinds) {
		t.Errorf("directive kinds = %v, want %v", kinds, want.kinds)
	}
	if got := r.SessionID(hdr); got != want.session {
		t.Errorf("SessionID = %q, want %q", got, want.session)
	}
	if r.Stream() != want.stream {
		t.Errorf("Stream = %v, want %v", r.Stream(), want.stream)
	}
	userBefore, otherBefore := texts(t, p, body)
	wantRemoved := 0
	for _, s := range userBefore {
		_, n := StripDirectives(s)
		wantRemoved += n
	}
	if wantRemoved != want.removed {
		t.Fatalf("fixture has %d user tags, want says %d", wantRemoved, want.removed)
	}
	if n := r.StripDirectives(); n != want.removed {
		t.Errorf("StripDirectives = %d, want %d", n, want.removed)
	}

	const tag1, tag2 = "[Time/Date]: utc=`2026-02-02T21:22:38.229Z`", "[scheduled task:\"check CI\"]"
	clientTools := toolNames(p, body)
	must(t, r.AppendUserText(tag1))
	must(t, r.AppendUserText(tag2))
	replaced := ToolSpec{Name: "exec", Description: "replaced by chime", Parameters: json.RawMessage(`{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"],"additionalProperties":false}`), Strict: true}
	must(t, r.InjectTools([]ToolSpec{strictTool(), replaced}))
	if !r.HasToolNamed("clock") || !r.HasToolNamed("exec") || r.HasToolNamed("nope") {
		t.Error("HasToolNamed wrong after injection")
	}
	out := r.Bytes()
	if !json.Valid(out) {
		t.Fatalf("edited body is not valid JSON:\n%s", out)
	}

	// Stripping is complete in what the provider sees; nothing else changed.
	userAfter, otherAfter := texts(t, p, out)
	for _, s := range userAfter {
		if hasCompleteTag(s) {
			t.Errorf("user text still holds a tag: %q", s)
		}
	}
	if !slices.Equal(otherBefore, otherAfter) {
		t.Errorf("non-user text changed:\nbefore %q\nafter  %q", otherBefore, otherAfter)
	}
	if p == Messages {
		for _, s := range userAfter {
			if strings.TrimSpace(s) == "" {
				t.Errorf("Messages user text left blank: %q", userAfter)
			}
		}
	}

	// Appended text in the protocol's shape.
	doc := gjson.ParseBytes(out)
	switch p {
	case Chat:
		n := doc.Get("messages.#").Int()
		last2 := doc.Get("messages." + itoa(n-2))
		last := doc.Get("messages." + itoa(n-1))
		if last2.Get("role").Str != "user" || last2.Get("content").Str != tag1 || last.Get("role").Str != "user" || last.Get("content").Str != tag2 {
			t.Errorf("chat append wrong: %s %s", last2.Raw, last.Raw)
		}
	case Responses:
		n := doc.Get("input.#").Int()
		for i, want := range []string{tag1, tag2} {
			it := doc.Get("input." + itoa(n-2+int64(i)))
			if it.Get("role").Str != "user" || it.Get("type").Str != "message" || it.Get("content.0.type").Str != "input_text" || it.Get("content.0.text").Str != want {
				t.Errorf("responses append wrong: %s", it.Raw)
			}
		}
	case Messages:
		last := doc.Get("messages.@reverse.0")
		blocks := last.Get("content").Array()
		if last.Get("role").Str != "user" || len(blocks) < 2 || blocks[len(blocks)-2].Get("text").Str != tag1 || blocks[len(blocks)-1].Get("text").Str != tag2 {
			t.Fatalf("messages append wrong: %s", last.Raw)
		}
		// tool_result blocks come first, and roles still alternate.
		seenText := false
		for _, b := range blocks {
			if b.Get("type").Str == "tool_result" && seenText {
				t.Errorf("tool_result after text: %s", last.Raw)
			}
			seenText = seenText || b.Get("type").Str == "text"
		}
		prev := ""
		for _, m := range doc.Get("messages").Array() {
			if m.Get("role").Str == prev {
				t.Errorf("two %s messages in a row", prev)
			}
			prev = m.Get("role").Str
		}
	}

	// Tools: the client's list in order with exec replaced, plus clock once.
	names := toolNames(p, out)
	wantNames := slices.Clone(clientTools)
	for _, n := range []string{"clock", "exec"} {
		if !slices.Contains(wantNames, n) {
			wantNames = append(wantNames, n)
		}
	}
	if !slices.Equal(names, wantNames) {
		t.Errorf("tools = %v, want %v", names, wantNames)
	}
	var clock gjson.Result
	switch p {
	case Chat:
		clock = doc.Get(`tools.#(function.name=="clock")`)
		if clock.Get("type").Str != "function" || !clock.Get("function.strict").Bool() {
			t.Errorf("chat clock tool shape: %s", clock.Raw)
		}
		clock = clock.Get("function.parameters")
	case Responses:
		clock = doc.Get(`tools.#(name=="clock")`)
		if clock.Get("type").Str != "function" || !clock.Get("strict").Bool() {
			t.Errorf("responses clock tool shape: %s", clock.Raw)
		}
		clock = clock.Get("parameters")
	case Messages:
		clock = doc.Get(`tools.#(name=="clock").input_schema`)
	}
	if clock.Get("properties.action.enum.#").Int() != 2 || clock.Get("additionalProperties").Bool() {
		t.Errorf("clock schema missing: %s", clock.Raw)
	}
	if got := doc.Get(`tools.#(` + map[Protocol]string{Chat: "function.name", Responses: "name", Messages: "name"}[p] + `=="exec")`).Raw; !strings.Contains(got, "replaced by chime") {
		t.Errorf("exec not replaced: %s", got)
	}

	// Untouched bytes: every other top-level value, and every message that
	// was neither stripped nor appended to, is copied verbatim.
	top := reqscan.SkipSpace(body, 0)
	reqscan.Members(body, top, func(key []byte, vs, ve int) bool {
		switch string(key) {
		case "messages", "input", "tools":
		default:
			if !bytes.Contains(out, body[vs:ve]) {
				t.Errorf("top-level %s changed", key)
			}
		}
		return true
	})
	if list := map[Protocol]string{Chat: "messages", Responses: "input", Messages: "messages"}[p]; doc.Get(list).IsArray() {
		ls, _ := reqscan.Member(body, top, list)
		if body[ls] == '[' {
			var elems [][2]int
			reqscan.Elements(body, ls, func(vs, ve int) bool { elems = append(elems, [2]int{vs, ve}); return true })
			for i, e := range elems {
				raw := body[e[0]:e[1]]
				if bytes.Contains(raw, []byte(tagOpen)) || bytes.Contains(raw, []byte(`\u003c`)) || (p == Messages && i == len(elems)-1) {
					continue
				}
				if !bytes.Contains(out, raw) {
					t.Errorf("message %d changed:\n%s", i, raw)
				}
			}
		}
	}
	return out
}

func toolNames(p Protocol, body []byte) (names []string) {
	for _, tl := range gjson.GetBytes(body, "tools").Array() {
		n := tl.Get("name")
		if p == Chat {
			n = tl.Get("function.name")
		}
		names = append(names, n.Str)
	}
	return names
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
