package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

// protoCase builds a request for one protocol with the session carried the
// way real clients of that protocol carry it (docs/protocols.md#session-identity).
type protoCase struct {
	name, path string
	header     func(session string) map[string]string
	body       func(session, text string) string
}

var protoCases = []protoCase{
	{
		name: "chat", path: "/v1/chat/completions",
		header: func(s string) map[string]string { return map[string]string{"x-chime-session": s} },
		body: func(_, text string) string {
			return fmt.Sprintf(`{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":%q}]}`, text)
		},
	},
	{
		name: "responses", path: "/v1/responses",
		header: func(string) map[string]string { return nil },
		body: func(s, text string) string {
			return fmt.Sprintf(`{"model":"m","prompt_cache_key":%q,"input":[{"role":"user","content":[{"type":"input_text","text":%q}]}]}`, s, text)
		},
	},
	{
		name: "messages", path: "/v1/messages?beta=true",
		header: func(string) map[string]string { return nil },
		body: func(s, text string) string {
			uid := strconv.Quote(fmt.Sprintf(`{"device_id":"d","session_id":%q}`, s))
			return fmt.Sprintf(`{"model":"m","max_tokens":64,"metadata":{"user_id":%s},"messages":[{"role":"user","content":[{"type":"text","text":%q}]}]}`, uid, text)
		},
	},
}

// userTexts returns every user-authored text the provider received.
func userTexts(t testing.TB, path, body string) []string {
	t.Helper()
	require.True(t, gjson.Valid(body), "the provider must receive valid JSON")
	var out []string
	add := func(c gjson.Result, textType string) {
		if c.Type == gjson.String {
			out = append(out, c.String())
			return
		}
		c.ForEach(func(_, part gjson.Result) bool {
			if part.Get("type").String() == textType {
				out = append(out, part.Get("text").String())
			}
			return true
		})
	}
	switch {
	case strings.HasPrefix(path, "/v1/chat"):
		gjson.Get(body, "messages").ForEach(func(_, m gjson.Result) bool {
			if m.Get("role").String() == "user" {
				add(m.Get("content"), "text")
			}
			return true
		})
	case strings.HasPrefix(path, "/v1/responses"):
		in := gjson.Get(body, "input")
		if in.Type == gjson.String {
			return []string{in.String()}
		}
		in.ForEach(func(_, m gjson.Result) bool {
			if m.Get("role").String() == "user" {
				add(m.Get("content"), "input_text")
			}
			return true
		})
	default:
		gjson.Get(body, "messages").ForEach(func(_, m gjson.Result) bool {
			if m.Get("role").String() == "user" {
				add(m.Get("content"), "text")
			}
			return true
		})
	}
	return out
}

var timeTagRE = regexp.MustCompile("\\[Time/Date\\]: utc=`(\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d\\.\\d{3}Z)` " +
	"local=`(\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d:\\d\\d\\.\\d{3} [+-]\\d\\d:\\d\\d)` tz=`([^`]+)` nowMs=`(\\d+)` ntpOffsetMs=`(-?\\d+)`")

// checkTimeTag asserts exactly one docs/time.md#time-tag, consistent in itself
// and with the wall clock, rendered in zone tz.
func checkTimeTag(t testing.TB, texts []string, tz string) {
	t.Helper()
	all := strings.Join(texts, "\n")
	require.Equal(t, 1, strings.Count(all, "[Time/Date]:"), "exactly one time tag: %q", all)
	m := timeTagRE.FindStringSubmatch(all)
	require.NotNil(t, m, "time tag format: %q", all)
	utc, err := time.Parse("2006-01-02T15:04:05.000Z", m[1])
	require.NoError(t, err)
	nowMs, _ := strconv.ParseInt(m[4], 10, 64)
	assert.Equal(t, utc.UnixMilli(), nowMs, "nowMs renders the same instant as utc")
	loc, err := time.LoadLocation(tz)
	require.NoError(t, err)
	assert.Equal(t, tz, m[3])
	assert.Equal(t, utc.In(loc).Format("2006-01-02 15:04:05.000 -07:00"), m[2], "local is utc in the requested zone")
	assert.WithinDuration(t, time.Now(), utc, 30*time.Second)
}

func noTags(t testing.TB, body string) {
	t.Helper()
	assert.NotContains(t, body, "<**")
	assert.NotContains(t, body, `\u003c**`)
}

