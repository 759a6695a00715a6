package filter

import (
	"encoding/json"
	"github.com/chimehq/chime/plugin/proxywasm/proxytest"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// TestPrepareTimeoutGrowsWithCallsInFlight: a prepare call sent while
// others wait gets prepareTimeoutMs more per prepareCallsPerStep of them, up to
// prepareTimeoutMaxMs, with the deadline the host gets to match; answered
// calls no longer count.
func TestPrepareTimeoutGrowsWithCallsInFlight(t *testing.T) {
	e := newEnv(t, `{"prepareTimeoutMs":100,"prepareTimeoutMaxMs":350}`)
	body := `{"model":"m","messages":[{"role":"user","content":"<**stopMessage:\"go on\",1**>hi"}]}`
	for i := range 25 {
		w := min(uint32(100+100*i/prepareCallsPerStep), 350)
		e.send(llm.Chat, body, [2]string{"x-session-id", "s"})
		c, prep := e.lastPrepare()
		if c.TimeoutMs != w {
			t.Fatalf("call %d (%d in flight): timeout %d ms, want %d", i, i, c.TimeoutMs, w)
		}
		if prep.DeadlineMs != wall.UnixMilli()+int64(w) {
			t.Fatalf("call %d: deadline %d, want the filter's clock + %d", i, prep.DeadlineMs, w)
		}
	}
	// Every call answered: the next one is back to prepareTimeoutMs.
	ans, _ := json.Marshal(hostapi.PrepareResponse{})
	for _, c := range e.calls(hostapi.PathPrepare) {
		e.h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, ans, nil)
	}
	e.send(llm.Chat, body, [2]string{"x-session-id", "s"})
	if c, _ := e.lastPrepare(); c.TimeoutMs != 100 {
		t.Fatalf("after the answers: timeout %d ms, want 100", c.TimeoutMs)
	}
}

func TestPrepareTimeoutMaxNeverBelowTimeout(t *testing.T) {
	e := newEnv(t, `{"prepareTimeoutMs":300,"prepareTimeoutMaxMs":100}`)
	e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, [2]string{"x-session-id", "s"})
	if c, _ := e.lastPrepare(); c.TimeoutMs != 300 {
		t.Fatalf("timeout %d ms, want prepareTimeoutMs 300", c.TimeoutMs)
	}
	if _, _, err := ParseConfig([]byte(`{"prepareTimeoutMaxMs":0}`)); err == nil {
		t.Fatal("prepareTimeoutMaxMs 0 accepted")
	}
}

// TestPrepareTimeoutLearnsAnsweredLatency: when answered calls took long,
// the next call gets three times their recent average, at most
// prepareTimeoutMaxMs; calls that timed out teach nothing.
func TestPrepareTimeoutLearnsAnsweredLatency(t *testing.T) {
	now := wall
	h := proxytest.NewHost(proxytest.Options{
		VMContext:           vmContext{now: func() time.Time { return now }},
		PluginConfiguration: []byte(`{"prepareTimeoutMs":100,"prepareTimeoutMaxMs":3000}`),
		Clusters:            []string{"chime_host"},
	})
	if !h.StartPlugin() {
		t.Fatal("plugin rejected the configuration")
	}
	e := &env{t, h}
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	ans, _ := json.Marshal(hostapi.PrepareResponse{})
	round := func(took time.Duration, answer bool) uint32 {
		id := e.send(llm.Chat, body, [2]string{"x-session-id", "s"})
		c, _ := e.lastPrepare()
		now = now.Add(took)
		if answer {
			h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, ans, nil)
		} else {
			h.CallOnHttpCallResponse(c.ID, nil, nil, nil) // timed out
		}
		h.CompleteHttpContext(id)
		return c.TimeoutMs
	}
	if got := round(800*time.Millisecond, true); got != 100 {
		t.Fatalf("first call: timeout %d, want 100", got)
	}
	if got := round(0, false); got != 600 { // average 200 ms (a quarter of the way to 800)
		t.Fatalf("after an answer in 800 ms: timeout %d, want 600", got)
	}
	for range 20 {
		round(2*time.Second, true)
	}
	if got := round(0, false); got != 3000 {
		t.Fatalf("after answers in 2 s: timeout %d, want the cap 3000", got)
	}
	for range 20 {
		round(0, false)
	}
	if got := round(0, true); got != 3000 {
		t.Fatalf("timeouts taught something: timeout %d, want still 3000", got)
	}
	for range 30 {
		round(0, true)
	}
	if got := round(0, true); got != 100 {
		t.Fatalf("after fast answers: timeout %d, want back to 100", got)
	}
}

// TestPrepareTimeoutCountsWaitingRequests: a request counts from its
// headers on, before its body arrived, and no longer once its stream
// ended or its body turned out malformed.
func TestPrepareTimeoutCountsWaitingRequests(t *testing.T) {
	e := newEnv(t, `{"prepareTimeoutMs":80}`)
	var heads []uint32
	for range 8 { // headers only: their bodies are still coming
		id := e.h.InitializeHttpContext()
		e.h.CallOnRequestHeaders(id, reqHeaders(llm.Chat), false)
		heads = append(heads, id)
	}
	bad := e.h.InitializeHttpContext()
	e.h.CallOnRequestHeaders(bad, reqHeaders(llm.Chat), false)
	e.h.CallOnRequestBody(bad, []byte(`{not json`), true)
	id := e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	want := uint32(80 + 80*8/prepareCallsPerStep)
	if c, _ := e.lastPrepare(); c.TimeoutMs != want {
		t.Fatalf("with 8 requests waiting: timeout %d, want %d", c.TimeoutMs, want)
	}
	for _, h := range heads {
		e.h.CompleteHttpContext(h)
	}
	e.h.CompleteHttpContext(id) // its prepare unanswered: the stream end uncounts it
	e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)
	if c, _ := e.lastPrepare(); c.TimeoutMs != 80 {
		t.Fatalf("after the streams ended: timeout %d, want 80", c.TimeoutMs)
	}
}
