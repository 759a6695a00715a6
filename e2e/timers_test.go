package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/mockllm"
)

// The timer tools (docs/timers.md) through `chime up`, every protocol in
// JSON and SSE. The host holds real waits, so these tests take real time:
// the conversations of the six protocol modes run side by side, each on a
// mock queue of its own (x-mock-queue, forwarded on followups).

func timerCall(name string, args map[string]any) map[string]any {
	raw, _ := json.Marshal(args)
	return map[string]any{"name": name, "arguments": json.RawMessage(raw)}
}

func newTimer(total, timeout float64, reason string) map[string]any {
	return timerCall(hostapi.TimerToolName, map[string]any{"total_duration": total, "timeout_duration": timeout, "timer_id": "", "reason": reason})
}

// sameTimer continues the timer the last tool result named.
func sameTimer(timeout float64) map[string]any {
	return timerCall(hostapi.TimerToolName, map[string]any{"total_duration": 0, "timeout_duration": timeout, "timer_id": "{{lastResult.timer_id}}", "reason": ""})
}

func onLastTimer(name string, extra map[string]any) map[string]any {
	args := map[string]any{"timer_id": "{{lastResult.timer_id}}", "reason": name + " it"}
	for k, v := range extra {
		args[k] = v
	}
	return timerCall(name, args)
}

// conv is one conversation of a protocol mode on its own mock queue.
type conv struct {
	d       *demo
	pc      protoCase
	m       mode
	session string
}

func (c *conv) script(t *testing.T, replies ...map[string]any) {
	t.Helper()
	if code, out := postJSON(t, c.d.mockURL+"/__mock/script?queue="+c.session, nil, replies); code/100 != 2 {
		t.Fatalf("script: %d %s", code, out)
	}
}

func (c *conv) body(text string) string {
	body := c.pc.body(c.session, text)
	if c.m.stream {
		body, _ = sjson.Set(body, "stream", true)
	}
	return body
}

func (c *conv) headers() map[string]string {
	h := map[string]string{mockllm.QueueHeader: c.session}
	for k, v := range c.pc.header(c.session) {
		h[k] = v
	}
	return h
}

// ask sends one client request and returns the client's turn and how long
// the answer took.
func (c *conv) ask(t *testing.T, text string) (*llm.Turn, time.Duration) {
	t.Helper()
	start := time.Now()
	code, out := postJSON(t, c.d.proxyURL+c.pc.path, c.headers(), c.body(text))
	took := time.Since(start)
	require.Equal(t, http.StatusOK, code, string(out))
	turn := parseClient(t, c.pc, c.m, out)
	for _, call := range turn.ToolCalls {
		assert.NotContains(t, hostapi.TimerToolNames(), call.Name, "the client saw a timer call")
	}
	assert.NotContains(t, string(out), `"timer_id"`, "a timer call or result reached the client")
	return turn, took
}

// received is what the mock got on this conversation's queue, in order.
func (c *conv) received(t *testing.T) []mockRequest {
	t.Helper()
	var out []mockRequest
	for _, r := range c.d.mockRequests(t) {
		if r.Headers[mockllm.QueueHeader] == c.session {
			out = append(out, r)
		}
	}
	return out
}

// lastResult is the last tool result of a provider request, as JSON.
func (c *conv) lastResult(t *testing.T, r mockRequest) gjson.Result {
	t.Helper()
	out := mockllm.LastToolOutput(protocolOf(c.pc), []byte(r.Body))
	require.True(t, gjson.Valid(out), "tool result %q", out)
	return gjson.Parse(out)
}

func (c *conv) timers(t *testing.T) []gjson.Result {
	t.Helper()
	return gjson.Parse(getJSON(t, c.d.hostURL+"/api/sessions/"+c.session+"/timers")).Array()
}

func near(t *testing.T, what string, got, want, below, above float64) {
	t.Helper()
	assert.True(t, got >= want-below && got <= want+above, "%s = %.2f, want %.1f (−%.1f/+%.1f)", what, got, want, below, above)
}

// shortHolds keeps holds from delivering notices, so that they reach the
// next client request (the path these tests check; holds have their own).
const shortHolds = "holds:\n  max: 500ms\n"

