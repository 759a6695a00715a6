package filter

import (
	"slices"
	"testing"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
)

const routeBody = `{"model":"m","messages":[{"role":"user","content":"hi <**route:fast**>"}]}`

var sessionHeader = [2]string{"x-chime-session", "s1"}

// TestRouteNextRequest: without allowOnHeadersStopIteration the filter
// cannot hold headers for the body, so a route directive steers the
// session from the next request on (docs/directives.md#routing).
func TestRouteNextRequest(t *testing.T) {
	e := newEnv(t, `{}`)
	id := e.send(llm.Chat, routeBody, sessionHeader)
	if _, prep := e.lastPrepare(); len(prep.Directives) != 1 || prep.Directives[0].Route != "fast" {
		t.Fatalf("prepare directives %+v", prep.Directives)
	}
	e.answer(hostapi.PrepareResponse{Route: "fast"})
	e.forwarded(id)
	if v, ok := header(e.h.GetRequestHeaders(id), hostapi.HeaderRoute); ok {
		t.Errorf("the request carrying the directive got %s %q; its route was already picked", hostapi.HeaderRoute, v)
	}
	if calls := e.h.ForeignCalls(); len(calls) != 0 {
		t.Errorf("foreign calls %v, want none", calls)
	}

	// The next request of the session carries the route from its headers.
	id2 := e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"next"}]}`, sessionHeader)
	if v, _ := header(e.h.GetRequestHeaders(id2), hostapi.HeaderRoute); v != "fast" {
		t.Errorf("next request %s = %q, want fast", hostapi.HeaderRoute, v)
	}
	// Another session is not affected.
	id3 := e.send(llm.Chat, `{"model":"m","messages":[{"role":"user","content":"other"}]}`, [2]string{"x-chime-session", "s2"})
	if v, ok := header(e.h.GetRequestHeaders(id3), hostapi.HeaderRoute); ok {
		t.Errorf("other session got %s %q", hostapi.HeaderRoute, v)
	}
}

// TestRouteSameRequest: with allowOnHeadersStopIteration the headers wait
// (PAUSE is StopIteration there), the prepare answer's route is set on the
// same request and clear_route_cache makes the router pick again.
func TestRouteSameRequest(t *testing.T) {
	e := newEnv(t, `{"allowOnHeadersStopIteration":true}`)
	id := e.h.InitializeHttpContext()
	if got := e.h.CallOnRequestHeaders(id, reqHeaders(llm.Chat, sessionHeader), false); got != proxywasm.ActionPause {
		t.Fatalf("headers action = %v, want Pause (held for the body)", got)
	}
	if got := e.h.CallOnRequestBody(id, []byte(routeBody), true); got != proxywasm.ActionPause {
		t.Fatalf("body action = %v, want Pause until prepare answers", got)
	}
	e.answer(hostapi.PrepareResponse{Route: "fast"})
	e.forwarded(id)
	if v, _ := header(e.h.GetRequestHeaders(id), hostapi.HeaderRoute); v != "fast" {
		t.Errorf("%s = %q, want fast on the request that carries the directive", hostapi.HeaderRoute, v)
	}
	if calls := e.h.ForeignCalls(); !slices.Equal(calls, []string{"clear_route_cache"}) {
		t.Errorf("foreign calls %v, want [clear_route_cache]", calls)
	}

	// Without an answer the held request gets the session's cached route:
	// failing open, and a body forwarded as it came.
	for _, c := range []struct {
		name, body string
		fail       bool
	}{{"fail open", `{"model":"m","messages":[{"role":"user","content":"next"}]}`, true}, {"malformed body", `{"messages":[`, false}} {
		id := e.h.InitializeHttpContext()
		e.h.CallOnRequestHeaders(id, reqHeaders(llm.Chat, sessionHeader), false)
		if got := e.h.CallOnRequestBody(id, []byte(c.body), true); c.fail {
			e.fail(nil, "")
			e.forwarded(id)
		} else if got != proxywasm.ActionContinue {
			t.Fatalf("%s: body action %v", c.name, got)
		}
		if v, _ := header(e.h.GetRequestHeaders(id), hostapi.HeaderRoute); v != "fast" {
			t.Errorf("%s: %s = %q, want the cached fast", c.name, hostapi.HeaderRoute, v)
		}
	}
	if calls := e.h.ForeignCalls(); len(calls) != 3 {
		t.Errorf("foreign calls %v, want clear_route_cache for each routed request", calls)
	}

	// <**route:clear**>: held headers get no route before the body, and the
	// answer leaves it off.
	id2 := e.h.InitializeHttpContext()
	e.h.CallOnRequestHeaders(id2, reqHeaders(llm.Chat, sessionHeader), false)
	if v, ok := header(e.h.GetRequestHeaders(id2), hostapi.HeaderRoute); ok {
		t.Errorf("held headers routed before the body: %q", v)
	}
	e.h.CallOnRequestBody(id2, []byte(`{"model":"m","messages":[{"role":"user","content":"<**route:clear**>"}]}`), true)
	e.answer(hostapi.PrepareResponse{})
	e.forwarded(id2)
	if v, ok := header(e.h.GetRequestHeaders(id2), hostapi.HeaderRoute); ok {
		t.Errorf("unpinned request still has %s %q", hostapi.HeaderRoute, v)
	}

	// A host failure (fail open) keeps the cached route: here none.
	id3 := e.h.InitializeHttpContext()
	e.h.CallOnRequestHeaders(id3, reqHeaders(llm.Chat, sessionHeader), false)
	e.h.CallOnRequestBody(id3, []byte(routeBody), true)
	e.fail(nil, "")
	e.forwarded(id3)
	if v, ok := header(e.h.GetRequestHeaders(id3), hostapi.HeaderRoute); ok {
		t.Errorf("failed prepare set %s %q", hostapi.HeaderRoute, v)
	}
}

// TestSkippedRequestTakesTheQuietRoute: a request that skips prepare with
// held headers is routed by its quiet entry, as its prepare would have.
func TestSkippedRequestTakesTheQuietRoute(t *testing.T) {
	e := newSkipEnv(t, `{"token":"tok","allowOnHeadersStopIteration":true}`)
	const gen = 3
	send := func(text string) uint32 {
		id := e.h.InitializeHttpContext()
		e.h.CallOnRequestHeaders(id, reqHeaders(llm.Chat, sessionHeader), false)
		e.h.CallOnRequestBody(id, []byte(`{"model":"m","messages":[{"role":"user","content":"`+text+`"}]}`), true)
		return id
	}
	send("first")
	e.answer(hostapi.PrepareResponse{Generation: gen, QuietMs: 60_000, Route: "fast"})
	e.answerPoll(gen)
	prepares := len(e.calls(hostapi.PathPrepare))
	id := send("second")
	if len(e.calls(hostapi.PathPrepare)) != prepares {
		t.Fatal("the quiet session's request was prepared")
	}
	if v, _ := header(e.h.GetRequestHeaders(id), hostapi.HeaderRoute); v != "fast" {
		t.Errorf("skipped request %s = %q, want fast", hostapi.HeaderRoute, v)
	}
}

func TestFollowupHeadersCarryRoute(t *testing.T) {
	client := [][2]string{{":authority", "api"}, {hostapi.HeaderRoute, "forged"}}
	h := &httpContext{requestHeaders: client, pinnedRoute: "fast"}
	if got := h.followupHeaders()[hostapi.HeaderRoute]; got != "fast" {
		t.Errorf("followup route %q, want fast", got)
	}
	h.pinnedRoute = ""
	if got, ok := h.followupHeaders()[hostapi.HeaderRoute]; ok {
		t.Errorf("unpinned followup carries %s %q", hostapi.HeaderRoute, got)
	}
}
