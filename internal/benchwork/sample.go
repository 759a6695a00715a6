package benchwork

import (
	"encoding/json"
	"strconv"
)

// SampleChatBody returns a deterministic Chat Completions request of about
// size bytes shaped like a coding agent's: a long system prompt, a dozen
// tools, and many turns of tool calls with long escaped tool outputs, with
// a few user messages carrying directives. It exists so the same edit can
// be benchmarked natively and inside the wasm filter.
func SampleChatBody(size int) []byte {
	b := make([]byte, 0, size+size/8)
	b = append(b, `{"model":"gpt-5-codex","stream":true,"prompt_cache_key":"bench-session","messages":[`...)
	b = append(b, `{"role":"system","content":`...)
	b = appendQuote(b, repeatTo("You are a coding agent working in a monorepo. Follow the repository conventions, run the tests, and keep changes minimal.\n", 6000))
	b = append(b, '}')
	seq := uint32(7)
	next := func() uint32 { seq = seq*1664525 + 1013904223; return seq >> 8 }
	for turn := 0; len(b) < size-2048; turn++ {
		user := "Please continue with step " + strconv.Itoa(turn) + " of the refactor and run the package tests."
		switch turn % 25 {
		case 3:
			user += ` <**stopMessage:"Continue until every test passes, then summarize.",5**>`
		case 11:
			user += ` <**clock:{"dueAt":"2026-03-01T09:00:00-08:00","task":"re-run the flaky {integration} suite","tool":"exec","arguments":"{\"cmd\":\"make it\"}"}**>`
		case 19:
			user = "<**route:fast**> " + user
		}
		b = append(b, `,{"role":"user","content":`...)
		b = appendQuote(b, user)
		id := "call_" + strconv.Itoa(turn)
		b = append(b, `},{"role":"assistant","content":null,"tool_calls":[{"id":"`+id+`","type":"function","function":{"name":"exec","arguments":`...)
		b = appendQuote(b, `{"cmd":"go test ./pkg/`+strconv.Itoa(turn)+`/... -run 'Test.*' -count=1"}`)
		b = append(b, `}}]},{"role":"tool","tool_call_id":"`+id+`","content":`...)
		b = appendQuote(b, toolLog(int(2000+next()%14000), turn))
		b = append(b, '}')
	}
	b = append(b, `],"tools":[`...)
	for i := 0; i < 12; i++ {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"function","function":{"name":"tool_`+strconv.Itoa(i)+`","description":"Runs a repository helper.","parameters":{"type":"object","properties":{"cmd":{"type":"string","description":"The command line."},"timeout_ms":{"type":"integer"}},"required":["cmd"]}}}`...)
	}
	return append(b, "]}"...)
}

func repeatTo(s string, n int) string {
	out := make([]byte, 0, n+len(s))
	for len(out) < n {
		out = append(out, s...)
	}
	return string(out)
}

// toolLog fakes go test output: tabs, quotes, paths and some non-ASCII.
func toolLog(n, turn int) string {
	line := "=== RUN   TestParse/case_" + strconv.Itoa(turn) + "\n    parse_test.go:42: got \"α→β\" want \"α→γ\"\t(diff at C:\\src\\pkg)\n--- FAIL: TestParse (0.01s)\n"
	return repeatTo(line, n)
}

// appendQuote appends s as a JSON string.
func appendQuote(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
