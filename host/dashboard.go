package host

import (
	"cmp"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/chimehq/chime/storage"
)

// The dashboard API (docs/configuration.md) is read-only. From loopback it needs no
// token, so a local browser can show it; from anywhere else it needs the
// bearer token. Task, stopMessage and tool text are private to the user:
// they appear only with ?include=text, and that always needs the token.

// Dashboard limits for GET /api/sessions?limit=N.
const (
	defaultSessionLimit = 1000
	maxSessionLimit     = 10000
)

// SessionView is one entry of GET /api/sessions.
type SessionView struct {
	ID          string           `json:"id"`
	CreatedAt   int64            `json:"createdAt"`
	LastSeenAt  int64            `json:"lastSeenAt"`
	TaskCount   int              `json:"taskCount"`
	StopMessage *StopMessageView `json:"stopMessage"` // null when none
	Route       string           `json:"route"`
	// LiveTimers counts the timers running, waited on, paused or in the
	// background.
	LiveTimers int `json:"liveTimers"`
	// LastChannel is where deliveries go: "session" after a proxied
	// request, "sse" while chime watch or the dashboard follows it
	// (docs/delivery.md#routing).
	LastChannel string `json:"lastChannel,omitempty"`
	// Heartbeat is set while the session's heartbeat is armed
	// (docs/scheduler.md#heartbeat).
	Heartbeat *HeartbeatBrief `json:"heartbeat,omitempty"`
}

// HeartbeatBrief is the session list's view of a heartbeat.
type HeartbeatBrief struct {
	Every  string `json:"every"`
	NextAt int64  `json:"nextAt"` // Unix ms
}

// StopMessageView is a session's stopMessage state (docs/continuation.md).
type StopMessageView struct {
	MaxRepeats int    `json:"maxRepeats"`
	Used       int    `json:"used"`
	Text       string `json:"text,omitempty"` // only with ?include=text
}

// TaskView is one entry of GET /api/sessions/{id}/tasks; times are Unix ms,
// 0 = unset.
type TaskView struct {
	TaskID          string `json:"taskId"`
	DueAt           int64  `json:"dueAt"`
	Repeat          string `json:"repeat"`
	MaxRuns         int    `json:"maxRuns"`
	Runs            int    `json:"runs"`
	DeliveredAt     int64  `json:"deliveredAt"`
	LastDeliveredAt int64  `json:"lastDeliveredAt"`
	DeliveryCount   int    `json:"deliveryCount"`
	Reserved        bool   `json:"reserved"`
	CreatedAt       int64  `json:"createdAt"`
	UpdatedAt       int64  `json:"updatedAt"`
	// Kind is "task" (the model's reminder) or "notice" (a background
	// timer's completion waiting for the session, docs/timers.md).
	Kind string `json:"kind"`
	// Only with ?include=text:
	Task      string `json:"task,omitempty"`
	Tool      string `json:"tool,omitempty"`
	Arguments string `json:"arguments,omitempty"`
}

// dashboard applies the access rule above and passes includeText to h.
func (s *Service) dashboard(h func(w http.ResponseWriter, r *http.Request, includeText bool)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		include := r.URL.Query().Get("include")
		if include != "" && include != "text" {
			writeError(w, http.StatusBadRequest, "include must be \"text\" or absent")
			return
		}
		authed := s.tokenOK(r)
		if !authed && (include == "text" || !isLoopback(r)) {
			unauthorized(w)
			return
		}
		// A loopback connection may come from a web page of another origin
		// through a rebound DNS name: without the token only a loopback
		// or configured Host is served (docs/failures.md).
		if !authed && !s.localHost(r.Host) {
			writeError(w, http.StatusForbidden, "Host "+strconv.Quote(r.Host)+" is not a loopback name: use 127.0.0.1 or localhost, send the bearer token, or add the name to dashboardHosts in the host config file")
			return
		}
		h(w, r, include == "text")
	}
}

