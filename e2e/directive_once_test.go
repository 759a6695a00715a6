package e2e

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// A directive typed once takes effect once (docs/directives.md, docs/failures.md "a directive
// resent in history"): clients resend the user's text on every request of
// a conversation, tool round trips included. These tests play whole
// conversations through `chime up` in JSON, each request built the way a
// client builds it: the previous request, plus the assistant message from
// the proxy's answer, plus a tool result or the user's next text.

// conversation is one client conversation in one protocol.
type conversation struct {
	name, path, session string
	headers             map[string]string
	body                string // the next request; grows turn by turn
	listKey             string // messages or input
}

// toolSchema is a strict-valid schema for the client tool the mock calls.
const toolSchema = `{"type":"object","properties":{"cmd":{"type":"string"}},"required":["cmd"],"additionalProperties":false}`

// syntheticConversations start with the user's text typed in one user
// message, after a system prompt, with a client tool declared.
func syntheticConversations(t *testing.T, prefix, text string) []*conversation {
	q := strconv.Quote(text)
	chat := prefix + "-chat"
	resp := prefix + "-responses"
	msgs := prefix + "-messages"
	uid := strconv.Quote(fmt.Sprintf(`{"device_id":"d","account_uuid":"","session_id":%q}`, msgs))
	return []*conversation{
		{name: "chat", path: "/v1/chat/completions", session: chat, listKey: "messages",
			headers: map[string]string{"x-chime-session": chat},
			body: `{"model":"m","stream":false,"messages":[{"role":"system","content":"sys"},{"role":"user","content":` + q + `}],` +
				`"tools":[{"type":"function","function":{"name":"bash","parameters":` + toolSchema + `}}]}`},
		{name: "responses", path: "/v1/responses", session: resp, listKey: "input", headers: map[string]string{},
			body: `{"model":"m","stream":false,"store":false,"prompt_cache_key":"` + resp + `","instructions":"sys",` +
				`"input":[{"type":"message","role":"user","content":[{"type":"input_text","text":` + q + `}]}],` +
				`"tools":[{"type":"function","name":"bash","strict":true,"parameters":` + toolSchema + `}]}`},
		{name: "messages", path: "/v1/messages", session: msgs, listKey: "messages", headers: map[string]string{"anthropic-version": "2023-06-01"},
			body: `{"model":"m","max_tokens":256,"stream":false,"system":"sys","metadata":{"user_id":` + uid + `},` +
				`"messages":[{"role":"user","content":[{"type":"text","text":` + q + `}]}],` +
				`"tools":[{"name":"bash","input_schema":` + toolSchema + `}]}`},
	}
}

// capturedConversation starts from a real client's captured request (the
// llm package's testdata/clients), with directive typed in front of the
// user's text at textPath, in JSON mode. keep, when > 0, keeps only the
// first keep messages (the turn's first request of a tool round trip
// capture). The session is the one the client sent.
func capturedConversation(t *testing.T, name, file, textPath, directive string, keep int) *conversation {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "llm", "testdata", "clients", file))
	require.NoError(t, err)
	capture := gjson.ParseBytes(raw)
	c := &conversation{name: name, path: capture.Get("path").String(), headers: map[string]string{}, listKey: "messages"}
	if strings.HasPrefix(c.path, "/v1/responses") {
		c.listKey = "input"
	}
	capture.Get("headers").ForEach(func(k, v gjson.Result) bool {
		switch k.String() {
		case "accept", "accept-encoding", "connection", "content-length":
		default:
			c.headers[k.String()] = v.String()
		}
		return true
	})
	c.session = c.headers["x-claude-code-session-id"] + c.headers["session-id"]
	require.NotEmpty(t, c.session, "%s carries its session in a header", file)
	body := capture.Get("body").Raw
	body = mustSet(t, body, textPath, directive+gjson.Get(body, textPath).String())
	body = mustSetRaw(t, body, "stream", "false")
	if keep > 0 {
		list := gjson.Get(body, c.listKey).Array()
		var kept []string
		for _, m := range list[:keep] {
			kept = append(kept, m.Raw)
		}
		body = mustSetRaw(t, body, c.listKey, "["+strings.Join(kept, ",")+"]")
	}
	c.body = body
	return c
}

func mustSet(t testing.TB, body, path string, v any) string {
	t.Helper()
	out, err := sjson.Set(body, path, v)
	require.NoError(t, err)
	return out
}

func mustSetRaw(t testing.TB, body, path, raw string) string {
	t.Helper()
	out, err := sjson.SetRaw(body, path, raw)
	require.NoError(t, err)
	return out
}

