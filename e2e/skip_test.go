package e2e

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/mockllm"
)

// Skipping prepare (docs/architecture.md#skipping-prepare) must be
// invisible: whatever comes into being for a session, by any path, is
// handled on the session's very next request, even when the request
// before it was forwarded without asking the host. Each case first shows
// that the session's requests are being skipped, then makes the change,
// then sends one request and looks at what the provider got.
func TestSkipPrepareIsInvisible(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	pc := protoCases[0] // chat; the shortcut is protocol-blind
	adminMetric := func(name string) float64 {
		resp, err := http.Get(d.adminURL + "/stats/prometheus")
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var sum float64
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
				v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
				sum += v
			}
		}
		return sum
	}
	clientTool := map[string]any{"finish": "tool_calls", "toolCalls": []any{map[string]any{"name": "bash", "arguments": map[string]any{"cmd": "ls"}}}}
	// Each session has a mock queue of its own (x-mock-queue).
	headers := func(session string) map[string]string {
		h := pc.header(session)
		h[mockllm.QueueHeader] = session
		return h
	}
	script := func(session string, replies ...map[string]any) {
		t.Helper()
		if code, out := postJSON(t, d.mockURL+"/__mock/script?queue="+session, nil, replies); code/100 != 2 {
			t.Fatalf("script: %d %s", code, out)
		}
	}
	sendWith := func(session, text string, reply map[string]any) (int, []string, string) {
		t.Helper()
		deleteMockRequests(t, d)
		script(session, reply)
		code, out := postJSON(t, d.proxyURL+pc.path, headers(session), pc.body(session, text))
		reqs := d.mockRequests(t)
		require.Len(t, reqs, 1, "one provider request: %s", out)
		noTags(t, reqs[0].Body)
		return code, userTexts(t, pc.path, reqs[0].Body), string(out)
	}
	send := func(session, text string) (int, []string, string) {
		t.Helper()
		return sendWith(session, text, map[string]any{"text": "ok"})
	}
	// quiet sends requests until one of session is forwarded without a
	// prepare: the filter learns the generation by its first poll after
	// start, a tick in, so the first requests are prepared.
	quiet := func(session string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; {
			before := adminMetric("chime_prepare_skipped_total")
			_, texts, _ := send(session, "anything new?")
			require.Contains(t, texts[len(texts)-1], "[Time/Date]: utc=", "a skipped request still gets its time tag")
			if adminMetric("chime_prepare_skipped_total") > before {
				return
			}
			require.True(t, time.Now().Before(deadline), "no request of %s was ever skipped", session)
			time.Sleep(200 * time.Millisecond) // real processes: the filter's first generation poll is a tick away
		}
	}
	skipped := func() float64 { return adminMetric("chime_prepare_skipped_total") }

	t.Run("reminder scheduled through the host API", func(t *testing.T) {
		session := "skip-api-reminder"
		quiet(session)
		// Inside the due window at once: due now.
		res := d.clock(t, session, map[string]any{"action": "schedule", "items": []any{map[string]any{
			"dueAt": time.Now().Add(20 * time.Second).Format(time.RFC3339), "task": "call the API back", "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})
		require.Equal(t, true, res["ok"], "%v", res)
		before := skipped()
		_, texts, _ := send(session, "and now?")
		assert.Contains(t, strings.Join(texts, "\n"), `[scheduled task:"call the API back"]`, "the very next request carries it")
		assert.Equal(t, before, skipped(), "that request was prepared")
	})

	t.Run("directive", func(t *testing.T) {
		session := "skip-directive"
		quiet(session)
		due := time.Now().Add(20 * time.Second).UTC().Format(time.RFC3339)
		_, texts, _ := send(session, `remind me <**clock:{"dueAt":"`+due+`","task":"typed by the user"}**>`)
		assert.NotContains(t, strings.Join(texts, "\n"), `typed by the user"]`, "never into the request that scheduled it")
		_, texts, _ = send(session, "next")
		assert.Contains(t, strings.Join(texts, "\n"), `[scheduled task:"typed by the user"]`, "the very next request carries it")
	})

	t.Run("stopMessage", func(t *testing.T) {
		session := "skip-stop"
		quiet(session)
		// The directive's own request ends with a client tool call: no stop.
		deleteMockRequests(t, d)
		script(session, clientTool)
		code, out := postJSON(t, d.proxyURL+pc.path, headers(session), pc.body(session, `go <**stopMessage:"keep going, skip test",1**>`))
		require.Equal(t, http.StatusOK, code, "%s", out)
		// The next request finishes with stop: the stopMessage continues it.
		deleteMockRequests(t, d)
		script(session, map[string]any{"text": "done?"}, map[string]any{"text": "continued"})
		code, out = postJSON(t, d.proxyURL+pc.path, headers(session), pc.body(session, "next"))
		require.Equal(t, http.StatusOK, code, "%s", out)
		reqs := d.mockRequests(t)
		require.Len(t, reqs, 2, "the request and its stopMessage followup")
		assert.Contains(t, strings.Join(userTexts(t, pc.path, reqs[1].Body), "\n"), "keep going, skip test")
		assert.Contains(t, gjson.Get(string(out), "choices.0.message.content").String(), "continued")
	})

	t.Run("timer notice after cancel_timer", func(t *testing.T) {
		session := "skip-timer"
		quiet(session)
		// A 2 s timer through the host API, waited on for a moment only.
		code, out := postJSON(t, d.hostURL+"/v1/tools/execute", map[string]string{"authorization": "Bearer " + hostToken},
			map[string]any{"sessionId": session, "requestId": "skip-timer-1", "name": hostapi.TimerToolName,
				"arguments": map[string]any{"total_duration": 2, "timeout_duration": 0.05, "timer_id": "", "reason": "the build"}})
		require.Equal(t, http.StatusOK, code, "%s", out)
		id := gjson.GetBytes(out, "timer_id").String()
		require.NotEmpty(t, id, "%s", out)
		code, out = postJSON(t, d.hostURL+"/api/sessions/"+session+"/timers/"+id+"/cancel", map[string]string{
			"authorization": "Bearer " + hostToken}, map[string]any{"reason": "background"})
		require.Equal(t, http.StatusOK, code, "%s", out)
		ends := time.Now().Add(2 * time.Second)
		// A tool call ends these turns: no hold waits for the notice.
		_, texts, _ := sendWith(session, "before it ends", clientTool)
		assert.NotContains(t, strings.Join(texts, "\n"), "[timer completed:")
		time.Sleep(time.Until(ends) + 300*time.Millisecond) // real time under test: the host process ends the timer
		_, texts, _ = sendWith(session, "after it ended", clientTool)
		assert.Contains(t, strings.Join(texts, "\n"), `[timer completed: "the build" id=`+id, "the very next request carries the notice")
	})

	t.Run("unchanged sessions keep skipping", func(t *testing.T) {
		session := "skip-plain"
		quiet(session)
		before := skipped()
		for range 3 {
			send(session, "still nothing?")
		}
		assert.Equal(t, before+3, skipped(), "a quiet session's requests all skip prepare")
	})
}