// TestRequestPathThroughChimeUp: for every protocol, the provider never
// sees a directive, sees exactly one time tag in the requested zone and the
// clock tool; the directive's state lands in the host.
func TestRequestPathThroughChimeUp(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	for _, pc := range protoCases {
		t.Run(pc.name, func(t *testing.T) {
			session := "sess-tag-" + pc.name
			hdr := pc.header(session)
			if hdr == nil {
				hdr = map[string]string{}
			}
			hdr["x-chime-timezone"] = "America/Los_Angeles"
			deleteMockRequests(t, d)
			code, out := postJSON(t, d.proxyURL+pc.path, hdr,
				pc.body(session, `<**stopMessage:"keep going",3**>please <**nonsense:x**>fix the build`))
			require.Equal(t, http.StatusOK, code, string(out))
			reqs := d.mockRequests(t)
			require.Len(t, reqs, 4, "the original and the 3 stopMessage followups (the mock answers stop)")
			body := reqs[0].Body
			noTags(t, body)
			texts := userTexts(t, pc.path, body)
			assert.Contains(t, texts, "please fix the build")
			checkTimeTag(t, texts, "America/Los_Angeles")
			assert.Contains(t, toolNames(pc.path, body), "clock")

			// Without the header the zone falls back to the plugin config (UTC).
			deleteMockRequests(t, d)
			code, _ = postJSON(t, d.proxyURL+pc.path, pc.header(session), pc.body(session, "again"))
			require.Equal(t, http.StatusOK, code)
			again := d.mockRequests(t)
			require.Len(t, again, 1, "stopMessage used up: no followup")
			checkTimeTag(t, userTexts(t, pc.path, again[0].Body), "UTC")

			sessions := getJSON(t, d.hostURL+"/api/sessions")
			var found bool
			for _, s := range gjson.Parse(sessions).Array() {
				if s.Get("id").String() == session {
					found = true
					assert.Equal(t, int64(3), s.Get("stopMessage.maxRepeats").Int(), "stopMessage directive stored: %s", s.Raw)
				}
			}
			assert.True(t, found, "session %s known to the host: %s", session, sessions)
		})
	}
}

func toolNames(path, body string) []string {
	var names []string
	gjson.Get(body, "tools").ForEach(func(_, tl gjson.Result) bool {
		n := tl.Get("name").String()
		if n == "" {
			n = tl.Get("function.name").String()
		}
		names = append(names, n)
		return true
	})
	return names
}

func deleteMockRequests(t testing.TB, d *demo) {
	t.Helper()
	d.clearMockRequests(t)
}

func getJSON(t testing.TB, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}

