package host

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/ui"
	"github.com/chimehq/chime/hostapi"
)

// PathToolsExecute runs a server tool over HTTP (ToolExecutor).
const PathToolsExecute = "/v1/tools/execute"

// maxBody bounds a filter API request body; prepare bodies are small.
const maxBody = 1 << 20

// ToolCall is the body of POST /v1/tools/execute.
type ToolCall struct {
	SessionID string          `json:"sessionId"`
	RequestID string          `json:"requestId"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Timezone  string          `json:"timezone,omitempty"` // IANA zone for `get` and repeats
}

// routes builds the mux; every route is counted by endpoint name.
func (s *Service) routes() http.Handler {
	mux := http.NewServeMux()
	handle := func(pattern, endpoint string, h http.HandlerFunc) {
		mux.Handle(pattern, s.count(endpoint, s.settling(pattern, h)))
	}
	handle("POST "+hostapi.PathPrepare, "prepare", s.authed(s.handlePrepare))
	handle("POST "+hostapi.PathCommit, "commit", s.authed(s.handleOutcome(true)))
	handle("POST "+hostapi.PathRollback, "rollback", s.authed(s.handleOutcome(false)))
	handle("GET "+hostapi.PathState, "state", s.authed(s.handleState))
	handle("POST "+hostapi.PathTouch, "touch", s.authed(s.handleTouch))
	handle("POST "+hostapi.PathResolve, "resolve", s.authed(s.handleResolve))
	handle("POST "+hostapi.PathCancel, "cancel", s.authed(s.handleCancel))
	handle("POST "+hostapi.PathFollowup, "followup", s.authed(s.handleFollowup))
	handle("POST "+PathToolsExecute, "tools_execute", s.authed(s.handleToolsExecute))
	handle("GET /healthz", "healthz", s.handleHealthz)
	handle("GET /metrics", "metrics", s.metrics.Handler().ServeHTTP)
	handle("GET /api/sessions", "api_sessions", s.dashboard(s.handleSessions))
	handle("GET /api/sessions/{id}/tasks", "api_tasks", s.dashboard(s.handleTasks))
	handle("GET /api/sessions/{id}/timers", "api_timers", s.dashboard(s.handleTimers))
	handle("POST /api/sessions/{id}/timers/{tid}/{action}", "api_timer_action", s.authed(ui.SameOrigin(s.handleTimerAction)))
	handle("GET /api/jobs", "api_jobs", s.dashboard(s.handleAllJobs))
	handle("GET /api/sessions/{id}/jobs", "api_jobs", s.dashboard(s.handleJobs))
	handle("POST /api/sessions/{id}/jobs", "api_job_create", s.authed(ui.SameOrigin(s.handleJobCreate)))
	handle("GET /api/sessions/{id}/jobs/{jid}", "api_job", s.dashboard(s.handleJob))
	handle("DELETE /api/sessions/{id}/jobs/{jid}", "api_job_delete", s.authed(ui.SameOrigin(s.handleJobDelete)))
	handle("POST /api/sessions/{id}/jobs/{jid}/{action}", "api_job_action", s.authed(ui.SameOrigin(s.handleJobAction)))
	handle("POST "+hostapi.PathTemplate, "template", s.authed(s.handleTemplate))
	handle("GET /api/sessions/{id}/heartbeat", "api_heartbeat", s.dashboard(s.handleGetHeartbeat))
	handle("PUT /api/sessions/{id}/heartbeat", "api_heartbeat_put", s.authed(ui.SameOrigin(s.handlePutHeartbeat)))
	handle("DELETE /api/sessions/{id}/heartbeat", "api_heartbeat_delete", s.authed(ui.SameOrigin(s.handleDeleteHeartbeat)))
	handle("GET /api/sessions/{id}/runs", "api_runs", s.dashboard(s.handleRuns))
	handle("GET /api/sessions/{id}/events", "api_system_events", s.dashboard(s.handleEvents))
	handle("POST /api/sessions/{id}/events", "api_system_events_post", s.authed(ui.SameOrigin(s.handlePostEvent)))
	handle("POST /api/sessions/{id}/wake", "api_wake", s.authed(ui.SameOrigin(s.handleWake)))
	handle("GET "+PathSessionEvents, "session_events", s.authed(s.handleSessionEvents))
	handle("GET /api/sessions/{id}/deliveries", "api_deliveries", s.dashboard(s.handleDeliveries))
	handle("POST /api/sessions/{id}/deliveries/{did}/retry", "api_delivery_retry", s.authed(ui.SameOrigin(s.handleDeliveryRetry)))
	// The dashboard (docs/dashboard.md): the page, its change stream and
	// the history view.
	handle("GET /ui/", "ui", ui.Handler().ServeHTTP)
	handle("GET /ui", "ui", http.RedirectHandler(ui.Prefix, http.StatusFound).ServeHTTP)
	// The host's root is the dashboard; other unknown paths stay 404 JSON.
	handle("GET /{$}", "ui", http.RedirectHandler(ui.Prefix, http.StatusFound).ServeHTTP)
	handle("GET /api/events", "api_events", s.dashboard(func(w http.ResponseWriter, r *http.Request, _ bool) { s.events.ServeHTTP(w, r) }))
	handle("GET /api/sessions/{id}/history", "api_history", s.dashboard(ui.HistoryHandler(ui.TimerHistory(s.timers.List), s.runHistory, s.deliveryHistory)))
	handle(PathMCP, "mcp", s.authed(s.mcpHandler().ServeHTTP))
	handle("/", "other", func(w http.ResponseWriter, r *http.Request) {
		if allow, ok := knownMethods[r.URL.Path]; ok {
			w.Header().Set("Allow", allow)
			writeError(w, http.StatusMethodNotAllowed, r.Method+" "+r.URL.Path+": use "+allow)
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path)
	})
	return mux
}

// knownMethods lets a wrong method get 405 instead of 404.
var knownMethods = map[string]string{
	hostapi.PathPrepare: "POST", hostapi.PathCommit: "POST", hostapi.PathRollback: "POST", hostapi.PathState: "GET",
	hostapi.PathResolve: "POST", hostapi.PathCancel: "POST", hostapi.PathFollowup: "POST", hostapi.PathTemplate: "POST",
	hostapi.PathTouch: "POST",
	PathToolsExecute:  "POST", "/healthz": "GET", "/metrics": "GET", "/api/sessions": "GET",
}

// statusRecorder remembers the status code for the request counter.
type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (s *Service) count(endpoint string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		s.metrics.Requests.WithLabelValues(endpoint, strconv.Itoa(rec.code)).Inc()
	})
}

// tokenOK checks `authorization: Bearer <token>` in constant time; hashing
// both sides first hides the token's length too.
func (s *Service) tokenOK(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return subtle.ConstantTimeCompare(sum[:], s.tokenSum[:]) == 1
}

// authed answers 401 before h can touch any state (docs/failures.md).
func (s *Service) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.tokenOK(r) {
			unauthorized(w)
			return
		}
		h(w, r)
	}
}

func unauthorized(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="chime host"`)
	writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (authorization: Bearer <CHIME_HOST_TOKEN>)")
}

