package envoy_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestHTTPRouteFromBody: with allow_on_headers_stop_iteration, a filter
// that pauses in request headers still gets the body, sets a header from
// it and calls clear_route_cache, and the router sends that same request
// to the header-matched route (docs/directives.md#routing, §13). Without the flag the
// same guest holds everything: the body never reaches it.
func TestHTTPRouteFromBody(t *testing.T) {
	app, fast := newUpstream(t), newUpstream(t)
	held := oneFilter("held", "held", "routebody", false)
	routed := oneFilter("main", "routed", "routebody", false)
	routed.filters[0].allowStopIteration = true
	p := startProxy(t, runtimeSpec{
		listeners: []listenerSpec{routed, held},
		clusters:  map[string]string{"app": app.addr(), "fast": fast.addr()},
		routes: `[{ match: { prefix: "/", headers: [{ name: x-route, string_match: { exact: fast } }] }, route: { cluster: fast } },
                      { match: { prefix: "/" }, route: { cluster: app } }]`,
	})

	r := newConn(t).do(t, http.MethodPost, p.url("main", "/v1/chat"), chunkedBody("hi route=fast there"))
	if r.status != 200 || r.body != "upstream:/v1/chat" {
		t.Fatalf("routed request: %d %q", r.status, r.body)
	}
	got, ok := fast.request("/v1/chat")
	if !ok || got.body != "hi route=fast there" || got.header.Get("X-Route") != "fast" {
		t.Fatalf("cluster fast got %+v (found %v); app got %d requests", got, ok, app.count())
	}
	p.logs.expect(t, "routed", "clear_route_cache 0")

	if r := newConn(t).do(t, http.MethodPost, p.url("main", "/plain"), strings.NewReader("no directive")); r.status != 200 {
		t.Fatalf("unrouted request: %d %q", r.status, r.body)
	}
	if _, ok := app.request("/plain"); !ok {
		t.Error("a body without a route did not go to the default cluster")
	}

	// Without the flag PAUSE from headers is stop-all: no body callback,
	// nothing upstream.
	c := &http.Client{Timeout: 300 * time.Millisecond} // real time: the request is expected to hang
	if resp, err := c.Post(p.url("held", "/held"), "text/plain", strings.NewReader("route=fast")); err == nil {
		resp.Body.Close()
		t.Fatalf("a stop-all request completed: %d", resp.StatusCode)
	}
	if n := len(p.logs.find("held", "req_body ")); n != 0 || app.count()+fast.count() != 2 {
		t.Errorf("stop-all leaked: %d body callbacks, %d upstream requests", n, app.count()+fast.count())
	}
}
