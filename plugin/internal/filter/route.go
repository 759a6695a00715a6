package filter

import (
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// Routing (docs/directives.md#routing): the session's pinned route travels in
// hostapi.HeaderRoute, which the envoy.yaml routes match on. The filter
// learns the route from prepare answers and caches it per session in
// proxy shared data (every worker VM sees it), so a request can carry it
// from its headers on. With allowOnHeadersStopIteration the headers wait
// for the body, and the prepare answer re-routes the very request that
// carries a route directive.

// routeKeyPrefix prefixes the shared-data key of a session's route.
const routeKeyPrefix = "chime.route."

// headerSessionID is the session id from the request headers alone (the
// body may name one too, but is not here yet).
func (h *httpContext) headerSessionID() string {
	for _, name := range sessionHeaderNames {
		if v := h.sessionHeader(name); v != "" {
			return v
		}
	}
	return ""
}

// cachedRoute is the route last learnt for session sid ("" = none).
func cachedRoute(sid string) string {
	if sid == "" {
		return ""
	}
	v, _, err := proxywasm.GetSharedData(sessionKey(keyRoute, sid))
	if err != nil {
		if err != proxywasm.ErrNotFound {
			proxywasm.LogDebugf("chime: read cached route: %v", err)
		}
		return ""
	}
	return string(v)
}

// cacheRoute records the host's answer for session sid; an unchanged
// value is not written again.
func cacheRoute(sid, route string) {
	if sid == "" {
		return
	}
	old, cas, err := proxywasm.GetSharedData(sessionKey(keyRoute, sid))
	if err == nil && string(old) == route {
		return
	}
	if err != nil && err != proxywasm.ErrNotFound {
		proxywasm.LogDebugf("chime: read cached route: %v", err)
		return
	}
	if err := proxywasm.SetSharedData(sessionKey(keyRoute, sid), []byte(route), cas); err != nil {
		proxywasm.LogDebugf("chime: cache route for %s: %v", sid, err) // another VM wrote first
	}
}

// setRouteHeader puts route on the held request ("" removes the header).
func setRouteHeader(route string) error {
	if route == "" {
		return proxywasm.RemoveHttpRequestHeader(hostapi.HeaderRoute)
	}
	return proxywasm.ReplaceHttpRequestHeader(hostapi.HeaderRoute, route)
}

// routeAtHeaders sets the session's cached route on the request. It
// reports whether the filter should hold the headers for the body
// (allowOnHeadersStopIteration and a body follows).
//
// Held headers get their route when the body is in: a quiet entry's or
// the prepare answer's (routeFromAnswer), or the cached one when there is
// no answer (routeWithoutAnswer). Reading the cache here as well would
// cost every request a shared-data read for the few sessions with a route.
func (h *httpContext) routeAtHeaders(endOfStream bool) bool {
	if h.plugin.cfg.AllowOnHeadersStopIteration && !endOfStream {
		h.routePending = true
		return true
	}
	if h.pinnedRoute = cachedRoute(h.headerSessionID()); h.pinnedRoute != "" {
		if err := setRouteHeader(h.pinnedRoute); err != nil {
			proxywasm.LogDebugf("chime: request %s: set %s: %v", h.id(), hostapi.HeaderRoute, err)
		}
	}
	return false
}

// routeWithoutAnswer gives held headers the route cached for session sid
// (the headers' session when sid is empty) when the body brought no
// answer: the host failed and the request fails open, or the body is
// forwarded as it came.
func (h *httpContext) routeWithoutAnswer(sid string) {
	if !h.routePending {
		return
	}
	if sid == "" {
		sid = h.headerSessionID()
	}
	h.routeFromAnswer(cachedRoute(sid), false)
}

// routeFromAnswer takes the route of a prepare answer: cached for the
// session's next requests, and, when the headers are still held, set on
// this request with the router asked to pick again (clear_route_cache).
// A skipped request passes cache false: its route is a quiet entry's,
// learnt from the prepare answer that cached it.
func (h *httpContext) routeFromAnswer(route string, cache bool) {
	h.routePending = false
	if cache {
		cacheRoute(h.sessionID, route)
	}
	if !h.plugin.cfg.AllowOnHeadersStopIteration || route == h.pinnedRoute {
		h.pinnedRoute = route
		return
	}
	h.pinnedRoute = route
	if err := setRouteHeader(route); err != nil {
		proxywasm.LogWarnf("chime: request %s: set %s: %v", h.id(), hostapi.HeaderRoute, err)
		return
	}
	if _, err := proxywasm.CallForeignFunction("clear_route_cache", nil); err != nil {
		proxywasm.LogDebugf("chime: request %s: clear_route_cache: %v", h.id(), err)
	}
}

// followupHeaders are followupHeaders of the client's request with the
// route this request ended with, so the host's followups are routed alike.
func (h *httpContext) followupHeaders() map[string]string {
	out := followupHeaders(h.requestHeaders)
	if h.pinnedRoute != "" {
		out[hostapi.HeaderRoute] = h.pinnedRoute
	} else {
		delete(out, hostapi.HeaderRoute)
	}
	return out
}
