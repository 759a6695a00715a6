package e2e

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
)

// quickWakes lets wakes run a second after the client's last request
// (wake.afterIdle, default a minute).
const quickWakes = "wake:\n  afterIdle: 1s\n"

// wakeRequests are the wake requests (and their followups) the mock got
// on the conversation's queue.
func (c *conv) wakeRequests(t *testing.T) []mockRequest {
	t.Helper()
	var out []mockRequest
	for _, r := range c.received(t) {
		if strings.HasPrefix(r.Headers["x-request-id"], "wake:") {
			out = append(out, r)
		}
	}
	return out
}

// waitUntil polls cond (other processes act on their own time) until it
// holds or the deadline passes.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond) // poll: the host's scheduler runs on its own
	}
}

func (c *conv) runs(t *testing.T) []gjson.Result {
	t.Helper()
	code, out := getAuthed(t, c.d.hostURL+"/api/sessions/"+c.session+"/runs?include=text")
	require.Equal(t, http.StatusOK, code, string(out))
	return gjson.GetBytes(out, "runs").Array()
}

func getAuthed(t *testing.T, url string) (int, []byte) {
	t.Helper()
	return doJSON(t, http.MethodGet, url, nil)
}

func doJSON(t *testing.T, method, url string, body any) (int, []byte) {
	t.Helper()
	return requestJSON(t, method, url, map[string]string{"authorization": "Bearer " + hostToken}, body)
}