func TestTimerTools(t *testing.T) {
	d := newDemo(t).withHostConfig(t, shortHolds)
	d.up(t)
	n := 0
	for _, pc := range protoCases {
		for _, m := range modes {
			n++
			name := pc.name + "-" + m.name
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				newConv := func(scenario string) *conv {
					return &conv{d: d, pc: pc, m: m, session: "tmr-" + name + "-" + scenario}
				}

				t.Run("timeout then continue to its own end", func(t *testing.T) {
					c := newConv("cont")
					c.script(t,
						map[string]any{"text": "Waiting for the build.", "toolCalls": []any{newTimer(6, 2, "build")}},
						map[string]any{"toolCalls": []any{sameTimer(60)}},
						map[string]any{"text": "Built."},
					)
					turn, took := c.ask(t, "wait for the build")
					assert.Contains(t, turn.Text, "Built.")
					assert.GreaterOrEqual(t, took, 6*time.Second)
					reqs := c.received(t)
					require.Len(t, reqs, 3)
					first := c.lastResult(t, reqs[1])
					assert.Equal(t, true, first.Get("timed_out").Bool(), "%s", first.Raw)
					assert.Equal(t, "Running", first.Get("status").String())
					near(t, "remaining_s", first.Get("remaining_s").Float(), 4, 0.6, 0.3)
					second := c.lastResult(t, reqs[2])
					assert.Equal(t, "Completed", second.Get("status").String(), "%s", second.Raw)
					assert.Equal(t, first.Get("timer_id").String(), second.Get("timer_id").String())
					// Completion 6 s after creation (not 2 + 6).
					near(t, "creation to completion", reqs[2].ReceivedAt.Sub(reqs[0].ReceivedAt).Seconds(), 6, 0.1, 1.5)
				})

				t.Run("parallel waits return together", func(t *testing.T) {
					c := newConv("par")
					c.script(t,
						map[string]any{"toolCalls": []any{newTimer(1, 0, "short"), newTimer(3, 0, "long")}},
						map[string]any{"text": "both done"},
					)
					_, took := c.ask(t, "two waits")
					assert.GreaterOrEqual(t, took, 3*time.Second)
					reqs := c.received(t)
					require.Len(t, reqs, 2)
					near(t, "turn to results", reqs[1].ReceivedAt.Sub(reqs[0].ReceivedAt).Seconds(), 3, 0.1, 1.5)
					assert.Equal(t, 2, strings.Count(reqs[1].Body, `\"status\":\"Completed\"`), "both results say Completed")
				})

				t.Run("pause shifts completion, resume shifts it back", func(t *testing.T) {
					c := newConv("pause")
					c.script(t,
						map[string]any{"toolCalls": []any{newTimer(4, 1, "p")}},
						map[string]any{"toolCalls": []any{onLastTimer(hostapi.PauseTimerToolName, map[string]any{"pause_duration": 3})}},
						map[string]any{"toolCalls": []any{sameTimer(0)}},
						map[string]any{"text": "paused run done"},
					)
					c.ask(t, "pause it")
					reqs := c.received(t)
					require.Len(t, reqs, 4)
					assert.Equal(t, "Paused", c.lastResult(t, reqs[2]).Get("status").String())
					assert.Equal(t, "Completed", c.lastResult(t, reqs[3]).Get("status").String())
					near(t, "paused run", reqs[3].ReceivedAt.Sub(reqs[0].ReceivedAt).Seconds(), 7, 0.1, 1.5)

					c = newConv("resume")
					c.script(t,
						map[string]any{"toolCalls": []any{newTimer(4, 1, "r")}},
						map[string]any{"toolCalls": []any{onLastTimer(hostapi.PauseTimerToolName, map[string]any{"pause_duration": 30})}},
						map[string]any{"toolCalls": []any{onLastTimer(hostapi.ResumeTimerToolName, nil)}},
						map[string]any{"toolCalls": []any{sameTimer(0)}},
						map[string]any{"text": "resumed run done"},
					)
					c.ask(t, "pause and resume it")
					reqs = c.received(t)
					require.Len(t, reqs, 5)
					assert.Equal(t, "Running", c.lastResult(t, reqs[3]).Get("status").String())
					assert.Equal(t, "Completed", c.lastResult(t, reqs[4]).Get("status").String())
					near(t, "resumed run", reqs[4].ReceivedAt.Sub(reqs[0].ReceivedAt).Seconds(), 4, 0.1, 1.5)
				})

				t.Run("cancel notifies once, stop never", func(t *testing.T) {
					c := newConv("notice")
					c.script(t,
						map[string]any{"toolCalls": []any{newTimer(2, 0.5, "bg "+name)}},
						map[string]any{"toolCalls": []any{onLastTimer(hostapi.CancelTimerToolName, nil)}},
						map[string]any{"text": "doing other work"},
					)
					c.ask(t, "start it")
					require.Len(t, c.received(t), 3)
					assert.Equal(t, "Background", c.lastResult(t, c.received(t)[2]).Get("status").String())

					s := newConv("stopped")
					s.session = c.session // the same session: only one notice may come
					s.script(t,
						map[string]any{"toolCalls": []any{newTimer(2, 0.5, "st "+name)}},
						map[string]any{"toolCalls": []any{onLastTimer(hostapi.StopTimerToolName, nil)}},
						map[string]any{"text": "stopped"},
					)
					s.ask(t, "start and stop another")
					time.Sleep(2500 * time.Millisecond) // real time under test: both timers end in the host meanwhile
					c.script(t, map[string]any{"text": "noted"}, map[string]any{"text": "again"})
					c.ask(t, "anything new?")
					c.ask(t, "and now?")
					reqs := c.received(t)
					require.Len(t, reqs, 8)
					notices := 0
					for i, r := range reqs {
						texts := strings.Join(userTexts(t, c.pc.path, r.Body), "\n")
						assert.NotContains(t, texts, `"st `+name+`"`, "request %d: a stopped timer notified", i)
						if strings.Contains(texts, `[timer completed: "bg `+name+`" id=`) {
							notices++
							assert.Equal(t, 6, i, "the notice goes into the first request after the end")
						}
					}
					assert.Equal(t, 1, notices, "one notice")
				})

				t.Run("disconnect ends the wait, the timer runs on", func(t *testing.T) {
					c := newConv("gone")
					c.script(t,
						map[string]any{"text": "waiting", "toolCalls": []any{newTimer(20, 4, "dc")}},
						map[string]any{"text": "never sent"},
					)
					ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
					req, _ := http.NewRequestWithContext(ctx, "POST", d.proxyURL+c.pc.path, strings.NewReader(c.body("wait and leave")))
					for k, v := range c.headers() {
						req.Header.Set(k, v)
					}
					resp, err := http.DefaultClient.Do(req)
					if err == nil {
						_, err = io.ReadAll(resp.Body)
						resp.Body.Close()
					}
					cancel()
					require.Error(t, err, "the client gave up mid-wait")
					gone := time.Now()
					time.Sleep(4 * time.Second) // real time under test: past the end of the wait the client left
					reqs := c.received(t)
					require.Len(t, reqs, 1, "no followup after the client left")
					assert.True(t, reqs[0].ReceivedAt.Before(gone))
					ts := c.timers(t)
					require.Len(t, ts, 1)
					assert.Equal(t, "Background", ts[0].Get("status").String(), "%s", ts[0].Raw)
					assert.Greater(t, ts[0].Get("remainingMs").Int(), int64(10_000))
				})
			})
		}
	}
	require.Equal(t, 6, n)
}

