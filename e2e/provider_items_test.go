package e2e

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chimehq/chime/llm"
)

// docs/architecture.md "provider content is replayed verbatim" and docs/failures.md "a followup
// the provider rejects", through `chime up` with the mock provider as the
// model. The requests are the ones real clients send (testdata/clients):
// Claude Code enables thinking (thinking:{type:"adaptive"}); Codex sends
// store:false with include:["reasoning.encrypted_content"].
//
// The thinking tests need the strict mock (reply field "thinking", 400 on a
// lost or altered thinking block or a function_call without its reasoning
// item).

// capturedClient is one captured client request.
type capturedClient struct {
	name, path string
	headers    map[string]string
	body       string
}

func loadClient(t testing.TB, file string) capturedClient {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "clients", file))
	require.NoError(t, err)
	c := capturedClient{name: file, path: gjson.GetBytes(raw, "path").String(), body: gjson.GetBytes(raw, "body").Raw,
		headers: map[string]string{}}
	gjson.GetBytes(raw, "headers").ForEach(func(k, v gjson.Result) bool {
		switch strings.ToLower(k.String()) {
		case "accept-encoding", "connection", "content-type", "content-length", "accept":
		default:
			c.headers[k.String()] = v.String()
		}
		return true
	})
	return c
}

// send posts the captured request in mode m under a fresh session and
// returns the client's turn and its raw bytes.
func (c capturedClient) send(t testing.TB, d *demo, m mode, session, prompt string) (*llm.Turn, string) {
	t.Helper()
	body, err := sjson.Set(c.body, "stream", m.stream)
	require.NoError(t, err)
	hdr := map[string]string{}
	for k, v := range c.headers {
		hdr[k] = v
	}
	switch llm.DetectProtocol(c.path) {
	case llm.Messages:
		hdr["x-claude-code-session-id"] = session
		// The newest user text is the one chime reads (docs/directives.md).
		body, err = sjson.Set(body, "messages.0.content.1.text", prompt)
		require.NoError(t, err)
	case llm.Responses:
		hdr["session-id"], hdr["thread-id"] = session, session
		body, err = sjson.Set(body, "prompt_cache_key", session)
		require.NoError(t, err)
		body, err = sjson.Set(body, "input.3.content.0.text", prompt)
	}
	require.NoError(t, err)
	code, out := postJSON(t, d.proxyURL+c.path, hdr, body)
	require.Equal(t, http.StatusOK, code, string(out))
	return parseClient(t, protoCase{name: c.name, path: c.path}, m, out), string(out)
}

// assistantBefore returns the assistant message (Messages) or the output
// items (Responses) that a followup appended to the client's request.
func assistantParts(t testing.TB, p llm.Protocol, original, followup string) []gjson.Result {
	t.Helper()
	require.True(t, gjson.Valid(followup), "followup is JSON")
	if p == llm.Messages {
		msgs := gjson.Get(followup, "messages").Array()
		require.GreaterOrEqual(t, len(msgs), 2)
		a := msgs[len(msgs)-2]
		require.Equal(t, "assistant", a.Get("role").String(), "the message before the tool results: %s", a.Raw)
		return a.Get("content").Array()
	}
	skip := len(gjson.Get(original, "input").Array())
	var out []gjson.Result
	for i, it := range gjson.Get(followup, "input").Array() {
		if i >= skip && it.Get("type").String() != "function_call_output" {
			out = append(out, it)
		}
	}
	return out
}

// clientItem returns the raw provider item of the given type the client
// saw (from its JSON body or the turn its SSE stream builds).
func clientItem(t testing.TB, turn *llm.Turn, typ string) string {
	t.Helper()
	for _, it := range turn.Items {
		if it.Kind == llm.ItemRaw && gjson.Get(it.Raw, "type").String() == typ {
			return it.Raw
		}
	}
	t.Fatalf("the client saw no %s item: %+v", typ, turn.Items)
	return ""
}

func clockGet() map[string]any {
	return clockCall(map[string]any{"action": "get", "items": []any{}, "taskId": ""})
}

// TestFollowupReplaysThinking: the model thinks, then calls clock; the
// followup the provider receives carries the signed thinking block exactly
// as the client saw it, before the tool_use, and the strict provider
// accepts it.
func TestFollowupReplaysThinking(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	cc := loadClient(t, "claude-code-2.1.197-messages-turn1.json")
	require.Equal(t, "adaptive", gjson.Get(cc.body, "thinking.type").String())
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			const thought = "The user wants the time; ask the clock."
			deleteMockRequests(t, d)
			d.script(t,
				map[string]any{"thinking": thought, "text": "Let me check.", "toolCalls": []any{clockGet()}},
				map[string]any{"text": "done"},
			)
			turn, raw := cc.send(t, d, m, "think-"+m.name, "what time is it?")
			noServerCalls(t, turn, raw)
			assert.Equal(t, "Let me check.\n\ndone", turn.Text, "no note: the followup was accepted")
			assert.Equal(t, llm.FinishStop, turn.Finish.Reason)

			reqs := d.mockRequests(t)
			require.Len(t, reqs, 2, "original + one tool followup")
			parts := assistantParts(t, llm.Messages, reqs[0].Body, reqs[1].Body)
			require.NotEmpty(t, parts)
			block := parts[0]
			assert.Equal(t, "thinking", block.Get("type").String(), "the signed thinking block comes first: %s", block.Raw)
			assert.Equal(t, thought, block.Get("thinking").String())
			assert.NotEmpty(t, block.Get("signature").String())
			// Byte for byte the block the client saw (forwarded as streamed,
			// or in the merged JSON body).
			assert.Equal(t, clientItem(t, turn, "thinking"), block.Raw)
			var types []string
			for _, p := range parts {
				types = append(types, p.Get("type").String())
			}
			assert.Equal(t, []string{"thinking", "text", "tool_use"}, types)
		})
	}
}

