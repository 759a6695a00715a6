package proxy

import (
	"encoding/json"
	"net"
	"net/http"
	"regexp"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// ServerInfo is what /server_info reports, plus what /listeners,
// /clusters and /config_dump describe.
type ServerInfo struct {
	Version     string
	NodeID      string
	NodeCluster string
	Concurrency int
	Start       time.Time
	// Config is the running configuration (nil: those pages are empty).
	Config *config.Config
	// ListenerAddr gives a listener's bound host:port by name.
	ListenerAddr func(name string) string
}

// Admin is the admin listener (Envoy's admin: /ready, /stats,
// /stats/prometheus, /server_info, /listeners, /clusters, /config_dump;
// docs/local-runtime.md).
type Admin struct {
	ln  net.Listener
	srv *http.Server
}

// NewAdminHandler serves the admin endpoints from a stat store.
func NewAdminHandler(st *stats.Store, info ServerInfo) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/ready", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		_, _ = w.Write([]byte("LIVE\n"))
	})
	mux.HandleFunc("/stats/prometheus", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=UTF-8")
		_ = st.WritePrometheus(w)
	})
	mux.HandleFunc("/stats", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("format") == "prometheus" {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=UTF-8")
			_ = st.WritePrometheus(w)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		q := r.URL.Query()
		opt := stats.TextOptions{UsedOnly: q.Has("usedonly")}
		if f := q.Get("filter"); f != "" {
			re, err := regexp.Compile(f)
			if err != nil {
				http.Error(w, "Invalid re2 regex", http.StatusBadRequest)
				return
			}
			opt.Filter = re
		}
		if q.Get("format") == "json" {
			w.Header().Set("Content-Type", "application/json")
			_ = st.WriteJSON(w, opt)
			return
		}
		_ = st.WriteText(w, opt)
	})
	mux.HandleFunc("/listeners", func(w http.ResponseWriter, r *http.Request) {
		writeListeners(w, r, info)
	})
	mux.HandleFunc("/clusters", func(w http.ResponseWriter, r *http.Request) {
		writeClusters(w, r, info)
	})
	mux.HandleFunc("/config_dump", func(w http.ResponseWriter, r *http.Request) {
		writeConfigDump(w, info)
	})
	mux.HandleFunc("/server_info", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"version":              info.Version,
			"state":                "LIVE",
			"uptime_current_epoch": time.Since(info.Start).Round(time.Second).String(),
			"node":                 map[string]string{"id": info.NodeID, "cluster": info.NodeCluster},
			"command_line_options": map[string]any{
				"concurrency": info.Concurrency,
			},
		})
	})
	return mux
}

// ListenAdmin binds the admin address and serves h.
func ListenAdmin(addr string, h http.Handler) (*Admin, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	a := &Admin{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = a.srv.Serve(ln) }()
	return a, nil
}

// Addr is the bound admin address.
func (a *Admin) Addr() string { return a.ln.Addr().String() }

// Close stops the admin server.
func (a *Admin) Close() error { return a.srv.Close() }
