package filter

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/proxytest"
)

// newEnvAt is newEnv with a clock the test moves.
func newEnvAt(t *testing.T, now *time.Time) *env {
	t.Helper()
	h := proxytest.NewHost(proxytest.Options{
		VMContext:           vmContext{now: func() time.Time { return *now }},
		PluginConfiguration: []byte(`{}`),
		Clusters:            []string{"chime_host"},
	})
	if !h.StartPlugin() {
		t.Fatalf("plugin rejected: %q", h.GetLogs(proxywasm.LogLevelTrace))
	}
	return &env{t, h}
}

// outcomeCalls are the commit and rollback calls from the n-th on, as
// "<path> <request id>".
func outcomeCalls(e *env, from int) ([]string, []proxytest.HttpCall) {
	var names []string
	var calls []proxytest.HttpCall
	for _, c := range e.h.GetHttpCalls() {
		p, _ := header(c.Headers, ":path")
		if p != hostapi.PathCommit && p != hostapi.PathRollback {
			continue
		}
		var o hostapi.OutcomeRequest
		if err := json.Unmarshal(c.Body, &o); err != nil {
			e.t.Fatal(err)
		}
		names = append(names, p+" "+o.RequestID)
		calls = append(calls, c)
	}
	return names[min(from, len(names)):], calls[min(from, len(calls)):]
}

func prepareID(e *env) string {
	_, prep := e.lastPrepare()
	return prep.RequestID
}

var (
	proxyTimeout = [][2]string{{":status", "504"}, {"content-type", "text/plain"}}
	okJSON       = [][2]string{{":status", "200"}, {"content-type", "application/json"}}
)

// An outcome the host did not take (down, restarting) is sent again once
// the host answers a call: a kill between reserve and commit neither
// strands a reminder the request never carried until its reservation
// expires nor injects a delivered one again.
func TestUnsentOutcomeResentWhenHostAnswers(t *testing.T) {
	now := wall
	e := newEnvAt(t, &now)

	// 1: reminders reserved and carried; the host dies before the commit.
	id := e.send(llm.Chat, `{"messages":[]}`)
	e.answer(hostapi.PrepareResponse{Reminders: "[scheduled task:\"t\"]", Reserved: true})
	committed := prepareID(e)
	e.forwarded(id)
	e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	_, calls := outcomeCalls(e, 0)
	e.h.CallOnHttpCallResponse(calls[0].ID, nil, nil, nil) // reset
	// 2: the prepare timed out (the proxy's 504) and the rollback finds
	// the host gone (the proxy's 503).
	id = e.send(llm.Chat, `{"messages":[]}`)
	e.fail(proxyTimeout, "upstream request timeout")
	rolledBack := prepareID(e)
	e.forwarded(id)
	_, calls = outcomeCalls(e, 1)
	e.h.CallOnHttpCallResponse(calls[0].ID, [][2]string{{":status", "503"}, {"content-type", "text/plain"}},
		[]byte("upstream connect error or disconnect/reset before headers. reset reason: connection failure"), nil)
	// 3: a rollback the host refused itself (a JSON error) is not kept.
	id = e.send(llm.Chat, `{"messages":[]}`)
	e.fail(proxyTimeout, "upstream request timeout")
	e.forwarded(id)
	_, calls = outcomeCalls(e, 2)
	e.h.CallOnHttpCallResponse(calls[0].ID, [][2]string{{":status", "400"}, {"content-type", "application/json"}},
		[]byte(`{"error":"bad"}`), nil)
	if got, _ := outcomeCalls(e, 3); len(got) != 0 {
		t.Fatalf("outcomes resent while the host is down: %q", got)
	}

	// The host is back: the next prepare it answers sends both again.
	id = e.send(llm.Chat, `{"messages":[]}`)
	e.answer(hostapi.PrepareResponse{})
	e.forwarded(id)
	got, calls := outcomeCalls(e, 3)
	want := []string{hostapi.PathCommit + " " + committed, hostapi.PathRollback + " " + rolledBack}
	if !slices.Equal(got, want) {
		t.Fatalf("resent %q, want %q", got, want)
	}
	if n := e.counter(MetricOutcomesResent); n != 2 {
		t.Fatalf("%s = %d", MetricOutcomesResent, n)
	}
	for _, c := range calls {
		e.h.CallOnHttpCallResponse(c.ID, okJSON, []byte(`{}`), nil)
	}
	// Taken: nothing more to send.
	e.h.Tick()
	state := e.calls(hostapi.PathState)
	e.h.CallOnHttpCallResponse(state[len(state)-1].ID, okJSON, []byte(`{"nowMs":1}`), nil)
	if got, _ := outcomeCalls(e, 5); len(got) != 0 {
		t.Fatalf("outcomes sent again after the host took them: %q", got)
	}
}

