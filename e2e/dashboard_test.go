package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
)

// The dashboard (docs/dashboard.md) in a real headless Chromium, driven
// through chromedp against `chime up` with the mock provider. Chromium is
// Debian's `chromium` (.ci/run installs it). Set CHIME_DOCS_SCREENSHOTS=1
// to refresh the screenshots under docs/img.

// browser starts a headless Chromium at 1280×800 and returns its context.
// Without chromium the test fails under CI and is skipped elsewhere.
func browser(t *testing.T) context.Context {
	t.Helper()
	var path string
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium is not installed: the dashboard's browser tests need it (apt-get install chromium; .ci/run does)")
		}
		t.Skip("chromium is not installed; CI installs it and runs this test")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-gpu", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	require.NoError(t, chromedp.Do(ctx, chromedp.EmulateViewport(1280, 800)))
	return ctx
}

// within runs actions with a time limit on the browser's context.
func within(t *testing.T, ctx context.Context, d time.Duration, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(c, steps...); err != nil {
		// What the page showed, to tell a wrong page from a slow one.
		dc, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		page, _ := chromedp.Run(dc, chromedp.Evaluate[string](`document.body.outerHTML`))
		if len(page) > 6000 {
			page = page[:6000] + "…"
		}
		t.Fatalf("%s: %v\npage:\n%s", what, err, page)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	c, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	// One step inside the page, like click: nodes come and go on re-render.
	s, err := chromedp.Run(c, chromedp.Poll[string](`(() => { const el = document.querySelector(`+strconv.Quote(sel)+`); return el ? el.innerText.trim() || "\u0000" : null })()`))
	require.NoError(t, err, "text of %s", sel)
	return strings.TrimPrefix(s, "\x00")
}

// click clicks sel once it is there, in one step inside the page: the
// page re-renders on every change notice, so a node found by one protocol
// call may be gone by the next. set, if any, gives input values first
// (selector → value).
func click(sel string, set ...[2]string) chromedp.Action[chromedp.Void] {
	var js strings.Builder
	js.WriteString("(() => { const el = document.querySelector(" + strconv.Quote(sel) + "); if (!el) return false;")
	for _, kv := range set {
		js.WriteString(" { const i = document.querySelector(" + strconv.Quote(kv[0]) + "); if (!i) return false; i.value = " + strconv.Quote(kv[1]) + "; }")
	}
	js.WriteString(" el.click(); return true; })()")
	return chromedp.Poll[chromedp.Void](js.String())
}

// screenshot saves the viewport as name.png under dir, and, for the
// pictures of the docs (docs true), under docs/img when
// CHIME_DOCS_SCREENSHOTS is set.
func screenshot(t *testing.T, ctx context.Context, dir, name string, docs bool) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
	if docs && os.Getenv("CHIME_DOCS_SCREENSHOTS") != "" {
		require.NoError(t, os.WriteFile(filepath.Join(repoRoot(), "docs", "img", "dashboard-"+name+".png"), png, 0o644))
	}
	t.Logf("screenshot %s", filepath.Join(dir, name+".png"))
}

// seconds parses a countdown like 9:58 or 1:02:03.
func seconds(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, p := range strings.Split(strings.TrimSpace(s), ":") {
		var v int
		_, err := fmt.Sscanf(p, "%d", &v)
		require.NoError(t, err, "countdown %q", s)
		n = n*60 + v
	}
	return n
}