// TestTimerNoticeSurvivesKill: kill -9 of the host with a background timer
// running; restarted after its end, the host delivers the notice on the
// session's next request.
func TestTimerNoticeSurvivesKill(t *testing.T) {
	d := newDemo(t).withHostConfig(t, shortHolds)
	d.proxyAndMock(t)
	host := d.host(t)
	c := &conv{d: d, pc: protoCases[0], m: modes[0], session: "tmr-kill"}
	c.script(t,
		map[string]any{"toolCalls": []any{newTimer(3, 0.5, "survivor")}},
		map[string]any{"toolCalls": []any{onLastTimer(hostapi.CancelTimerToolName, nil)}},
		map[string]any{"text": "later"},
	)
	c.ask(t, "start it")
	host.kill(syscall.SIGKILL)
	time.Sleep(3 * time.Second) // real time under test: the timer ends while the host is down
	d.host(t)
	c.script(t, map[string]any{"text": "noted"})
	c.ask(t, "back?")
	reqs := c.received(t)
	require.Len(t, reqs, 4)
	texts := strings.Join(userTexts(t, c.pc.path, reqs[3].Body), "\n")
	assert.Contains(t, texts, `[timer completed: "survivor" id=`)
	ts := c.timers(t)
	require.Len(t, ts, 1)
	assert.Equal(t, "Completed", ts[0].Get("status").String())
}