// send posts the current request and appends the assistant's answer to
// the conversation, as the client does before its next request.
func (c *conversation) send(t *testing.T, d *demo) string {
	t.Helper()
	code, out := postJSON(t, d.proxyURL+c.path, c.headers, c.body)
	require.Equal(t, http.StatusOK, code, "%s: %s", c.name, out)
	answer := string(out)
	require.True(t, gjson.Valid(answer), "%s: %s", c.name, out)
	switch c.listKey {
	case "input": // Codex resends the output items as they came
		gjson.Get(answer, "output").ForEach(func(_, item gjson.Result) bool {
			c.body = mustSetRaw(t, c.body, "input.-1", item.Raw)
			return true
		})
	default:
		if strings.HasPrefix(c.path, "/v1/chat") {
			c.body = mustSetRaw(t, c.body, "messages.-1", gjson.Get(answer, "choices.0.message").Raw)
		} else {
			c.body = mustSetRaw(t, c.body, "messages.-1", `{"role":"assistant","content":`+gjson.Get(answer, "content").Raw+`}`)
		}
	}
	return answer
}

// toolResults answers every tool call of the last answer.
func (c *conversation) toolResults(t *testing.T, answer, output string) {
	t.Helper()
	out := strconv.Quote(output)
	n := 0
	switch {
	case c.listKey == "input":
		gjson.Get(answer, `output.#(type=="function_call")#.call_id`).ForEach(func(_, id gjson.Result) bool {
			c.body = mustSetRaw(t, c.body, "input.-1", `{"type":"function_call_output","call_id":`+strconv.Quote(id.String())+`,"output":`+out+`}`)
			n++
			return true
		})
	case strings.HasPrefix(c.path, "/v1/chat"):
		gjson.Get(answer, "choices.0.message.tool_calls.#.id").ForEach(func(_, id gjson.Result) bool {
			c.body = mustSetRaw(t, c.body, "messages.-1", `{"role":"tool","tool_call_id":`+strconv.Quote(id.String())+`,"content":`+out+`}`)
			n++
			return true
		})
	default: // one user message answers every tool_use of the turn
		var blocks []string
		gjson.Get(answer, `content.#(type=="tool_use")#.id`).ForEach(func(_, id gjson.Result) bool {
			blocks = append(blocks, `{"type":"tool_result","tool_use_id":`+strconv.Quote(id.String())+`,"content":`+out+`,"is_error":false}`)
			return true
		})
		n = len(blocks)
		if n > 0 {
			c.body = mustSetRaw(t, c.body, "messages.-1", `{"role":"user","content":[`+strings.Join(blocks, ",")+`]}`)
		}
	}
	require.Positive(t, n, "%s: the answer holds a tool call: %s", c.name, answer)
}

// say appends the user's next text.
func (c *conversation) say(t *testing.T, text string) {
	t.Helper()
	q := strconv.Quote(text)
	switch {
	case c.listKey == "input":
		c.body = mustSetRaw(t, c.body, "input.-1", `{"type":"message","role":"user","content":[{"type":"input_text","text":`+q+`}]}`)
	case strings.HasPrefix(c.path, "/v1/chat"):
		c.body = mustSetRaw(t, c.body, "messages.-1", `{"role":"user","content":`+q+`}`)
	default:
		c.body = mustSetRaw(t, c.body, "messages.-1", `{"role":"user","content":[{"type":"text","text":`+q+`}]}`)
	}
}

// sessionState is the host's view of a session (dashboard API).
func sessionState(t *testing.T, d *demo, session string) gjson.Result {
	t.Helper()
	for _, s := range gjson.Parse(getJSON(t, d.hostURL+"/api/sessions")).Array() {
		if s.Get("id").String() == session {
			return s
		}
	}
	t.Fatalf("session %s unknown to the host", session)
	return gjson.Result{}
}

// TestDirectiveInHistoryAppliedOnce: `<**clock:{…}**>` typed in the first
// turn schedules one task, not one per request, over three turns of a
// conversation in every protocol, with synthetic and captured clients.
func TestDirectiveInHistoryAppliedOnce(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	due := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	dir := `<**clock:{"dueAt":"` + due + `","task":"check the deploy"}**>`
	convs := syntheticConversations(t, "once-clock", dir+"hi")
	convs = append(convs,
		capturedConversation(t, "codex-cli", "codex-cli-0.169-responses-turn1.json", "input.3.content.0.text", dir, 0),
		capturedConversation(t, "claude-code", "claude-code-2.1.197-messages-turn1.json", "messages.0.content.1.text", dir, 0))
	for _, c := range convs {
		t.Run(c.name, func(t *testing.T) {
			deleteMockRequests(t, d)
			for turn := 1; turn <= 3; turn++ {
				if turn > 1 {
					c.say(t, fmt.Sprintf("later %d", turn))
				}
				c.send(t, d)
				list := d.clock(t, c.session, map[string]any{"action": "list"})
				items, _ := list["items"].([]any)
				require.Equal(t, 1, len(items), "turn %d: the directive in the history scheduled again: %v", turn, list)
				assert.Equal(t, "check the deploy", items[0].(map[string]any)["task"])
			}
			reqs := d.mockRequests(t)
			require.Equal(t, 3, len(reqs), "one provider request per turn")
			for _, r := range reqs {
				noTags(t, r.Body)
			}
		})
	}
}