func clockSchedule(task string, due time.Time) map[string]any {
	return timerCall("clock", map[string]any{"action": "schedule", "taskId": "", "items": []any{map[string]any{
		"dueAt": due.Format(time.RFC3339), "task": task, "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}})
}

func timerState(t *testing.T, d *demo, session, id string) string {
	t.Helper()
	for _, tm := range gjson.Parse(getJSON(t, d.hostURL+"/api/sessions/"+session+"/timers")).Array() {
		if tm.Get("timerId").String() == id {
			return tm.Get("status").String()
		}
	}
	t.Fatalf("timer %s not in the API", id)
	return ""
}

func TestDashboardBrowser(t *testing.T) {
	ctx := browser(t)
	shots := t.TempDir()
	d := newDemo(t)
	d.up(t)

	// A session with a clock task and a running timer, made by a real
	// request through the proxy: the model schedules and starts a timer
	// without waiting on it.
	c := &conv{d: d, pc: protoCases[0], m: modes[0], session: "dash-build"}
	c.script(t,
		map[string]any{"toolCalls": []any{clockSchedule("check the deploy", time.Now().Add(40*time.Minute)), newTimer(600, 0.2, "build")}},
		map[string]any{"text": "Started."},
	)
	turn, _ := c.ask(t, "start the build and remind me")
	assert.Contains(t, turn.Text, "Started.")
	ts := c.timers(t)
	require.Len(t, ts, 1)
	tid := ts[0].Get("timerId").String()
	row := `tr[data-timer="` + tid + `"]`

	// The sessions list, read-only from loopback without a token.
	within(t, ctx, 20*time.Second, "sessions list",
		chromedp.Navigate(d.hostURL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-session="dash-build"]`)))
	assert.Contains(t, text(t, ctx, `tr[data-session="dash-build"]`), "dash-build")
	assert.Equal(t, "read-only", text(t, ctx, "#token-state"))
	within(t, ctx, 10*time.Second, "live stream", chromedp.WaitVisible(chromedp.CSS(`#live.on`)))
	screenshot(t, ctx, shots, "sessions", false)

	// The session page: the timer counts down in the page.
	within(t, ctx, 20*time.Second, "session page",
		click(`tr[data-session="dash-build"] a`),
		chromedp.WaitVisible(chromedp.CSS(row+` .countdown`)))
	first := seconds(t, text(t, ctx, row+" .countdown"))
	assert.InDelta(t, 600, first, 15, "a 10-minute timer just started")
	pc, cancel := context.WithTimeout(ctx, 10*time.Second)
	later, err := chromedp.Run(pc, chromedp.Poll[string](fmt.Sprintf(
		`(() => { const el = document.querySelector(%q); return el && el.textContent !== %q ? el.textContent : null })()`,
		row+" .countdown", text(t, ctx, row+" .countdown"))))
	cancel()
	require.NoError(t, err, "the countdown did not move")
	assert.Less(t, seconds(t, later), first, "the countdown goes down")
	assert.Contains(t, text(t, ctx, `[data-panel="tasks"]`), "hidden", "task text needs the token")

	// The timeline shows the task and the timer.
	within(t, ctx, 10*time.Second, "timeline",
		chromedp.WaitReady(chromedp.CSS(`[data-panel="timeline"] svg [data-kind="task"]`)),
		chromedp.WaitReady(chromedp.CSS(`[data-panel="timeline"] svg [data-kind="timer"][data-id="`+tid+`"]`)))

	// A control without the token: the host refuses and the page says why.
	within(t, ctx, 10*time.Second, "pause without a token",
		click(row+` button[data-action="pause"]`),
		chromedp.WaitVisible(chromedp.CSS(`#control-message`)))
	assert.Contains(t, text(t, ctx, "#control-message"), "controls need the host token")
	assert.Equal(t, "Running", timerState(t, d, c.session, tid))

	// With the token: text appears, and pause, resume and stop work.
	within(t, ctx, 10*time.Second, "token",
		chromedp.SendKeys(chromedp.CSS("#token"), hostToken),
		click("#token-save"),
		chromedp.WaitVisible(chromedp.CSS(`#token-clear`)))
	within(t, ctx, 10*time.Second, "task text", chromedp.Poll[chromedp.Void](
		`document.querySelector('[data-panel="tasks"]').textContent.includes('check the deploy')`))

	// A second timer, started through the proxy while the page is open,
	// appears without a reload (the change stream).
	c.script(t,
		map[string]any{"toolCalls": []any{newTimer(1800, 0.2, "deploy")}},
		map[string]any{"text": "Deploying."},
	)
	c.ask(t, "deploy too")
	within(t, ctx, 10*time.Second, "live update",
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('[data-panel="timers"] tr[data-timer]').length === 2`))

	within(t, ctx, 10*time.Second, "pause",
		click(row+` button[data-action="pause"]`, [2]string{row + ` input[data-pause-seconds]`, "120"}),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-status="Paused"]`)))
	assert.Equal(t, "Paused", timerState(t, d, c.session, tid))
	assert.Equal(t, "Paused", text(t, ctx, row+` [data-role="status"]`))
	assert.Contains(t, text(t, ctx, row), "resumes in 2 min", "paused for 120 s")
	within(t, ctx, 10*time.Second, "zoom", click(`[data-panel="timeline"] .zoom button`),
		chromedp.WaitReady(chromedp.CSS(`[data-panel="timeline"] svg[data-span="3600000"] [data-kind="timer"]`)))
	screenshot(t, ctx, shots, "session", false)

	within(t, ctx, 10*time.Second, "resume",
		click(row+` button[data-action="resume"]`),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-status="Running"]`)))
	assert.Equal(t, "Running", timerState(t, d, c.session, tid))

	within(t, ctx, 10*time.Second, "stop",
		click(row+` button[data-action="stop"]`),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-status="Stopped"]`)))
	assert.Equal(t, "Stopped", timerState(t, d, c.session, tid))

	// The history view lists the transitions with their reasons.
	within(t, ctx, 10*time.Second, "history",
		chromedp.Navigate(d.hostURL+"/ui/#/s/dash-build/history"),
		chromedp.WaitVisible(chromedp.CSS(`[data-panel="history"] tr[data-kind="timer"]`)))
	hist := text(t, ctx, `[data-panel="history"]`)
	for _, want := range []string{"Paused", "Running", "Stopped", "pause from the dashboard", "stop from the dashboard", tid} {
		assert.Contains(t, hist, want)
	}
	screenshot(t, ctx, shots, "history", false)

	// Every panel of the session page is there: the host has all their APIs.
	within(t, ctx, 10*time.Second, "session again",
		chromedp.Navigate(d.hostURL+"/ui/#/s/dash-build"),
		chromedp.WaitVisible(chromedp.CSS(`[data-panel="timers"]`)))
	for _, p := range []string{"tasks", "jobs", "heartbeat", "events", "runs", "deliveries"} {
		n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('[data-panel="`+p+`"] h2').length`))
		require.NoError(t, err)
		assert.Equal(t, 1, n, "panel %s", p)
	}
	assert.NotContains(t, text(t, ctx, `[data-panel="deliveries"]`), "404")
}

// controlMessage waits until the page's message of the last control says want.
func controlMessage(want string) chromedp.Action[chromedp.Void] {
	return chromedp.Poll[chromedp.Void](`(() => { const el = document.getElementById('control-message'); return !!el && el.textContent.includes(` + strconv.Quote(want) + `) })()`)
}

// failingHook is a webhook receiver that reads each delivery and then
// drops the connection without an answer: the host cannot know whether it
// arrived, so the entry becomes `unknown` at once (a `failed` entry needs
// five attempts over about 13 minutes of retry delays).
func failingHook(t *testing.T) (url string, hits *atomic.Int32) {
	t.Helper()
	hits = new(atomic.Int32)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		hits.Add(1)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/hook", hits
}

func deliveriesOf(t *testing.T, d *demo, session string) []gjson.Result {
	t.Helper()
	code, out := getAuthed(t, d.hostURL+"/api/sessions/"+session+"/deliveries")
	require.Equal(t, http.StatusOK, code, string(out))
	return gjson.ParseBytes(out).Array()
}

// TestDashboardCronAndDelivery: a cron job created from the page's form
// fires (a wake reaches the mock provider), its run shows in the runs
// panel and the timeline, its reply goes to a webhook that never answers,
// and the page's Retry button sends that delivery again.
func TestDashboardCronAndDelivery(t *testing.T) {
	ctx := browser(t)
	shots := t.TempDir()
	hook, hits := failingHook(t)
	d := newDemo(t).withHostConfig(t, quickWakes+"delivery:\n  connectors: [webhook]\n  webhook: {url: \""+hook+"\"}\n"+shortHolds)
	d.up(t)

	// A session the host can wake: its request through the proxy, with
	// credentials, is kept as the wake template; a heartbeat a day away
	// makes it wakeable without beating.
	c := &conv{d: d, pc: protoCases[0], m: modes[0], session: "dash-cron"}
	// The first request also starts a timer, for the picture.
	c.script(t, map[string]any{"toolCalls": []any{newTimer(1800, 0.2, "watch the queue")}}, map[string]any{"text": "hello"},
		map[string]any{"text": "The queue is empty."},
		map[string]any{"text": "Still empty."}, map[string]any{"text": "Empty again."},
		map[string]any{"text": "Nothing new."}, map[string]any{"text": "All quiet."})
	h := c.headers()
	h["authorization"] = "Bearer sk-dash"
	code, out := postJSON(t, d.proxyURL+c.pc.path, h, c.body(`hi <**heartbeat:"24h"**>`))
	require.Equal(t, http.StatusOK, code, string(out))

	within(t, ctx, 20*time.Second, "session page with the token",
		chromedp.Navigate(d.hostURL+"/ui/#/s/dash-cron"),
		chromedp.WaitVisible(chromedp.CSS(`[data-form="add-job"]`)),
		chromedp.SendKeys(chromedp.CSS("#token"), hostToken),
		click("#token-save"),
		chromedp.WaitVisible(chromedp.CSS(`#token-clear`)))
	within(t, ctx, 10*time.Second, "heartbeat panel", chromedp.Poll[chromedp.Void](
		`(document.querySelector('[data-panel="heartbeat"] input[name="every"]') || {}).value === '24h0m0s'`))
	assert.Contains(t, text(t, ctx, `[data-role="heartbeat-state"]`), "Set for this session")

	// Add a job from the form: every 3 s, target main.
	form := `[data-form="add-job"]`
	within(t, ctx, 10*time.Second, "add job",
		click(form+` button[type="submit"]`,
			[2]string{form + ` input[name="name"]`, "tick"},
			[2]string{form + ` select[name="kind"]`, "every"},
			[2]string{form + ` input[name="schedule"]`, "3s"},
			[2]string{form + ` select[name="target"]`, "main"},
			[2]string{form + ` input[name="text"]`, "check the queue"}),
		controlMessage("Done: add job tick"),
		chromedp.WaitVisible(chromedp.CSS(`[data-panel="jobs"] tr[data-job]`)))
	jobs := gjson.Parse(getJSON(t, d.hostURL+"/api/sessions/dash-cron/jobs")).Array()
	require.Len(t, jobs, 1)
	assert.Equal(t, "every", jobs[0].Get("kind").String())
	assert.Equal(t, "main", jobs[0].Get("target").String())
	row := `[data-panel="jobs"] tr[data-job="` + jobs[0].Get("jobId").String() + `"]`
	assert.Contains(t, text(t, ctx, row), "check the queue")

	// It fires: a wake reaches the mock, with the job's text.
	waitUntil(t, "the job's wake at the mock", 30*time.Second, func() bool { return len(c.wakeRequests(t)) >= 1 })
	assert.Contains(t, strings.Join(userTexts(t, c.pc.path, c.wakeRequests(t)[0].Body), "\n"), "check the queue")
	// Pause it from the page so it stops firing.
	within(t, ctx, 10*time.Second, "pause job",
		click(row+` button[data-action="pause"]`),
		chromedp.WaitVisible(chromedp.CSS(row+`[data-enabled="0"]`)))
	assert.False(t, gjson.Parse(getJSON(t, d.hostURL+"/api/sessions/dash-cron/jobs")).Get("0.enabled").Bool())

	// The run shows in the runs panel and in the timeline.
	within(t, ctx, 20*time.Second, "run in the page",
		chromedp.WaitVisible(chromedp.CSS(`[data-panel="runs"] tr[data-reason="cron"]`)),
		chromedp.WaitReady(chromedp.CSS(`[data-panel="timeline"] svg [data-kind="run"]`)))
	assert.Contains(t, text(t, ctx, `[data-panel="runs"] tr[data-reason="cron"]`), "sent")

	// The reply went to the webhook, which dropped the connection: the
	// entry is unknown, retried on its own after 5 s (attempts 2).
	waitUntil(t, "a second automatic attempt", 30*time.Second, func() bool {
		ds := deliveriesOf(t, d, c.session)
		return len(ds) >= 1 && ds[len(ds)-1].Get("state").String() == "unknown" && ds[len(ds)-1].Get("attempts").Int() >= 2
	})
	ds := deliveriesOf(t, d, c.session)
	did := ds[len(ds)-1].Get("id").String()
	assert.Equal(t, "webhook", ds[len(ds)-1].Get("connector").String())
	drow := `[data-panel="deliveries"] tr[data-delivery="` + did + `"]`
	within(t, ctx, 20*time.Second, "delivery in the page",
		chromedp.Reload(),
		chromedp.WaitVisible(chromedp.CSS(drow+`[data-state="unknown"] button[data-action="retry"]`)),
		chromedp.WaitReady(chromedp.CSS(`[data-panel="timeline"] svg [data-kind="delivery"]`)))
	within(t, ctx, 10*time.Second, "zoom", click(`[data-panel="timeline"] .zoom button`),
		chromedp.WaitReady(chromedp.CSS(`[data-panel="timeline"] svg[data-span="3600000"] [data-kind="delivery"]`)))
	screenshot(t, ctx, shots, "session", true)

	// Retry from the page: the host resets the attempts and sends it
	// again at once (attempts 1; the automatic retries only count up).
	before := hits.Load()
	within(t, ctx, 10*time.Second, "retry", click(drow+` button[data-action="retry"]`),
		controlMessage("Done: retry delivery "+did))
	waitUntil(t, "the retried attempt", 10*time.Second, func() bool {
		for _, x := range deliveriesOf(t, d, c.session) {
			if x.Get("id").String() == did {
				return x.Get("attempts").Int() == 1 && hits.Load() > before
			}
		}
		return false
	})

	// Wake now: a manual run.
	wakes := len(c.wakeRequests(t))
	within(t, ctx, 10*time.Second, "wake now", click(`[data-panel="summary"] button[data-action="wake"]`),
		controlMessage("Done: wake requested"))
	waitUntil(t, "the manual wake at the mock", 20*time.Second, func() bool { return len(c.wakeRequests(t)) > wakes })
	within(t, ctx, 20*time.Second, "manual run in the page",
		chromedp.WaitVisible(chromedp.CSS(`[data-panel="runs"] tr[data-reason="manual"]`)))

	// The history merges runs and deliveries.
	within(t, ctx, 10*time.Second, "history",
		chromedp.Navigate(d.hostURL+"/ui/#/s/dash-cron/history"),
		chromedp.WaitVisible(chromedp.CSS(`[data-panel="history"] tr[data-kind="run"]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-panel="history"] tr[data-kind="delivery"]`)))
	screenshot(t, ctx, shots, "history", true)
}

// nonLoopbackIP is an address of this machine that is not loopback.
func nonLoopbackIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil && !ipn.IP.IsLinkLocalUnicast() {
			return ipn.IP.String()
		}
	}
	t.Fatal("this machine has no non-loopback IPv4 address to test the token rule from")
	return ""
}