// decodeBody reads a JSON body of at most 1 MiB into v, answering 400 or
// 413 itself.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeBodyLimit(w, r, v, maxBody)
}

func decodeBodyLimit(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d MiB", limit>>20))
			return false
		}
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// maxPrepareBody bounds a prepare body: MaxDirectivesPerRequest directives
// of a few KB each fit many times over.
const maxPrepareBody = 256 << 10

func (s *Service) handlePrepare(w http.ResponseWriter, r *http.Request) {
	// Admission control (docs/failures.md): past MaxConcurrentPrepares a
	// call waits briefly for a slot, then the host answers 503, so the
	// filter fails open early instead of timing out late.
	if !s.admitPrepare(r.Context()) {
		s.metrics.PrepareShed.Inc()
		s.shedLog.note(s, "prepare shed: too many in flight; the filter fails open", "inFlight", cap(s.prepareSlots))
		writeError(w, http.StatusServiceUnavailable, "host busy: too many prepare calls in flight")
		return
	}
	defer s.releasePrepare()
	var req hostapi.PrepareRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPrepareBody))
	err := dec.Decode(&req)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.log.Warn("prepare body over the limit refused; the filter fails open for that request", "limit", maxPrepareBody)
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("prepare body over %d KiB", maxPrepareBody>>10))
			return
		}
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return
	}
	if r.Context().Err() != nil {
		// The filter stopped waiting while this call queued: it failed
		// open and keeps the directives; no work for nobody.
		s.metrics.LatePrepares.Inc()
		s.lateLog.note(s, "prepare after the filter's deadline; no reminders reserved", "request", req.RequestID)
		writeError(w, http.StatusServiceUnavailable, "the caller has gone")
		return
	}
	writeJSON(w, http.StatusOK, s.Prepare(r.Context(), req))
}

