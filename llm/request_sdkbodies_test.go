package llm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// sdkBodies are the request bodies the official SDKs put on the wire, as
// llm/sdktest captures them into testdata/requests (it checks that the
// files are still what the SDKs send, and that header is the session
// headers they sent). The SDK tests live there so that package llm does
// not compile the SDKs.
var sdkBodies = []struct {
	name   string
	proto  Protocol
	header map[string]string // lower-case names, as SessionID asks
	want   editWant
}{
	{"chat_parts_tools_stream", Chat, map[string]string{"session_id": "hdr-session-1"},
		editWant{kinds: []DirectiveKind{DirectiveClock, DirectiveRoute}, removed: 3, session: "hdr-session-1", stream: true}},
	{"chat_plain_json", Chat, nil,
		editWant{kinds: []DirectiveKind{DirectiveStopMessageClear}, removed: 1, session: "pck-plain"}},
	{"responses_string_input", Responses, nil,
		editWant{kinds: []DirectiveKind{DirectiveStopMessage}, removed: 1, session: "pck-resp", stream: true}},
	{"responses_items_tools", Responses, map[string]string{"conversation_id": "conv-7"},
		editWant{kinds: []DirectiveKind{DirectiveRoute, DirectiveClockClear}, removed: 3, session: "conv-7"}},
	{"messages_blocks_tool_result_stream", Messages, nil,
		editWant{kinds: []DirectiveKind{DirectiveRoute}, removed: 2, session: "0f9d5c1e-claude", stream: true}},
	// The stopMessage is in an older turn: stripped, not read (docs/directives.md).
	{"messages_string_content", Messages, nil,
		editWant{kinds: nil, removed: 1, session: "1234-abcd"}},
}

func TestRequestEditsOnSDKBodies(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	var names []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	for _, fx := range sdkBodies {
		if !slices.Contains(names, fx.name) {
			t.Errorf("no testdata/requests/%s.json", fx.name)
		}
	}
	if len(names) != len(sdkBodies) {
		t.Errorf("testdata/requests holds %v; every body needs an sdkBodies entry", names)
	}
	for _, fx := range sdkBodies {
		t.Run(fx.name, func(t *testing.T) {
			body, err := os.ReadFile(filepath.Join("testdata", "requests", fx.name+".json"))
			must(t, err)
			hdr := HeaderFunc(func(name string) string { return fx.header[name] })
			checkEdits(t, fx.proto, body, hdr, fx.want)
		})
	}
}
