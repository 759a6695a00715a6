package llm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	codexCompact  = "You are performing a CONTEXT CHECKPOINT COMPACTION. Create a handoff summary for another LLM that will resume the task."
	claudeCompact = "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nYour task is to create a detailed summary of the conversation so far"
	claudeSystem  = "You are a helpful AI assistant tasked with summarizing conversations."
	timeTag       = "[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 13:22:38.229 -08:00` tz=`America/Los_Angeles` nowMs=`1770038558229` ntpOffsetMs=`-12`"
)

func TestIsCompaction(t *testing.T) {
	cases := []struct {
		name string
		p    Protocol
		body string
		want bool
	}{
		// Codex CLI local compaction: the prompt is the newest user item,
		// and chime's time tag follows it.
		{"codex responses", Responses, `{"instructions":"You are Codex","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"fix it"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"` + codexCompact + `"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"` + timeTag + `"}]}]}`, true},
		{"codex chat", Chat, `{"messages":[{"role":"user","content":"fix"},{"role":"assistant","content":"ok"},{"role":"user","content":"  \n` + codexCompact + `"},{"role":"user","content":"` + timeTag + `"}]}`, true},
		{"claude messages prompt", Messages, `{"system":[{"type":"text","text":"You are Claude Code"}],"messages":[{"role":"user","content":"fix"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"` + strings.ReplaceAll(claudeCompact, "\n", `\n`) + `"},{"type":"text","text":"` + timeTag + `"}]}]}`, true},
		{"claude prompt before a trailing system message", Messages, `{"messages":[{"role":"user","content":"fix"},{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"` + strings.ReplaceAll(claudeCompact, "\n", `\n`) + `"},{"type":"text","text":"` + timeTag + `"}]},{"role":"system","content":"Available agent types"}]}`, true},
		{"claude messages system string", Messages, `{"system":"` + claudeSystem + `","messages":[{"role":"user","content":"summarize"}]}`, true},
		{"claude system second block", Messages, `{"system":[{"type":"text","text":"x-billing"},{"type":"text","text":"` + claudeSystem + `"}],"messages":[{"role":"user","content":"s"}]}`, true},
		{"chat system", Chat, `{"messages":[{"role":"system","content":[{"type":"text","text":"` + claudeSystem + `"}]},{"role":"user","content":"s"}]}`, true},
		{"responses string input", Responses, `{"input":"` + codexCompact + `"}`, true},
		{"responses developer item", Responses, `{"input":[{"role":"developer","content":"` + claudeSystem + `"},{"role":"user","content":"s"}]}`, true},

		// Never anywhere in the history.
		{"history chat", Chat, `{"messages":[{"role":"user","content":"` + codexCompact + `"},{"role":"assistant","content":"summary"},{"role":"user","content":"continue the work"}]}`, false},
		{"history messages", Messages, `{"messages":[{"role":"user","content":"` + codexCompact + `"},{"role":"assistant","content":"summary"},{"role":"user","content":[{"type":"text","text":"go on"}]}]}`, false},
		{"tool result after prompt", Chat, `{"messages":[{"role":"user","content":"` + codexCompact + `"},{"role":"assistant","content":null,"tool_calls":[{"id":"a","type":"function","function":{"name":"x","arguments":"{}"}}]},{"role":"tool","tool_call_id":"a","content":"r"}]}`, false},
		{"not at the start", Chat, `{"messages":[{"role":"user","content":"Please note: ` + codexCompact + `"}]}`, false},
		{"quoted in a tool result", Messages, `{"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":"` + codexCompact + `"}]}]}`, false},
		{"system later than user", Chat, `{"messages":[{"role":"user","content":"hi"},{"role":"system","content":"` + claudeSystem + `"},{"role":"assistant","content":"x"},{"role":"user","content":"y"}]}`, false},
		{"system message after old history", Messages, `{"messages":[{"role":"user","content":"` + codexCompact + `"},{"role":"assistant","content":"summary"},{"role":"system","content":"s"}]}`, false},
		{"plain", Responses, `{"instructions":"be nice","input":"hello"}`, false},
		{"malformed", Chat, `{"messages":[`, false},
		{"wrong shape", Messages, `{"messages":{}}`, false},
	}
	for _, c := range cases {
		if got := IsCompaction(c.p, []byte(c.body)); got != c.want {
			t.Errorf("%s: IsCompaction = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestIsCompactionFixturesAreNot(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("testdata", "requests", "*.json"))
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range []Protocol{Chat, Responses, Messages} {
			if IsCompaction(p, b) {
				t.Errorf("%s as %v: ordinary request taken for compaction", name, p)
			}
		}
	}
}

func FuzzIsCompaction(f *testing.F) {
	f.Add(uint8(0), []byte(`{"messages":[{"role":"user","content":"`+codexCompact+`"}]}`))
	f.Add(uint8(1), []byte(`{"instructions":"`+claudeSystem+`","input":[]}`))
	f.Add(uint8(2), []byte(`{"system":[{"type":"text","text":"a"}],"messages":[{"role":"user","content":[{"type":"text","text":" `+codexCompact+`"}]}]}`))
	f.Fuzz(func(t *testing.T, mode uint8, body []byte) {
		p := Protocol(mode%3) + Chat
		got := IsCompaction(p, body)
		if got && !strings.Contains(string(body), "CONTEXT CHECKPOINT") && !strings.Contains(string(body), "summar") &&
			!strings.Contains(string(body), "TEXT ONLY") && !strings.Contains(string(body), `\u`) {
			t.Fatalf("compaction without any sentinel text: %s", body)
		}
	})
}