func (s *Service) handleOutcome(commit bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req hostapi.OutcomeRequest
		if !decodeBody(w, r, &req) {
			return
		}
		if req.RequestID == "" {
			writeError(w, http.StatusBadRequest, "requestId is required")
			return
		}
		var err error
		if commit {
			_, err = s.Commit(r.Context(), req.RequestID)
		} else {
			_, err = s.Rollback(r.Context(), req.RequestID)
		}
		if err != nil {
			s.log.Warn("reservation outcome failed", "commit", commit, "request", req.RequestID, "err", err)
			writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Service) handleResolve(w http.ResponseWriter, r *http.Request) {
	var req hostapi.ResolveRequest
	if !decodeBodyLimit(w, r, &req, maxResolveBody) {
		return
	}
	resp, err := s.Resolve(r.Context(), req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	resp.Generation = s.gens.current() // after the chain's tools (skip.go)
	writeJSON(w, http.StatusOK, resp)
}

func (s *Service) handleCancel(w http.ResponseWriter, r *http.Request) {
	var req hostapi.OutcomeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.RequestID == "" {
		writeError(w, http.StatusBadRequest, "requestId is required")
		return
	}
	s.Cancel(req.RequestID)
	w.WriteHeader(http.StatusNoContent)
}

func (s *Service) handleState(w http.ResponseWriter, r *http.Request) {
	s.serveState(w, r) // skip.go: with the generation long poll
}

func (s *Service) handleToolsExecute(w http.ResponseWriter, r *http.Request) {
	var call ToolCall
	if !decodeBody(w, r, &call) {
		return
	}
	ctx := clock.WithLocation(r.Context(), s.location(call.Timezone))
	res := s.Execute(ctx, call.SessionID, call.RequestID, call.Name, call.Arguments)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(res)
}

// storageHealth is the store's part of /healthz (docs/failures.md): a host short
// of disk space still answers ok, since it serves reads and the request
// path fails open, but says that writes are refused.
type storageHealth struct {
	Writable  bool   `json:"writable"`
	FreeBytes uint64 `json:"freeBytes"`
	MinFree   uint64 `json:"minFreeBytes"`
	ReadOnly  bool   `json:"readOnly,omitempty"` // started on a full disk
	Reason    string `json:"reason,omitempty"`
}

func (s *Service) storageHealth() storageHealth {
	sp := s.store.Space()
	h := storageHealth{Writable: !sp.Low, FreeBytes: sp.Free, MinFree: sp.MinFree, ReadOnly: sp.ReadOnly}
	switch {
	case sp.ReadOnly:
		h.Reason = "started on a full disk: read-only until restarted with free space"
	case sp.Low:
		h.Reason = "free disk space below the store's headroom: writes are refused until space is freed"
	}
	return h
}

func (s *Service) handleHealthz(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		OK      bool            `json:"ok"`
		NTP     hostapi.NTPInfo `json:"ntp"`
		Storage storageHealth   `json:"storage"`
	}{true, s.ntpInfo(), s.storageHealth()})
}

// isLoopback reports whether the request came from this machine.
func isLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
