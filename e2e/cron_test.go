package e2e

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// TestCronJobsWake: cron jobs (docs/cron.md) through `chime up`. A main
// job's text reaches the session's next wake; an isolated job runs in a
// session of its own, from the session's template.
func TestCronJobsWake(t *testing.T) {
	d := newDemo(t).withHostConfig(t, quickWakes+shortHolds)
	d.up(t)

	// addJob creates a job through the API and returns its id.
	addJob := func(t *testing.T, session string, body map[string]any) string {
		t.Helper()
		code, out := doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+session+"/jobs", body)
		require.Equal(t, http.StatusCreated, code, string(out))
		return gjson.GetBytes(out, "jobId").String()
	}
	pause := func(t *testing.T, session, id string) {
		t.Helper()
		code, out := doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+session+"/jobs/"+id+"/pause", nil)
		require.Equal(t, http.StatusOK, code, string(out))
	}

	t.Run("main", func(t *testing.T) {
		t.Parallel()
		c := &conv{d: d, pc: protoCases[2], m: modes[0], session: "cron-main"}
		c.script(t, map[string]any{"text": "hello"}, map[string]any{"text": "Done: the plants are watered."},
			map[string]any{"text": "HEARTBEAT_OK"}, map[string]any{"text": "HEARTBEAT_OK"})
		// The job exists before the client's request, so the host keeps
		// that request as the session's template.
		id := addJob(t, c.session, map[string]any{"schedule": "3s", "text": "water the plants", "target": "main"})
		h := c.headers()
		h["x-api-key"] = "sk-cron-main"
		code, out := postJSON(t, d.proxyURL+c.pc.path, h, c.body("hi"))
		require.Equal(t, http.StatusOK, code, string(out))

		waitUntil(t, "the cron job's wake", 30*time.Second, func() bool { return len(c.wakeRequests(t)) >= 1 })
		pause(t, c.session, id)
		w := c.wakeRequests(t)[0]
		assert.Equal(t, "sk-cron-main", w.Headers["x-api-key"], "the session's credentials")
		assert.Contains(t, strings.Join(userTexts(t, c.pc.path, w.Body), "\n"), "water the plants", "the job's text in the wake")
		waitUntil(t, "the run record", 10*time.Second, func() bool { return len(c.runs(t)) >= 1 })
		assert.Equal(t, "cron", c.runs(t)[0].Get("reason").String(), c.runs(t)[0].Raw)

		code, out = getAuthed(t, d.hostURL+"/api/sessions/"+c.session+"/jobs/"+id)
		require.Equal(t, http.StatusOK, code, string(out))
		assert.Equal(t, "ok", gjson.GetBytes(out, "lastStatus").String(), string(out))
		assert.GreaterOrEqual(t, gjson.GetBytes(out, "runs").Int(), int64(1))
	})

	t.Run("isolated", func(t *testing.T) {
		t.Parallel()
		c := &conv{d: d, pc: protoCases[0], m: modes[0], session: "cron-iso"}
		c.script(t, map[string]any{"text": "hello"}, map[string]any{"text": "Here is the weekly summary."},
			map[string]any{"text": "another summary"}, map[string]any{"text": "another summary"})
		// The job exists before the client's request, so the host keeps
		// that request as the session's template.
		id := addJob(t, c.session, map[string]any{"schedule": "1h", "text": "write the weekly summary", "target": "isolated"})
		h := c.headers()
		h["authorization"] = "Bearer sk-cron-iso"
		code, out := postJSON(t, d.proxyURL+c.pc.path, h, c.body("hi"))
		require.Equal(t, http.StatusOK, code, string(out))

		// The filter hands the template over after the answer, without
		// waiting: run the job by hand until the template is there.
		waitUntil(t, "an isolated run", 20*time.Second, func() bool {
			code, out := doJSON(t, http.MethodPost, d.hostURL+"/api/sessions/"+c.session+"/jobs/"+id+"/run", nil)
			require.Equal(t, http.StatusOK, code, string(out))
			return gjson.GetBytes(out, "lastStatus").String() == "ok"
		})
		ws := c.wakeRequests(t)
		require.Len(t, ws, 1)
		assert.Regexp(t, `^wake:cron-iso:cron:`+id+`:\d+$`, ws[0].Headers["x-request-id"], "the run's own session id")
		assert.Equal(t, "Bearer sk-cron-iso", ws[0].Headers["authorization"])
		assert.Contains(t, strings.Join(userTexts(t, c.pc.path, ws[0].Body), "\n"), "write the weekly summary")
		sent := 0
		for _, r := range c.runs(t) { // runs that found no template yet are skipped
			assert.Equal(t, "cron", r.Get("reason").String(), r.Raw)
			if r.Get("status").String() == "sent" {
				sent++
				assert.Equal(t, "cron-iso:cron:"+id, r.Get("isolated").String(), r.Raw)
			}
		}
		assert.Equal(t, 1, sent, "one isolated run sent")
	})
}
