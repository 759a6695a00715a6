package e2e

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// routeRequest posts one chat request of session with text and returns the
// x-chime-route header of each request the provider received for it.
func routeRequest(t *testing.T, d *demo, session, text string) []string {
	t.Helper()
	deleteMockRequests(t, d)
	code, out := postJSON(t, d.proxyURL+"/v1/chat/completions", map[string]string{"x-chime-session": session},
		`{"model":"m","stream":false,"messages":[{"role":"user","content":`+strconv.Quote(text)+`}]}`)
	require.Equal(t, http.StatusOK, code, string(out))
	var routes []string
	for _, r := range d.mockRequests(t) {
		routes = append(routes, r.Headers["x-chime-route"])
	}
	return routes
}

// TestRouteDirectiveSameRequest: with allow_on_headers_stop_iteration (the
// product envoy.yaml) and the plugin's allowOnHeadersStopIteration, the
// request that carries <**route:NAME**> already goes out with
// x-chime-route, and the followups it causes carry it too (docs/directives.md#routing).
func TestRouteDirectiveSameRequest(t *testing.T) {
	d := newDemoWith(t, `"allowOnHeadersStopIteration":true`)
	d.up(t)
	got := routeRequest(t, d, "route-same", `<**route:fast**><**stopMessage:"go on",1**>hi`)
	assert.Equal(t, []string{"fast", "fast"}, got, "the request and its stopMessage followup")
	assert.Equal(t, []string{"fast"}, routeRequest(t, d, "route-same", "next"))
	assert.Equal(t, []string{""}, routeRequest(t, d, "route-same", "<**route:clear**>unpin"), "route:clear applies to its own request")
	assert.Equal(t, []string{""}, routeRequest(t, d, "route-other", "another session"))
}

// TestRouteDirectiveNextRequest: without the flag the route is picked
// before the body is read, so the directive steers the session from the
// next request on.
func TestRouteDirectiveNextRequest(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	assert.Equal(t, []string{""}, routeRequest(t, d, "route-next", "<**route:fast**>hi"))
	assert.Equal(t, []string{"fast"}, routeRequest(t, d, "route-next", "next"))
}