// TestStopMessageAcrossToolRoundTrip: `<**stopMessage:"go on",1**>` typed
// in a turn that goes through a client tool round trip, then a later turn.
// The one auto-continue happens once in total: the tool-result request and
// the later turn resend the directive but do not reset `used`.
//   - tool first: the model answers the typed request with a tool call;
//     the tool-result request's stop gets the auto-continue. The provider
//     sees 1, then 1+1 (followup), then 1 request.
//   - continue first: the typed request's stop gets the auto-continue and
//     the continuation calls the tool; the tool-result request and the
//     later turn are not continued. The provider sees 1+1, then 1, then 1.
func TestStopMessageAcrossToolRoundTrip(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	const dir = `<**stopMessage:"go on",1**>`
	bash := map[string]any{"name": "bash", "arguments": map[string]any{"cmd": "echo hi"}}
	type tc struct {
		conv      *conversation
		call      map[string]any // the scripted tool call
		contFirst bool
	}
	var cases []tc
	for _, c := range syntheticConversations(t, "once-stop", dir+"run echo") {
		c.name = "tool-first/" + c.name
		cases = append(cases, tc{conv: c, call: bash})
	}
	cases = append(cases,
		tc{conv: capturedConversation(t, "tool-first/codex-cli", "codex-cli-0.169-responses-turn1.json", "input.3.content.0.text", dir, 0),
			call: map[string]any{"name": "exec_command", "arguments": map[string]any{"cmd": "echo hi"}}},
		// The first request of the captured round trip: its user message and
		// the trailing system message. The mock answers with the captured
		// tool call, so the next request is the captured one.
		tc{conv: capturedConversation(t, "tool-first/claude-code", "claude-code-2.1.197-messages-tool-roundtrip.json", "messages.0.content.1.text", dir, 2),
			call: map[string]any{"id": "toolu_mock67_0", "name": "Bash", "arguments": map[string]any{"command": "echo hi-from-claude", "description": "Print a greeting"}}},
	)
	for _, c := range syntheticConversations(t, "once-stop-cont", dir+"run echo") {
		c.name = "continue-first/" + c.name
		cases = append(cases, tc{conv: c, call: bash, contFirst: true})
	}
	for _, tt := range cases {
		c := tt.conv
		t.Run(c.name, func(t *testing.T) {
			deleteMockRequests(t, d)
			toolCall := map[string]any{"text": "running it", "toolCalls": []any{tt.call}}
			// Provider requests after each of the three client requests,
			// and the request that carries the one auto-continue.
			want, followup := [3]int{1, 3, 4}, 2
			if tt.contFirst {
				d.script(t, map[string]any{"text": "first part"}, toolCall)
				want, followup = [3]int{2, 3, 4}, 1
			} else {
				d.script(t, toolCall)
			}
			check := func(step int, what string) {
				t.Helper()
				reqs := d.mockRequests(t)
				require.Equal(t, want[step], len(reqs), "provider requests after %s", what)
				stop := sessionState(t, d, c.session).Get("stopMessage")
				assert.Equal(t, int64(1), stop.Get("maxRepeats").Int(), "after %s: %s", what, stop.Raw)
				wantUsed := int64(1)
				if step == 0 && !tt.contFirst {
					wantUsed = 0
				}
				assert.Equal(t, wantUsed, stop.Get("used").Int(), "used after %s: %s", what, stop.Raw)
				for _, r := range reqs {
					noTags(t, r.Body)
				}
			}

			answer := c.send(t, d)
			check(0, "the typed request")
			c.toolResults(t, answer, "hi")
			c.send(t, d)
			check(1, "the tool-result request")
			c.say(t, "thanks")
			c.send(t, d)
			check(2, "a later turn")

			reqs := d.mockRequests(t)
			texts := userTexts(t, reqs[followup].Path, reqs[followup].Body)
			require.NotEmpty(t, texts)
			assert.Equal(t, "go on", texts[len(texts)-1], "the followup carries the stopMessage")
		})
	}
}