// localHost reports whether a Host header names this machine: localhost
// (and *.localhost), a loopback IP, or one of Config.DashboardHosts.
func (s *Service) localHost(hostport string) bool {
	h := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		h = hh
	}
	h = strings.TrimSuffix(strings.ToLower(strings.Trim(h, "[]")), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback()
	}
	return h != "" && slices.Contains(s.cfg.DashboardHosts, h)
}

func (s *Service) handleSessions(w http.ResponseWriter, r *http.Request, includeText bool) {
	limit := defaultSessionLimit
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxSessionLimit {
			writeError(w, http.StatusBadRequest, "limit must be 1.."+strconv.Itoa(maxSessionLimit))
			return
		}
		limit = n
	}
	stored, err := s.store.ListSessions()
	if err != nil {
		writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
		return
	}
	// Overlay the touches not written yet, so the view is current.
	pending := s.touches.Pending()
	views := make([]SessionView, 0, len(stored)+len(pending))
	for _, sess := range stored {
		v := SessionView{ID: sess.ID, CreatedAt: sess.CreatedAt, LastSeenAt: sess.LastSeenAt, Route: sess.Route, LastChannel: sess.LastChannel}
		if ms, ok := pending[sess.ID]; ok {
			v.LastSeenAt = max(v.LastSeenAt, ms)
			delete(pending, sess.ID)
		}
		views = append(views, v)
	}
	for id, ms := range pending {
		views = append(views, SessionView{ID: id, CreatedAt: ms, LastSeenAt: ms})
	}
	slices.SortFunc(views, func(a, b SessionView) int {
		return cmp.Or(cmp.Compare(b.LastSeenAt, a.LastSeenAt), cmp.Compare(a.ID, b.ID))
	})
	views = views[:min(limit, len(views))]
	for i := range views {
		v := &views[i]
		v.LiveTimers = s.timers.LiveIn(v.ID)
		if c := s.delivery.LastChannel(v.ID); c != "" {
			v.LastChannel = c
		}
		if at, ok := s.sched.NextHeartbeat(v.ID); ok {
			v.Heartbeat = &HeartbeatBrief{Every: s.heartbeatFor(v.ID).Every.String(), NextAt: at.UnixMilli()}
		}
		err := s.store.View(func(tx *storage.Tx) error {
			tasks, err := tx.Tasks(v.ID)
			if err != nil {
				return err
			}
			v.TaskCount = len(tasks)
			m, ok, err := tx.StopMessage(v.ID)
			if err != nil || !ok {
				return err
			}
			v.StopMessage = &StopMessageView{MaxRepeats: m.MaxRepeats, Used: m.Used}
			if includeText {
				v.StopMessage.Text = m.Text
			}
			return nil
		})
		if err != nil {
			writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, views)
}

func (s *Service) handleTasks(w http.ResponseWriter, r *http.Request, includeText bool) {
	id := r.PathValue("id")
	var tasks []storage.ClockTask
	var known bool
	err := s.store.View(func(tx *storage.Tx) error {
		var err error
		if tasks, err = tx.Tasks(id); err != nil {
			return err
		}
		_, known, err = tx.Session(id)
		return err
	})
	if err != nil {
		writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
		return
	}
	if _, pending := s.touches.Get(id); !known && !pending && len(tasks) == 0 {
		writeError(w, http.StatusNotFound, "unknown session")
		return
	}
	views := make([]TaskView, 0, len(tasks))
	for _, t := range tasks {
		v := TaskView{
			TaskID: t.TaskID, DueAt: t.DueAt, Repeat: t.Repeat, MaxRuns: t.MaxRuns, Runs: t.Runs,
			DeliveredAt: t.DeliveredAt, LastDeliveredAt: t.LastDeliveredAt, DeliveryCount: t.DeliveryCount,
			Reserved: t.ReservedBy != "", CreatedAt: t.CreatedAt, UpdatedAt: t.UpdatedAt, Kind: "task",
		}
		if t.Notice != "" {
			v.Kind = "notice"
		}
		if includeText {
			v.Task, v.Tool, v.Arguments = t.Task, t.Tool, t.Arguments
		}
		views = append(views, v)
	}
	writeJSON(w, http.StatusOK, views)
}
