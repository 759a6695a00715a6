package filter

import (
	"encoding/json"
	"testing"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// TestPrepareTimeoutGrowsWithCallsInFlight: a prepare call sent while
// others wait gets prepareTimeoutMs more per 8 of them, up to
// prepareTimeoutMaxMs, with the deadline the host gets to match; answered
// calls no longer count.
func TestPrepareTimeoutGrowsWithCallsInFlight(t *testing.T) {
	e := newEnv(t, `{"prepareTimeoutMs":100,"prepareTimeoutMaxMs":350}`)
	body := `{"model":"m","messages":[{"role":"user","content":"<**stopMessage:\"go on\",1**>hi"}]}`
	for i := range 25 {
		w := min(uint32(100+100*i/8), 350) // 8 in flight: 200 ms; capped from 20 on
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