// The tick's state call brings the host back too, and a resend that fails
// again waits for the next answer.
func TestUnsentOutcomeResentByTickAndKeptAgain(t *testing.T) {
	now := wall
	e := newEnvAt(t, &now)
	id := e.send(llm.Chat, `{"messages":[]}`)
	e.fail(nil, "")
	e.forwarded(id)
	want, calls := outcomeCalls(e, 0)
	e.h.CallOnHttpCallResponse(calls[0].ID, nil, nil, nil)

	e.h.Tick()
	e.h.CallOnHttpCallResponse(e.calls(hostapi.PathState)[0].ID, okJSON, []byte(`{"nowMs":1}`), nil)
	got, calls := outcomeCalls(e, 1)
	if !slices.Equal(got, want) {
		t.Fatalf("after the tick: %q, want %q", got, want)
	}
	e.h.CallOnHttpCallResponse(calls[0].ID, nil, nil, nil) // down again

	id = e.send(llm.Chat, `{"messages":[]}`)
	e.answer(hostapi.PrepareResponse{})
	e.forwarded(id)
	if got, _ := outcomeCalls(e, 2); !slices.Equal(got, want) {
		t.Fatalf("after the next answer: %q, want %q", got, want)
	}
}

// What waits is bounded: a restarted host gets resendBatch at a time, and
// an outcome older than maxUnsentAge is given up, said once at info.
func TestUnsentOutcomesBounded(t *testing.T) {
	now := wall
	e := newEnvAt(t, &now)
	const n = resendBatch + 4
	for range n {
		id := e.send(llm.Chat, `{"messages":[]}`)
		e.fail(nil, "")
		e.forwarded(id)
	}
	_, calls := outcomeCalls(e, 0)
	for _, c := range calls {
		e.h.CallOnHttpCallResponse(c.ID, nil, nil, nil)
	}
	id := e.send(llm.Chat, `{"messages":[]}`)
	e.answer(hostapi.PrepareResponse{})
	e.forwarded(id)
	_, resent := outcomeCalls(e, n)
	if len(resent) != resendBatch {
		t.Fatalf("%d resent at once, want %d", len(resent), resendBatch)
	}
	e.h.CallOnHttpCallResponse(resent[0].ID, okJSON, []byte(`{}`), nil)
	if _, more := outcomeCalls(e, n+resendBatch); len(more) != 1 {
		t.Fatalf("an answer sent %d more, want 1", len(more))
	}

	// The host goes down for longer than any reservation lasts: what is
	// in flight fails, and nothing of it, nor of what still waits, is
	// sent again.
	_, inFlight := outcomeCalls(e, n+1)
	now = now.Add(maxUnsentAge + time.Second)
	for _, c := range inFlight {
		e.h.CallOnHttpCallResponse(c.ID, nil, nil, nil)
	}
	before := len(e.h.GetHttpCalls())
	id = e.send(llm.Chat, `{"messages":[]}`)
	e.answer(hostapi.PrepareResponse{})
	e.forwarded(id)
	if after := len(e.h.GetHttpCalls()); after != before+1 { // the prepare
		t.Fatalf("%d outcomes older than %v sent again", after-before-1, maxUnsentAge)
	}
	var said []string
	for _, l := range e.h.GetLogs(proxywasm.LogLevelInfo) {
		if strings.Contains(l, "could not be kept") {
			said = append(said, l)
		}
	}
	if want := "chime: " + strconv.Itoa(n-1) + " commit/rollback"; len(said) != 1 || !strings.HasPrefix(said[0], want) {
		t.Fatalf("give-up logs %q, want one starting %q", said, want)
	}
}
