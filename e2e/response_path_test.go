package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/internal/ssecheck"
	"github.com/chimehq/chime/llm"
)

// The issue-5 suite: server-tool interception, stopMessage, holds,
// disconnects and loop guards through `chime up`, for every protocol in
// JSON and SSE. The mock provider's script plays the model.

type mode struct {
	name   string
	stream bool
}

var modes = []mode{{"json", false}, {"sse", true}}

func protocolOf(pc protoCase) llm.Protocol { return llm.DetectProtocol(pc.path) }

// clientTurn sends one client request and returns the turn the client
// accumulated (from JSON or from the SSE stream) and the raw bytes.
func clientTurn(t testing.TB, d *demo, pc protoCase, m mode, session, text string) (*llm.Turn, string) {
	t.Helper()
	body := pc.body(session, text)
	if m.stream {
		var err error
		body, err = sjson.Set(body, "stream", true)
		require.NoError(t, err)
	}
	code, out := postJSON(t, d.proxyURL+pc.path, pc.header(session), body)
	require.Equal(t, http.StatusOK, code, string(out))
	return parseClient(t, pc, m, out), string(out)
}

func parseClient(t testing.TB, pc protoCase, m mode, out []byte) *llm.Turn {
	t.Helper()
	p := protocolOf(pc)
	if !m.stream {
		turn, err := llm.ParseResponse(p, out)
		require.NoError(t, err, "client JSON: %s", out)
		return turn
	}
	r := llm.NewStreamReader(p)
	evs, err := r.Feed(out)
	require.NoError(t, err)
	rest, err := r.Close()
	require.NoError(t, err, "client SSE must be complete: %s", out)
	// One answer, as agent CLIs read it (docs/architecture.md), by an independent parser.
	_, err = ssecheck.Check(p.String(), out)
	require.NoError(t, err, "client SSE: %s", out)
	var b llm.TurnBuilder
	starts, terminals := 0, 0
	for _, ev := range append(evs, rest...) {
		if ev.Kind.Has(llm.KindStart) {
			starts++
		}
		if ev.Kind.Has(llm.KindTerminal) {
			terminals++
		}
		b.Add(ev)
	}
	assert.Equal(t, 1, starts, "exactly one start event: %s", out)
	assert.Equal(t, 1, terminals, "exactly one terminal event: %s", out)
	require.True(t, b.Terminated(), "stream terminated: %s", out)
	return b.Turn()
}

func noServerCalls(t testing.TB, turn *llm.Turn, raw string) {
	t.Helper()
	for _, c := range turn.ToolCalls {
		assert.NotEqual(t, "clock", c.Name, "the client must never see a server-tool call")
	}
	assert.NotContains(t, raw, `"name":"clock"`)
}

func clockCall(args map[string]any) map[string]any {
	raw, _ := json.Marshal(args)
	return map[string]any{"name": "clock", "arguments": json.RawMessage(raw)}
}

func forEachProtocolMode(t *testing.T, fn func(t *testing.T, pc protoCase, m mode)) {
	for _, pc := range protoCases {
		for _, m := range modes {
			t.Run(pc.name+"/"+m.name, func(t *testing.T) { fn(t, pc, m) })
		}
	}
}

