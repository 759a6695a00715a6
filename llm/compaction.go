package llm

import (
	"strings"

	"github.com/tidwall/gjson"
)

// compactionSentinels are the texts that mark a compaction (context
// summarization) request when a text starts with one of them (docs/continuation.md:
// stopMessage never continues a compaction). Sources:
//   - Codex CLI, codex-rs/core/templates/compact/prompt.md, sent as the
//     final user message of a local compaction;
//   - Claude Code's compact prompt, sent as the final user message: the
//     older opening sentence, the partial-compaction one, and the newer
//     no-tools preamble that precedes them;
//   - Claude Code's summarization system prompt (also used by opencode).
var compactionSentinels = []string{
	"You are performing a CONTEXT CHECKPOINT COMPACTION",
	"Your task is to create a detailed summary of the conversation so far",
	"Your task is to create a detailed summary of this conversation",
	"CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.",
	"You are a helpful AI assistant tasked with summarizing conversations",
}

// IsCompaction reports whether body (a request of protocol p) is a
// compaction request: a text of its payload starts with one of
// compactionSentinels, leading white space ignored. The payload is the
// system prompt (Chat's leading system/developer messages, Responses'
// instructions and leading system/developer items, Messages' system) and
// the newest user turn (the trailing run of user messages or items, each
// text part, which covers chime's own appended time tag too; in Messages
// behind any trailing role:"system" messages). Earlier
// history is never examined, so a pasted summary prompt in an old message
// does not count. A body ParseRequest rejects is not a compaction request.
func IsCompaction(p Protocol, body []byte) bool {
	r, err := ParseRequest(p, body)
	if err != nil {
		return false
	}
	top := r.body
	switch p {
	case Messages:
		if hasSentinel(gjson.GetBytes(top, "system")) {
			return true
		}
	case Responses:
		if hasSentinel(gjson.GetBytes(top, "instructions")) {
			return true
		}
	}
	// Leading system/developer messages (Chat, Responses items).
	if p != Messages && !r.inputString {
		for _, m := range r.msgs {
			if m.user {
				break
			}
			msg := gjson.ParseBytes(top[m.s:m.e])
			role := msg.Get("role").String()
			if role != "system" && role != "developer" {
				break
			}
			if hasSentinel(msg.Get("content")) {
				return true
			}
		}
	}
	// The newest user turn; in Messages trailing role:"system" messages
	// (Claude Code's mid-conversation-system beta) may follow it.
	last := len(r.msgs) - 1
	for p == Messages && last >= 0 && r.msgs[last].system {
		last--
	}
	for i := last; i >= 0 && r.msgs[i].user; i-- {
		c := r.msgs[i].content
		if c.ok() && hasSentinel(gjson.ParseBytes(top[c.s:c.e])) {
			return true
		}
	}
	return false
}

// hasSentinel checks a content value: a string, or a list of parts whose
// text parts are checked one by one.
func hasSentinel(v gjson.Result) bool {
	switch {
	case v.Type == gjson.String:
		return startsWithSentinel(v.Str)
	case v.IsArray():
		found := false
		v.ForEach(func(_, part gjson.Result) bool {
			if t := part.Get("text"); t.Type == gjson.String {
				switch part.Get("type").String() {
				case "", "text", "input_text":
					found = startsWithSentinel(t.Str)
				}
			}
			return !found
		})
		return found
	}
	return false
}

func startsWithSentinel(s string) bool {
	s = strings.TrimLeft(s, " \t\r\n")
	for _, sentinel := range compactionSentinels {
		if strings.HasPrefix(s, sentinel) {
			return true
		}
	}
	return false
}