// TestDashboardNonLoopback: opened from another address, the page's API
// calls get 401 without the token and the page says why; with the token
// it shows the sessions.
func TestDashboardNonLoopback(t *testing.T) {
	ctx := browser(t)
	d := newDemo(t)
	ip := nonLoopbackIP(t)
	startChime(t, d.env(), []string{d.hostURL + "/healthz"}, "host", "--addr", fmt.Sprintf("0.0.0.0:%d", d.hostPort))
	base := fmt.Sprintf("http://%s:%d", ip, d.hostPort)
	// A session as the filter makes one: a prepare call with its id.
	code, out := postJSON(t, d.hostURL+hostapi.PathPrepare, map[string]string{"authorization": "Bearer " + hostToken},
		hostapi.PrepareRequest{RequestID: "dash-remote-1", Protocol: "chat", SessionID: "dash-remote"})
	require.Equal(t, http.StatusOK, code, string(out))

	for _, path := range []string{"/api/sessions", "/api/sessions/dash-remote/timers", "/api/events", "/api/sessions/dash-remote/history"} {
		resp, err := http.Get(base + path)
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, path)
	}

	within(t, ctx, 20*time.Second, "page from afar",
		chromedp.Navigate(base+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`#banner`)))
	msg := text(t, ctx, "#banner")
	assert.Contains(t, msg, "401")
	assert.Contains(t, msg, "enter the host token")
	screenshot(t, ctx, t.TempDir(), "unauthorized", false)

	within(t, ctx, 20*time.Second, "with the token",
		chromedp.SendKeys(chromedp.CSS("#token"), hostToken),
		click("#token-save"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-session="dash-remote"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#live.on`)))
	hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById('banner').hidden`))
	require.NoError(t, err)
	assert.True(t, hidden, "the message is gone once the token works")
}