// TestTimerNoticeByHold: with the default holds, a background timer ending
// within holds.max continues the response that is open, and the next
// request does not get the notice again.
func TestTimerNoticeByHold(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	c := &conv{d: d, pc: protoCases[0], m: modes[1], session: "tmr-hold"}
	c.script(t,
		map[string]any{"toolCalls": []any{newTimer(2, 0.5, "held")}},
		map[string]any{"toolCalls": []any{onLastTimer(hostapi.CancelTimerToolName, nil)}},
		map[string]any{"text": "meanwhile"},
		map[string]any{"text": "the timer ended"},
	)
	turn, took := c.ask(t, "start it")
	assert.Contains(t, turn.Text, "the timer ended")
	assert.GreaterOrEqual(t, took, 2*time.Second)
	c.ask(t, "next")
	reqs := c.received(t)
	require.Len(t, reqs, 5)
	assert.True(t, strings.Contains(reqs[3].Headers["x-request-id"], ":hold"), "the fourth request is the hold's followup: %v", reqs[3].Headers)
	for i, r := range reqs {
		has := strings.Contains(strings.Join(userTexts(t, c.pc.path, r.Body), "\n"), `[timer completed: "held" id=`)
		assert.Equal(t, i == 3, has, "request %d", i)
	}
}

// TestTimerWithCapturedClients: the requests of Claude Code and Codex CLI
// (their own tools, thinking on, history as they send it) against the
// strict mock: the model thinks, waits on a timer, and the followup the
// provider accepts carries the thinking before the call; the client sees
// one answer without the timer.
func TestTimerWithCapturedClients(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	for _, file := range []string{"claude-code-2.1.197-messages-turn1.json", "codex-cli-0.169-responses-turn1.json"} {
		cl := loadClient(t, file)
		for _, m := range modes {
			t.Run(file+"/"+m.name, func(t *testing.T) {
				deleteMockRequests(t, d)
				d.script(t,
					map[string]any{"thinking": "Wait for the deploy.", "text": "Waiting.", "toolCalls": []any{newTimer(1.5, 0, "deploy")}},
					map[string]any{"text": "Deployed."},
				)
				start := time.Now()
				turn, raw := cl.send(t, d, m, "real-"+file+m.name, "wait for the deploy")
				assert.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond)
				assert.Equal(t, "Waiting.\n\nDeployed.", turn.Text)
				for _, c := range turn.ToolCalls {
					assert.NotEqual(t, hostapi.TimerToolName, c.Name)
				}
				assert.NotContains(t, raw, "timer_id")
				reqs := d.mockRequests(t)
				require.Len(t, reqs, 2)
				p := llm.DetectProtocol(reqs[1].Path)
				res := gjson.Parse(mockllm.LastToolOutput(p, []byte(reqs[1].Body)))
				assert.Equal(t, "Completed", res.Get("status").String(), "%s", res.Raw)
				// The client's own tools are still offered beside the timer tools.
				assert.True(t, gjson.Get(reqs[0].Body, `tools.#(name=="timer")`).Exists() || gjson.Get(reqs[0].Body, `tools.#(function.name=="timer")`).Exists())
				assert.Greater(t, len(gjson.Get(reqs[0].Body, "tools").Array()), 7)
			})
		}
	}
}
