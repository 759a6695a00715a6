package filter

import (
	"strings"
	"testing"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// Issue 17 defect 5: a directive accepted while the host is unreachable
// (the request fails open and gets its 200) must reach the host with the
// session's next answered prepare, or be logged at info and counted.

const keepBody = `{"model":"m","messages":[{"role":"user","content":"<**stopMessage:\"go on\",3**> hi"}]}`

func TestDirectiveKeptWhileHostDownReachesTheNextPrepare(t *testing.T) {
	e := newEnv(t, `{"token":"tok"}`)
	sess := [2]string{"x-session-id", "sess-k"}
	id := e.send(llm.Chat, keepBody, sess)
	_, first := e.lastPrepare()
	e.fail(nil, "") // timeout: fail open
	if strings.Contains(e.forwarded(id), "<**") {
		t.Fatal("tag not stripped")
	}
	if got := e.counter(MetricDirectivesKept); got != 1 {
		t.Fatalf("kept = %d, want 1", got)
	}

	e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"next"}]}`, sess)
	_, next := e.lastPrepare()
	if len(next.Kept) != 1 || next.Kept[0].RequestID != first.RequestID || len(next.Kept[0].Directives) != 1 ||
		next.Kept[0].Directives[0].Kind != hostapi.DirectiveStopMessage || next.Kept[0].Directives[0].Text != "go on" {
		t.Fatalf("the next prepare must carry the kept directive: %+v", next.Kept)
	}
	e.answer(hostapi.PrepareResponse{})

	// Delivered: not sent again.
	e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"third"}]}`, sess)
	if _, third := e.lastPrepare(); len(third.Kept) != 0 {
		t.Fatalf("sent twice: %+v", third.Kept)
	}
}

func TestKeptDirectivesStayUntilTheHostAnswers(t *testing.T) {
	e := newEnv(t, `{"token":"tok"}`)
	sess := [2]string{"x-session-id", "sess-k2"}
	e.send(llm.Chat, keepBody, sess)
	e.fail(nil, "")
	e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"still down"}]}`, sess)
	e.fail([][2]string{{":status", "503"}}, "no healthy upstream")
	e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"up"}]}`, sess)
	if _, p := e.lastPrepare(); len(p.Kept) != 1 {
		t.Fatalf("kept across a second failure: %+v", p.Kept)
	}
}

func TestDirectiveWithoutSessionIsLoggedAndCounted(t *testing.T) {
	e := newEnv(t, `{"token":"tok"}`)
	e.send(llm.Chat, keepBody) // no session header
	e.fail(nil, "")
	if got := e.counter(droppedMetricName(hostapi.DirectiveStopMessage)); got != 1 {
		t.Fatalf("dropped stopMessage = %d, want 1", got)
	}
	logs := strings.Join(e.h.GetLogs(proxywasm.LogLevelInfo), "\n")
	if !strings.Contains(logs, "directive(s) lost while the host is unreachable (no session id") {
		t.Fatalf("not logged at info: %s", logs)
	}
}

func TestKeptDirectivesAreBoundedPerSession(t *testing.T) {
	e := newEnv(t, `{"token":"tok"}`)
	sess := [2]string{"x-session-id", "sess-flood"}
	for range maxKeptPerSession + 3 {
		e.send(llm.Chat, keepBody, sess)
		e.fail(nil, "")
	}
	if got := e.counter(MetricDirectivesKept); got != maxKeptPerSession {
		t.Fatalf("kept %d, want the bound %d", got, maxKeptPerSession)
	}
	if got := e.counter(droppedMetricName(hostapi.DirectiveStopMessage)); got != 3 {
		t.Fatalf("dropped %d, want 3", got)
	}
}
