// Package ui is the host's dashboard (docs/dashboard.md): a web page
// served from files embedded in the binary at /ui, a stream of change
// notices for it (GET /api/events), the same-origin rule for the page's
// controls, and the per-session history view. It needs no build step and
// loads nothing from the network, so it works offline.
//
// The host mounts these handlers behind its own access rules: the page
// and its read-only API from loopback without a token, every control
// with the token.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
)

// Prefix is where the page lives on the host.
const Prefix = "/ui/"

//go:embed static
var static embed.FS

// Files is the page's embedded files (index.html, app.js, style.css…).
func Files() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		panic(err) // the embed directive guarantees the directory
	}
	return sub
}

// Handler serves the page under Prefix. The files are public (they carry
// no session data), so they need no token; the page's API calls do.
func Handler() http.Handler {
	files := http.StripPrefix(strings.TrimSuffix(Prefix, "/"), http.FileServerFS(Files()))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		// The page runs only its own files and talks only to this host.
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	})
}

// SameOrigin refuses a request a browser sent from another origin: the
// page's controls are POSTs from the page itself, and a form or fetch on
// another site must not reach them even when the browser would attach
// something. Requests without the browser headers (the CLI, curl) pass;
// they need the token anyway.
func SameOrigin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if why := crossOrigin(r); why != "" {
			writeError(w, http.StatusForbidden, why)
			return
		}
		h(w, r)
	}
}

// crossOrigin says why r came from another origin, or "" when it did not.
func crossOrigin(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return "cross-origin request refused (Sec-Fetch-Site: " + site + "): use the dashboard at /ui on this host"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || origin == "null" || !strings.EqualFold(u.Host, r.Host) {
		return "cross-origin request refused (Origin " + origin + " is not " + r.Host + "): use the dashboard at /ui on this host"
	}
	return ""
}