// TestFollowupReplaysReasoning: the model reasons, then calls clock; the
// followup carries the reasoning item with its encrypted_content, exactly
// as the client saw it, before the message and function_call items.
func TestFollowupReplaysReasoning(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	cx := loadClient(t, "codex-cli-0.169-responses-turn1.json")
	require.False(t, gjson.Get(cx.body, "store").Bool())
	require.Equal(t, "reasoning.encrypted_content", gjson.Get(cx.body, "include.0").String())
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			const thought = "Need the current time."
			deleteMockRequests(t, d)
			d.script(t,
				map[string]any{"thinking": thought, "text": "Let me check.", "toolCalls": []any{clockGet()}},
				map[string]any{"text": "done"},
			)
			turn, raw := cx.send(t, d, m, "reason-"+m.name, "what time is it?")
			noServerCalls(t, turn, raw)
			assert.Equal(t, "Let me check.\n\ndone", turn.Text, "no note: the followup was accepted")

			reqs := d.mockRequests(t)
			require.Len(t, reqs, 2, "original + one tool followup")
			parts := assistantParts(t, llm.Responses, reqs[0].Body, reqs[1].Body)
			var types []string
			for _, p := range parts {
				types = append(types, p.Get("type").String())
			}
			require.Equal(t, []string{"reasoning", "message", "function_call"}, types)
			rs := parts[0]
			assert.NotEmpty(t, rs.Get("encrypted_content").String(), "store:false: the reasoning travels encrypted")
			assert.Equal(t, thought, rs.Get("summary.0.text").String())
			assert.True(t, strings.HasPrefix(rs.Get("id").String(), "rs_"), rs.Raw)
			assert.Equal(t, clientItem(t, turn, "reasoning"), rs.Raw)
		})
	}
}

// TestRejectedFollowupIsVisible: the provider refuses the followup (400).
// The client gets the first turn plus a visible note, never a bare
// truncation, in every protocol and mode; the host counts it.
func TestRejectedFollowupIsVisible(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	const refusal = "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`."
	n := 0
	forEachProtocolMode(t, func(t *testing.T, pc protoCase, m mode) {
		n++
		deleteMockRequests(t, d)
		d.expectRejections(1) // the scripted refusal of the followup
		d.script(t,
			map[string]any{"text": "Let me check.", "toolCalls": []any{clockGet()}},
			map[string]any{"status": 400, "error": refusal},
		)
		turn, raw := clientTurn(t, d, pc, m, fmt.Sprintf("reject-%s-%s", pc.name, m.name), "what time is it?")
		noServerCalls(t, turn, raw)
		assert.Equal(t, "Let me check.\n\n[chime: the continuation failed: 400 invalid_request_error: "+refusal+"]", turn.Text, raw)
		assert.Equal(t, llm.FinishStop, turn.Finish.Reason)
		assert.Len(t, d.mockRequests(t), 2, "original + the refused followup, no retry")
	})
	assert.Equal(t, fmt.Sprintf(`chime_followup_failures_total{code="400",kind="tool"} %d`, n),
		metricLine(t, d, `chime_followup_failures_total{code="400",kind="tool"}`))
}

// TestRejectedFollowupKeepsThinking: with thinking on, a refused followup
// still gives the client the first turn's thinking block, its text and the
// note.
func TestRejectedFollowupKeepsThinking(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	cc := loadClient(t, "claude-code-2.1.197-messages-turn1.json")
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			deleteMockRequests(t, d)
			d.expectRejections(1) // the scripted refusal of the followup
			d.script(t,
				map[string]any{"thinking": "Ask the clock.", "text": "Let me check.", "toolCalls": []any{clockGet()}},
				map[string]any{"status": 400, "error": "prompt is too long"},
			)
			turn, raw := cc.send(t, d, m, "reject-think-"+m.name, "what time is it?")
			noServerCalls(t, turn, raw)
			assert.Equal(t, "Let me check.\n\n[chime: the continuation failed: 400 invalid_request_error: prompt is too long]", turn.Text)
			assert.Equal(t, "Ask the clock.", gjson.Get(clientItem(t, turn, "thinking"), "thinking").String())
		})
	}
}

// metricLine returns the host's /metrics line that starts with name. The
// host counts a failed followup before it answers resolve, so the count is
// in place once the client has its response.
func metricLine(t testing.TB, d *demo, name string) string {
	t.Helper()
	resp, err := http.Get(d.hostURL + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return line
		}
	}
	return ""
}