// TestWakeRuns: a session whose client went away is woken by its
// heartbeat, by a queued event and by a clock task coming due; the wake
// request is built from its last request; an ack is recorded, a reply is
// delivered to the session's next request, and a model that answers every
// wake with a tool call is stopped by the loop guards.
func TestWakeRuns(t *testing.T) {
	d := newDemo(t).withHostConfig(t, "wake:\n  historyTurns: 2\n  afterIdle: 1s\n"+shortHolds)
	d.up(t)

	t.Run("heartbeat", func(t *testing.T) {
		t.Parallel()
		c := &conv{d: d, pc: protoCases[2], m: modes[0], session: "wake-hb"}
		// Three earlier user turns, of which a wake sends the last two.
		body := fmt.Sprintf(`{"model":"m","max_tokens":64,"system":"you are the wake test","metadata":{"user_id":%q},`+
			`"tools":[{"name":"Bash","description":"run","input_schema":{"type":"object","properties":{"cmd":{"type":"string"}}}}],"messages":[`+
			`{"role":"user","content":"turn one"},{"role":"assistant","content":"a1"},`+
			`{"role":"user","content":"turn two"},{"role":"assistant","content":"a2"},`+
			`{"role":"user","content":[{"type":"text","text":"turn three <**heartbeat:\"2s\"**>"}]}]}`,
			fmt.Sprintf(`{"device_id":"d","session_id":%q}`, c.session))
		c.script(t, map[string]any{"text": "first answer"},
			map[string]any{"text": "HEARTBEAT_OK"}, map[string]any{"text": "HEARTBEAT_OK"}, map[string]any{"text": "HEARTBEAT_OK"})
		h := c.headers()
		h["x-api-key"] = "sk-wake-test"
		code, out := postJSON(t, d.proxyURL+c.pc.path, h, body)
		require.Equal(t, http.StatusOK, code, string(out))

		waitUntil(t, "two heartbeat wakes", 20*time.Second, func() bool { return len(c.wakeRequests(t)) >= 2 })
		code, out = doJSON(t, http.MethodPut, d.hostURL+"/api/sessions/"+c.session+"/heartbeat", map[string]any{"enabled": false})
		require.Equal(t, http.StatusOK, code, string(out))

		w := c.wakeRequests(t)[0]
		assert.Equal(t, "sk-wake-test", w.Headers["x-api-key"], "the session's credentials")
		assert.Equal(t, "you are the wake test", gjson.Get(w.Body, "system").String(), "the template's system prompt")
		assert.Contains(t, gjson.Get(w.Body, "tools.#.name").String(), "Bash", "the template's tools")
		assert.Contains(t, gjson.Get(w.Body, "tools.#.name").String(), "clock", "the server tools injected in the template")
		assert.False(t, gjson.Get(w.Body, "stream").Bool())
		texts := strings.Join(userTexts(t, c.pc.path, w.Body), "\n")
		assert.Contains(t, texts, "reply exactly HEARTBEAT_OK", "the heartbeat prompt")
		assert.Contains(t, texts, "[Time/Date]:", "a time tag")
		assert.NotContains(t, texts, "turn one", "older than historyTurns")
		assert.Contains(t, texts, "turn two")
		assert.NotContains(t, w.Body, "<**", "directives never reach the provider")
		msgs := gjson.Get(w.Body, "messages").Array()
		last := msgs[len(msgs)-2]
		assert.Equal(t, "assistant", last.Get("role").String())
		assert.Contains(t, last.Raw, "first answer", "the answer the template got comes before the wake item")

		runs := c.runs(t)
		require.NotEmpty(t, runs)
		assert.Equal(t, "ok-ack", runs[len(runs)-1].Get("status").String(), "%s", runs[len(runs)-1].Raw)
		assert.Equal(t, "interval", runs[len(runs)-1].Get("reason").String())
	})

	t.Run("event and delivery", func(t *testing.T) {
		t.Parallel()
		c := &conv{d: d, pc: protoCases[0], m: modes[0], session: "wake-event"}
		c.script(t, map[string]any{"text": "hello"}, map[string]any{"text": "The build finished green."})
		// A heartbeat a day away makes the session wakeable without beating.
		h := c.headers()
		h["authorization"] = "Bearer sk-chat"
		code, out := postJSON(t, d.proxyURL+c.pc.path, h, c.body(`hi <**heartbeat:"24h"**>`))
		require.Equal(t, http.StatusOK, code, string(out))
		code, out = doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+c.session+"/events",
			map[string]any{"text": "CI run 42 finished", "contextKey": "ci"})
		require.Equal(t, http.StatusNoContent, code, string(out))
		waitUntil(t, "the event's wake", 20*time.Second, func() bool { return len(c.wakeRequests(t)) >= 1 })
		w := c.wakeRequests(t)[0]
		assert.Equal(t, "Bearer sk-chat", w.Headers["authorization"])
		assert.Contains(t, strings.Join(userTexts(t, c.pc.path, w.Body), "\n"), "CI run 42 finished")
		waitUntil(t, "the run record", 10*time.Second, func() bool { return len(c.runs(t)) >= 1 })
		run := c.runs(t)[0]
		assert.Equal(t, "sent", run.Get("status").String(), run.Raw)
		assert.Equal(t, "message", run.Get("reason").String())
		code, out = getAuthed(t, d.hostURL+"/api/sessions/"+c.session+"/events")
		require.Equal(t, http.StatusOK, code)
		assert.Empty(t, gjson.GetBytes(out, "events").Array(), "a successful run drains its events")

		// The reply reaches the client's next request, once.
		c.script(t, map[string]any{"text": "thanks"}, map[string]any{"text": "again"})
		c.ask(t, "back")
		c.ask(t, "and again")
		reqs := c.received(t)
		n := len(reqs)
		assert.Contains(t, strings.Join(userTexts(t, c.pc.path, reqs[n-2].Body), "\n"), "[while you were away: The build finished green.]")
		assert.NotContains(t, strings.Join(userTexts(t, c.pc.path, reqs[n-1].Body), "\n"), "while you were away")
	})

	t.Run("task due while away", func(t *testing.T) {
		t.Parallel()
		c := &conv{d: d, pc: protoCases[1], m: modes[0], session: "wake-task"}
		dueAt := time.Now().Add(4 * time.Second).UTC().Format(time.RFC3339)
		c.script(t,
			map[string]any{"toolCalls": []any{clockCall(map[string]any{"action": "schedule", "taskId": "",
				"items": []any{map[string]any{"dueAt": dueAt, "task": "water the plants", "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})}},
			map[string]any{"text": "I will remind you."},
			map[string]any{"text": "Time to water the plants."},
		)
		h := c.headers()
		h["authorization"] = "Bearer sk-responses"
		code, out := postJSON(t, d.proxyURL+c.pc.path, h, c.body("remind me to water the plants"))
		require.Equal(t, http.StatusOK, code, string(out))
		waitUntil(t, "the task's wake", 30*time.Second, func() bool { return len(c.wakeRequests(t)) >= 1 })
		w := c.wakeRequests(t)[0]
		assert.Contains(t, strings.Join(userTexts(t, c.pc.path, w.Body), "\n"), "water the plants")
		waitUntil(t, "the run record", 10*time.Second, func() bool { return len(c.runs(t)) >= 1 })
		assert.Equal(t, "task", c.runs(t)[0].Get("reason").String())
		c.script(t, map[string]any{"text": "ok"})
		c.ask(t, "I am back")
		reqs := c.received(t)
		texts := strings.Join(userTexts(t, c.pc.path, reqs[len(reqs)-1].Body), "\n")
		assert.Contains(t, texts, "[while you were away: Time to water the plants.]")
		assert.NotContains(t, texts, `[scheduled task:`, "the wake delivered the reminder; it is not injected again")
	})

	t.Run("loop guard", func(t *testing.T) {
		t.Parallel()
		c := &conv{d: d, pc: protoCases[0], m: modes[0], session: "wake-loop"}
		replies := []map[string]any{{"text": "hello"}}
		for range 12 {
			replies = append(replies, map[string]any{"toolCalls": []any{clockCall(map[string]any{"action": "list", "taskId": "", "items": []any{}})}})
		}
		c.script(t, replies...)
		h := c.headers()
		h["authorization"] = "Bearer sk-loop"
		code, out := postJSON(t, d.proxyURL+c.pc.path, h, c.body(`hi <**heartbeat:"24h"**>`))
		require.Equal(t, http.StatusOK, code, string(out))
		code, out = doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+c.session+"/wake", map[string]any{"reason": "manual"})
		require.Equal(t, http.StatusAccepted, code, string(out))
		waitUntil(t, "the run record", 30*time.Second, func() bool { return len(c.runs(t)) >= 1 })
		ws := c.wakeRequests(t)
		assert.LessOrEqual(t, len(ws), 1+8, "one wake and at most 8 followups")
		assert.GreaterOrEqual(t, len(ws), 3, "the guard let the tool rounds run")
		assert.Regexp(t, `^wake:wake-loop:\d+$`, ws[0].Headers["x-request-id"])
		assert.Empty(t, ws[0].Headers[hostapi.HeaderFollowup], "the marker never reaches the provider")
	})
}

// TestWakeAfterRestart: the host keeps templates but never credentials; a
// wake after a restart is skipped with the reason and its events stay
// queued, until wake.headers gives credentials.
func TestWakeAfterRestart(t *testing.T) {
	d := newDemo(t).withHostConfig(t, quickWakes)
	d.proxyAndMock(t)
	host := d.host(t)
	c := &conv{d: d, pc: protoCases[2], m: modes[0], session: "wake-restart"}
	c.script(t, map[string]any{"text": "hello"})
	h := c.headers()
	h["x-api-key"] = "sk-client"
	code, out := postJSON(t, d.proxyURL+c.pc.path, h, c.body(`hi <**heartbeat:"24h"**>`))
	require.Equal(t, http.StatusOK, code, string(out))
	waitUntil(t, "the template", 10*time.Second, func() bool {
		code, out := getAuthed(t, d.hostURL+"/metrics")
		return code == http.StatusOK && strings.Contains(string(out), "chime_wake_templates_total 1")
	})
	host.kill(syscall.SIGTERM)
	host = d.host(t)
	code, out = doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+c.session+"/events", map[string]any{"text": "deploy done", "wake": false})
	require.Equal(t, http.StatusNoContent, code, string(out))
	code, out = doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+c.session+"/wake", nil)
	require.Equal(t, http.StatusAccepted, code, string(out))
	waitUntil(t, "the skipped run", 10*time.Second, func() bool { return len(c.runs(t)) >= 1 })
	run := c.runs(t)[0]
	assert.Equal(t, "skipped", run.Get("status").String(), run.Raw)
	assert.Contains(t, run.Get("why").String(), "no credentials")
	assert.Empty(t, c.wakeRequests(t))
	code, out = getAuthed(t, d.hostURL+"/api/sessions/"+c.session+"/events")
	require.Equal(t, http.StatusOK, code)
	assert.Len(t, gjson.GetBytes(out, "events").Array(), 1, "the events stay queued")

	host.kill(syscall.SIGTERM)
	d.withHostConfig(t, "wake:\n  afterIdle: 1s\n  headers:\n    x-api-key: ${CHIME_E2E_WAKE_KEY}\n")
	t.Setenv("CHIME_E2E_WAKE_KEY", "sk-from-config")
	d.host(t) // restart: the queued event wakes the session
	c.script(t, map[string]any{"text": "The deploy is done."})
	waitUntil(t, "the wake with configured credentials", 20*time.Second, func() bool { return len(c.wakeRequests(t)) >= 1 })
	w := c.wakeRequests(t)[0]
	assert.Equal(t, "sk-from-config", w.Headers["x-api-key"])
	assert.Contains(t, strings.Join(userTexts(t, c.pc.path, w.Body), "\n"), "deploy done")
}

// TestWakeReplyFollowsTheUser (docs/delivery.md#routing): with `chime
// watch` open, a wake's reply is printed there; once the client sends a
// request again, the next reply waits for the client's next request.
func TestWakeReplyFollowsTheUser(t *testing.T) {
	d := newDemo(t).withHostConfig(t, quickWakes)
	d.up(t)
	c := &conv{d: d, pc: protoCases[0], m: modes[0], session: "wake-watch"}
	c.script(t, map[string]any{"text": "hello"}, map[string]any{"text": "The nightly build is green."})
	h := c.headers()
	h["authorization"] = "Bearer sk-watch"
	code, out := postJSON(t, d.proxyURL+c.pc.path, h, c.body(`hi <**heartbeat:"24h"**>`))
	require.Equal(t, http.StatusOK, code, string(out))
	w := startChime(t, d.env(), nil, "watch", "--session", c.session, "--host", d.hostURL)
	// The watch is the last interaction once its stream is open.
	waitUntil(t, "the watch's subscription", 10*time.Second, func() bool {
		code, out := getAuthed(t, d.hostURL+"/api/sessions")
		return code == http.StatusOK && strings.Contains(string(out), `"lastChannel":"sse"`)
	})
	code, out = doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+c.session+"/events", map[string]any{"text": "nightly build finished"})
	require.Equal(t, http.StatusNoContent, code, string(out))
	waitUntil(t, "the reply in chime watch", 20*time.Second, func() bool {
		return strings.Contains(w.logs.String(), "The nightly build is green.")
	})

	// Back at the client: the next reply goes to its next request.
	c.script(t, map[string]any{"text": "hi again"}, map[string]any{"text": "Tests are flaky again."}, map[string]any{"text": "ok"})
	c.ask(t, "I am back")
	code, out = doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+c.session+"/events", map[string]any{"text": "test report"})
	require.Equal(t, http.StatusNoContent, code, string(out))
	waitUntil(t, "the second run", 20*time.Second, func() bool { return len(c.runs(t)) >= 2 })
	c.ask(t, "anything new?")
	reqs := c.received(t)
	assert.Contains(t, strings.Join(userTexts(t, c.pc.path, reqs[len(reqs)-1].Body), "\n"), "[while you were away: Tests are flaky again.]")
	assert.NotContains(t, w.logs.String(), "Tests are flaky again.", "the client came back: not to the watch")
}