// TestServerToolIsInvisible: the model calls clock schedule; the client's
// response has no clock call and the text of both turns; the task is
// stored and a later request receives it when due. The task is already
// inside the due window, so it is stamped with the request id and never
// reaches that request's own followups (no hold), only the next request.
func TestServerToolIsInvisible(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	forEachProtocolMode(t, func(t *testing.T, pc protoCase, m mode) {
		session := "srv-" + pc.name + "-" + m.name
		task := "check the deploy " + session
		dueAt := time.Now().Add(30 * time.Second).Format(time.RFC3339)
		deleteMockRequests(t, d)
		d.script(t,
			map[string]any{"text": "Setting a reminder.", "finish": "tool_calls", "toolCalls": []any{clockCall(map[string]any{
				"action": "schedule", "taskId": "", "items": []any{map[string]any{"dueAt": dueAt, "task": task, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})}},
			map[string]any{"text": "Done, I will check it.", "finish": "stop"},
		)
		turn, raw := clientTurn(t, d, pc, m, session, "remind me to check the deploy")
		noServerCalls(t, turn, raw)
		assert.Contains(t, turn.Text, "Setting a reminder.")
		assert.Contains(t, turn.Text, "Done, I will check it.")
		assert.Equal(t, llm.FinishStop, turn.Finish.Reason)

		reqs := d.mockRequests(t)
		require.Len(t, reqs, 2, "original + one tool followup, no hold for a task of this very request")
		assert.Empty(t, reqs[1].Headers[hostapi.HeaderFollowup], "the followup marker never reaches the provider")
		// Followup ids extend the filter's own request id, never the
		// client's x-request-id (docs/failures.md).
		assert.Regexp(t, `^[0-9a-f]{32}:tool1$`, reqs[1].Headers["x-request-id"])
		assert.False(t, strings.HasPrefix(reqs[1].Headers["x-request-id"], reqs[0].Headers["x-request-id"]+":"),
			"followup id %q extends the client's %q", reqs[1].Headers["x-request-id"], reqs[0].Headers["x-request-id"])
		assert.Contains(t, reqs[1].Body, task, "the followup carries the tool call and its result")
		assert.NotContains(t, reqs[1].Body, `[scheduled task:\"`+task, "notBeforeRequestId covers the followups")
		assert.Equal(t, 1, strings.Count(reqs[1].Body, "[Time/Date]:"), "a followup is not tagged again")

		list := d.clock(t, session, map[string]any{"action": "list"})
		require.Len(t, list["items"], 1, "%v", list)

		deleteMockRequests(t, d)
		clientTurn(t, d, pc, m, session, "anything due?")
		got := d.mockRequests(t)
		require.NotEmpty(t, got)
		assert.Contains(t, got[0].Body, `[scheduled task:\"`+task+`\"]`)
	})
}

// TestStopMessage: <**stopMessage:"continue",2**> with a model that keeps
// answering stop gives exactly 3 provider requests for that turn, none with
// a tag; once cleared, a turn triggers nothing.
func TestStopMessage(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	forEachProtocolMode(t, func(t *testing.T, pc protoCase, m mode) {
		session := "stop-" + pc.name + "-" + m.name
		deleteMockRequests(t, d)
		turn, raw := clientTurn(t, d, pc, m, session, `<**stopMessage:"continue",2**>start working`)
		reqs := d.mockRequests(t)
		require.Len(t, reqs, 3, "original + 2 stopMessage followups")
		for _, r := range reqs {
			noTags(t, r.Body)
		}
		assert.Contains(t, reqs[1].Body, "continue")
		assert.Equal(t, llm.FinishStop, turn.Finish.Reason, raw)

		deleteMockRequests(t, d)
		clientTurn(t, d, pc, m, session, `<**stopMessage:clear**>thanks`)
		assert.Len(t, d.mockRequests(t), 1, "cleared: no followup")
	})
}

// TestHoldUntilDue: a task due in 3 s and a reply that stops: the client
// gets one response, after ≥ 3 s, continued with the reminder injected.
func TestHoldUntilDue(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	forEachProtocolMode(t, func(t *testing.T, pc protoCase, m mode) {
		session := "hold-" + pc.name + "-" + m.name
		task := "stretch " + session
		res := d.clock(t, session, map[string]any{"action": "schedule", "items": []any{map[string]any{
			"dueAt": time.Now().Add(63 * time.Second).Format(time.RFC3339), "task": task, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})
		require.Equal(t, true, res["ok"], "%v", res)
		deleteMockRequests(t, d)
		d.script(t, map[string]any{"text": "Waiting.", "finish": "stop"}, map[string]any{"text": "Time to stretch.", "finish": "stop"})
		start := time.Now()
		turn, _ := clientTurn(t, d, pc, m, session, "wait for my reminder")
		assert.GreaterOrEqual(t, time.Since(start), 2*time.Second, "held until the task was due")
		reqs := d.mockRequests(t)
		require.Len(t, reqs, 2, "original + one hold followup")
		assert.Contains(t, reqs[1].Body, `[scheduled task:\"`+task+`\"]`)
		assert.Contains(t, turn.Text, "Waiting.")
		assert.Contains(t, turn.Text, "Time to stretch.")
	})
}

// TestDisconnectCancelsHold: the client goes away mid-hold and the
// provider receives no request after that moment.
func TestDisconnectCancelsHold(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	for _, pc := range protoCases {
		t.Run(pc.name, func(t *testing.T) {
			session := "gone-" + pc.name
			res := d.clock(t, session, map[string]any{"action": "schedule", "items": []any{map[string]any{
				"dueAt": time.Now().Add(63 * time.Second).Format(time.RFC3339), "task": "never " + session, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})
			require.Equal(t, true, res["ok"], "%v", res)
			deleteMockRequests(t, d)
			ctx, cancel := context.WithTimeout(context.Background(), 1*time.Second)
			req, _ := http.NewRequestWithContext(ctx, "POST", d.proxyURL+pc.path, strings.NewReader(pc.body(session, "hold me")))
			for k, v := range pc.header(session) {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			cancel()
			require.Error(t, err, "the client gave up mid-hold")
			gone := time.Now()
			time.Sleep(3500 * time.Millisecond) // real time under test: the host process holds on its wall clock, past the moment the task came due
			reqs := d.mockRequests(t)
			require.NotEmpty(t, reqs)
			for _, r := range reqs {
				assert.True(t, r.ReceivedAt.Before(gone), "request at %v after the client left at %v", r.ReceivedAt, gone)
			}
			assert.Len(t, reqs, 1)
		})
	}
}

// TestLoopGuardStopsAt8Hops: a model that always calls clock is stopped
// after 8 followups and the client still gets a valid, terminated response.
func TestLoopGuardStopsAt8Hops(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	forEachProtocolMode(t, func(t *testing.T, pc protoCase, m mode) {
		session := "loop-" + pc.name + "-" + m.name
		deleteMockRequests(t, d)
		var script []map[string]any
		for i := 0; i < 12; i++ {
			script = append(script, map[string]any{"text": fmt.Sprintf("step %d.", i), "finish": "tool_calls",
				"toolCalls": []any{clockCall(map[string]any{"action": "get", "items": []any{}, "taskId": ""})}})
		}
		d.script(t, script...)
		turn, raw := clientTurn(t, d, pc, m, session, "loop forever")
		noServerCalls(t, turn, raw)
		assert.Len(t, d.mockRequests(t), 9, "original + 8 followups")
		// Clear the unused replies for the next case.
		req, _ := http.NewRequest("DELETE", d.mockURL+"/__mock/script", nil)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
	})
}

// The issue-8 scenarios: the first turn says "part one.", then chime
// continues and the provider says "part two.". The client must get the
// whole reply in one text block or message item (agent CLIs show only the
// last one), the same in JSON and SSE.
const (
	partOne   = "part one."
	partTwo   = "part two."
	wholeText = partOne + "\n\n" + partTwo // llm.Merge's separator
)

type continuation struct {
	name string
	// setup scripts the provider (and, for a hold, schedules the task) for
	// session and returns the user's message.
	setup func(t testing.TB, d *demo, session string) string
}

var continuations = []continuation{
	{"stopMessage", func(t testing.TB, d *demo, _ string) string {
		d.script(t, map[string]any{"text": partOne, "finish": "stop"}, map[string]any{"text": partTwo, "finish": "stop"})
		return `<**stopMessage:"go on",1**>hi`
	}},
	{"clock", func(t testing.TB, d *demo, _ string) string {
		d.script(t,
			map[string]any{"text": partOne, "finish": "tool_calls", "toolCalls": []any{clockCall(map[string]any{"action": "get", "items": []any{}, "taskId": ""})}},
			map[string]any{"text": partTwo, "finish": "stop"})
		return "what time is it?"
	}},
	{"hold", func(t testing.TB, d *demo, session string) string {
		// Due in about 2 s: just outside the 60 s due window, so this
		// request holds for it rather than getting it injected at once.
		res := d.clock(t, session, map[string]any{"action": "schedule", "items": []any{map[string]any{
			"dueAt": time.Now().Add(62 * time.Second).Format(time.RFC3339), "task": "stretch " + session, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})
		require.Equal(t, true, res["ok"], "%v", res)
		d.script(t, map[string]any{"text": partOne, "finish": "stop"}, map[string]any{"text": partTwo, "finish": "stop"})
		return "wait for my reminder"
	}},
}

// jsonTextBlocks counts the text blocks (Messages) or message items and
// their parts (Responses) of a JSON body; Chat has one content string.
func jsonTextBlocks(t testing.TB, p llm.Protocol, body []byte) int {
	t.Helper()
	n := 0
	switch p {
	case llm.Messages:
		for _, b := range gjson.GetBytes(body, "content").Array() {
			if b.Get("type").String() == "text" {
				n++
			}
		}
	case llm.Responses:
		for _, it := range gjson.GetBytes(body, "output").Array() {
			if it.Get("type").String() == "message" {
				n += len(it.Get("content").Array())
			}
		}
	default:
		n = 1
	}
	return n
}

// TestContinuationIsOneTextBlock: stopMessage, a clock interception and a
// hold, per protocol, streamed and not: one text block with the whole
// reply, and two provider requests behind it.
func TestContinuationIsOneTextBlock(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	for _, c := range continuations {
		for _, pc := range protoCases {
			texts := map[string]string{}
			for _, m := range modes {
				t.Run(c.name+"/"+pc.name+"/"+m.name, func(t *testing.T) {
					session := "one-" + c.name + "-" + pc.name + "-" + m.name
					deleteMockRequests(t, d)
					turn, raw := clientTurn(t, d, pc, m, session, c.setup(t, d, session))
					require.Len(t, d.mockRequests(t), 2, "the original and one followup")
					noServerCalls(t, turn, raw)
					assert.Equal(t, wholeText, turn.Text, raw)
					assert.Empty(t, turn.ToolCalls)
					assert.Equal(t, llm.FinishStop, turn.Finish.Reason)
					if !m.stream {
						assert.Equal(t, 1, jsonTextBlocks(t, protocolOf(pc), []byte(raw)), "one text block: %s", raw)
					}
					texts[m.name] = turn.Text
				})
			}
			assert.Equal(t, texts["json"], texts["sse"], "%s/%s: JSON and SSE clients get the same text", c.name, pc.name)
		}
	}
}