// TestReminderReservation: a task becomes due 2 s after it is scheduled;
// it is injected into the first request after that, rolled back when the
// provider fails (re-injected next time), and never injected again once a
// response succeeded. A repeating task re-arms to its next occurrence. The
// model answers with a client tool call, which is never held or continued
// (docs/continuation.md#holds), so each client request is exactly one provider request.
func TestReminderReservation(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	for _, pc := range protoCases {
		t.Run(pc.name, func(t *testing.T) {
			session := "sess-rem-" + pc.name
			clientTool := map[string]any{"finish": "tool_calls", "toolCalls": []any{map[string]any{"name": "bash", "arguments": map[string]any{"cmd": "ls"}}}}
			send := func(reply map[string]any) (int, []string) {
				deleteMockRequests(t, d)
				d.script(t, reply)
				code, _ := postJSON(t, d.proxyURL+pc.path, pc.header(session), pc.body(session, "status?"))
				reqs := d.mockRequests(t)
				require.Len(t, reqs, 1)
				noTags(t, reqs[0].Body)
				return code, userTexts(t, pc.path, reqs[0].Body)
			}
			reminder := `[scheduled task:"water the plants ` + pc.name + `"]`
			// Due window is 60 s: due at now+62s means due in 2 s.
			dueAt := time.Now().Add(62 * time.Second)
			res := d.clock(t, session, map[string]any{"action": "schedule", "items": []any{map[string]any{
				"dueAt": dueAt.Format(time.RFC3339), "task": "water the plants " + pc.name, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})
			require.Equal(t, true, res["ok"], "%v", res)

			_, texts := send(clientTool)
			assert.NotContains(t, strings.Join(texts, "\n"), reminder, "not due yet")

			time.Sleep(time.Until(dueAt.Add(-60*time.Second)) + 300*time.Millisecond) // real time under test: the host process makes the task due

			d.expectRejections(1) // the scripted 500 below
			code, texts := send(map[string]any{"status": 500, "error": "upstream exploded"})
			assert.Equal(t, http.StatusInternalServerError, code)
			assert.Equal(t, 1, strings.Count(strings.Join(texts, "\n"), reminder), "injected once when due: %q", texts)

			code, texts = send(clientTool)
			assert.Equal(t, http.StatusOK, code)
			assert.Equal(t, 1, strings.Count(strings.Join(texts, "\n"), reminder), "re-injected after the rollback: %q", texts)

			_, texts = send(clientTool)
			assert.NotContains(t, strings.Join(texts, "\n"), reminder, "committed: never injected again")

			// A daily task re-arms to the next day on commit.
			dueAt = time.Now().Add(61 * time.Second).Truncate(time.Second)
			res = d.clock(t, session, map[string]any{"action": "schedule", "items": []any{map[string]any{
				"dueAt": dueAt.Format(time.RFC3339), "task": "stand-up " + pc.name, "tool": "", "arguments": "", "repeat": "daily", "maxRuns": 0}}})
			require.Equal(t, true, res["ok"], "%v", res)
			time.Sleep(time.Until(dueAt.Add(-60*time.Second)) + 300*time.Millisecond) // real time under test: the host process makes the task due
			_, texts = send(clientTool)
			assert.Contains(t, strings.Join(texts, "\n"), `[scheduled task:"stand-up `+pc.name+`"]`)
			// The filter reports the commit once the response has started
			// to reach the client, after the client may have read it all:
			// the re-arm can land a moment after the answer.
			var item map[string]any
			var list map[string]any
			for deadline := time.Now().Add(10 * time.Second); ; {
				item = nil
				list = d.clock(t, session, map[string]any{"action": "list"})
				for _, it := range list["items"].([]any) {
					if m := it.(map[string]any); m["task"] == "stand-up "+pc.name {
						item = m
					}
				}
				if item == nil || fmt.Sprint(item["deliveryCount"]) != "0" || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond) // poll: the commit is another call of the filter
			}
			require.NotNil(t, item, "the daily task is still listed: %v", list)
			next, err := time.Parse(time.RFC3339, fmt.Sprint(item["dueAt"]))
			require.NoError(t, err, "%v", item)
			assert.Equal(t, dueAt.Add(24*time.Hour).Unix(), next.Unix(), "re-armed to tomorrow: %v", item)
			assert.EqualValues(t, 1, item["deliveryCount"])
		})
	}
}

// TestFailOpenWithHostKilled: host, proxy and mock run as separate
// processes; after the host is SIGKILLed requests still succeed, tags are
// still stripped and the time tag is still there.
func TestFailOpenWithHostKilled(t *testing.T) {
	d := newDemo(t)
	host := d.host(t)
	d.proxyAndMock(t)
	pc := protoCases[0]
	code, _ := postJSON(t, d.proxyURL+pc.path, pc.header("s-fo"), pc.body("s-fo", "warm up"))
	require.Equal(t, http.StatusOK, code)

	host.kill(syscall.SIGKILL)
	for _, pc := range protoCases {
		deleteMockRequests(t, d)
		code, out := postJSON(t, d.proxyURL+pc.path, pc.header("s-fo"), pc.body("s-fo", "<**clock:clear**>still there?"))
		require.Equal(t, http.StatusOK, code, "%s: %s", pc.name, out)
		reqs := d.mockRequests(t)
		require.Len(t, reqs, 1)
		noTags(t, reqs[0].Body)
		texts := userTexts(t, pc.path, reqs[0].Body)
		assert.Contains(t, texts, "still there?")
		checkTimeTag(t, texts, "UTC")
	}
}

// TestScheduleSurvivesSIGKILL: a task whose schedule returned ok is on disk
// even if the host dies the next instant (write-through, docs/clock-tool.md).
func TestScheduleSurvivesSIGKILL(t *testing.T) {
	d := newDemo(t)
	host := d.host(t)
	dueAt := time.Now().Add(3 * time.Hour).Format(time.RFC3339)
	res := d.clock(t, "s-durable", map[string]any{"action": "schedule", "items": []any{map[string]any{
		"dueAt": dueAt, "task": "survive", "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})
	require.Equal(t, true, res["ok"], "%v", res)
	host.kill(syscall.SIGKILL)

	d.host(t)
	list := d.clock(t, "s-durable", map[string]any{"action": "list"})
	items, _ := list["items"].([]any)
	require.Len(t, items, 1, "%v", list)
	assert.Equal(t, "survive", items[0].(map[string]any)["task"])
}

// TestDirectiveWhileHostDownAppliedAfterRestart: a clock directive sent
// while the host is down gets its 200 (fail open); the filter keeps it and
// the session's first request after the host is back creates the task
// (issue 17 defect 5; on main the task never existed).
func TestDirectiveWhileHostDownAppliedAfterRestart(t *testing.T) {
	d := newDemo(t)
	host := d.host(t)
	d.proxyAndMock(t)
	pc := protoCases[0]
	host.kill(syscall.SIGKILL)
	dueAt := time.Now().Add(3 * time.Hour).UTC().Format(time.RFC3339)
	code, out := postJSON(t, d.proxyURL+pc.path, pc.header("s-kept"),
		pc.body("s-kept", `<**clock:{"dueAt":"`+dueAt+`","task":"written while down"}**>remind me`))
	require.Equal(t, http.StatusOK, code, "%s", out)

	d.host(t)
	code, out = postJSON(t, d.proxyURL+pc.path, pc.header("s-kept"), pc.body("s-kept", "back again"))
	require.Equal(t, http.StatusOK, code, "%s", out)
	list := d.clock(t, "s-kept", map[string]any{"action": "list"})
	items, _ := list["items"].([]any)
	require.Len(t, items, 1, "%v", list)
	assert.Equal(t, "written while down", items[0].(map[string]any)["task"])
}
