package host

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/chimehq/chime/host/internal/directive"
	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
)

// The scheduler's API (docs/host-api.md#scheduler): a session's heartbeat
// setting, its run history, its system events, and wakes by hand or hook.

// HeartbeatView is GET/PUT /api/sessions/{id}/heartbeat.
type HeartbeatView struct {
	Enabled         bool                `json:"enabled"`
	Every           string              `json:"every"` // Go duration, e.g. "30m"
	Prompt          string              `json:"prompt,omitempty"`
	AckToken        string              `json:"ackToken,omitempty"`
	AckMaxChars     int                 `json:"ackMaxChars,omitempty"`
	ActiveHours     storage.ActiveHours `json:"activeHours"`
	OnlyWhenPending bool                `json:"onlyWhenPending"`
	// Source says where the setting comes from: "session" or "config".
	Source string `json:"source,omitempty"`
	NextAt int64  `json:"nextAt,omitempty"` // Unix ms of the next interval wake
}

// RunView is one run of GET /api/sessions/{id}/runs; its reply only with
// ?include=text.
type RunView struct {
	storage.WakeRun
}

// EventView is one queued system event; its text only with ?include=text.
type EventView struct {
	ContextKey string `json:"contextKey,omitempty"`
	Text       string `json:"text,omitempty"`
	Source     string `json:"source,omitempty"`
	At         int64  `json:"at"`
}

// EventRequest is POST /api/sessions/{id}/events.
type EventRequest struct {
	Text       string `json:"text"`
	ContextKey string `json:"contextKey"`
	// Wake, default true, wakes the session for the event.
	Wake *bool `json:"wake"`
}

// WakeRequest is the optional body of POST /api/sessions/{id}/wake.
type WakeRequest struct {
	Reason string `json:"reason"` // manual or hook (default)
}

func (s *Service) handleGetHeartbeat(w http.ResponseWriter, r *http.Request, _ bool) {
	sid := r.PathValue("id")
	hb := s.heartbeatFor(sid)
	v := heartbeatView(hb)
	v.Source = "config"
	if _, ok, err := s.storedHeartbeat(sid); err == nil && ok {
		v.Source = "session"
	}
	if at, ok := s.sched.NextHeartbeat(sid); ok {
		v.NextAt = at.UnixMilli()
	}
	writeJSON(w, http.StatusOK, v)
}

func heartbeatView(hb scheduler.Heartbeat) HeartbeatView {
	return HeartbeatView{Enabled: hb.Enabled, Every: hb.Every.String(), Prompt: hb.Prompt, AckToken: hb.AckToken,
		AckMaxChars: hb.AckMaxChars, ActiveHours: hb.ActiveHours, OnlyWhenPending: hb.OnlyWhenPending}
}

func (s *Service) handlePutHeartbeat(w http.ResponseWriter, r *http.Request) {
	sid := r.PathValue("id")
	var v HeartbeatView
	if !decodeBody(w, r, &v) {
		return
	}
	rec := storage.Heartbeat{SessionID: sid, Enabled: v.Enabled, Prompt: v.Prompt, AckToken: v.AckToken,
		AckMaxChars: v.AckMaxChars, OnlyWhenPending: v.OnlyWhenPending}
	if v.Every != "" {
		d, err := time.ParseDuration(v.Every)
		if err != nil {
			writeError(w, http.StatusBadRequest, "every: "+err.Error())
			return
		}
		rec.EveryMs = d.Milliseconds()
	}
	if v.ActiveHours != (storage.ActiveHours{}) {
		ah := v.ActiveHours
		rec.ActiveHours = &ah
	}
	if err := scheduler.Merge(s.cfg.Heartbeat, rec).Check(); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := s.setHeartbeat(sid, &rec); err != nil {
		writeError(w, http.StatusInternalServerError, "heartbeat not saved: "+err.Error())
		return
	}
	s.handleGetHeartbeat(w, r, false)
}

func (s *Service) handleDeleteHeartbeat(w http.ResponseWriter, r *http.Request) {
	if err := s.setHeartbeat(r.PathValue("id"), nil); err != nil {
		writeError(w, http.StatusInternalServerError, "heartbeat not reset: "+err.Error())
		return
	}
	s.handleGetHeartbeat(w, r, false)
}

func (s *Service) storedHeartbeat(sid string) (rec storage.Heartbeat, ok bool, err error) {
	err = s.store.View(func(tx *storage.Tx) error {
		rec, ok, err = tx.Heartbeat(sid)
		return err
	})
	return rec, ok, err
}

// setHeartbeat stores a session's own heartbeat setting (nil: back to the
// config's) and re-arms its interval.
func (s *Service) setHeartbeat(sid string, rec *storage.Heartbeat) error {
	err := s.store.Update(func(tx *storage.Tx) error {
		if rec == nil {
			_, err := tx.DeleteHeartbeat(sid)
			return err
		}
		rec.SessionID, rec.UpdatedAt = sid, s.now().UnixMilli()
		return tx.PutHeartbeat(*rec)
	})
	if err != nil {
		return err
	}
	s.armHeartbeat(sid)
	s.changed(sid)
	return nil
}

// armHeartbeat sets the scheduler's interval for the session's effective
// heartbeat. The config's default applies only to sessions that can be
// woken (they have a template).
func (s *Service) armHeartbeat(sid string) {
	hb := s.heartbeatFor(sid)
	_, own, _ := s.storedHeartbeat(sid)
	s.wake.mu.Lock()
	on := hb.Enabled && !s.cfg.Wake.Disabled && (own || s.wake.templated[sid])
	if on {
		s.wake.hbOn[sid] = true
	} else {
		delete(s.wake.hbOn, sid)
	}
	s.wake.mu.Unlock()
	if !on {
		s.sched.SetHeartbeat(sid, 0, time.Time{})
		return
	}
	if next, ok := s.sched.NextHeartbeat(sid); ok && next.Sub(s.now()) <= hb.Every {
		s.sched.SetHeartbeat(sid, hb.Every, next) // keep the phase when it is still in range
		return
	}
	s.sched.SetHeartbeat(sid, hb.Every, s.now().Add(hb.Every))
}

// stageHeartbeatDirective writes <**heartbeat:"30m"**> / <**heartbeat:off**> within the caller's
// transaction and returns what re-arms the in-memory scheduler, to run
// only after the transaction committed. A bad interval is refused
// (directive.IsRejected) before anything is written.
func (s *Service) stageHeartbeatDirective(tx *storage.Tx, sid string, d hostapi.HostDirective) (func(), error) {
	if d.Kind != hostapi.DirectiveHeartbeatOff {
		every := time.Duration(d.EveryMs) * time.Millisecond
		if every < scheduler.MinEvery || every > scheduler.MaxEvery {
			return nil, directive.Reject(errors.New("heartbeat interval out of range"))
		}
	}
	rec, _, err := tx.Heartbeat(sid)
	if err != nil {
		return nil, err
	}
	if d.Kind == hostapi.DirectiveHeartbeatOff {
		rec.Enabled = false
	} else {
		rec.Enabled, rec.EveryMs = true, d.EveryMs
	}
	rec.SessionID, rec.UpdatedAt = sid, s.now().UnixMilli()
	if err := tx.PutHeartbeat(rec); err != nil {
		return nil, err
	}
	return func() {
		s.armHeartbeat(sid)
		s.changed(sid)
	}, nil
}

func (s *Service) handleRuns(w http.ResponseWriter, r *http.Request, includeText bool) {
	runs, err := s.runsOf(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "runs not readable")
		return
	}
	out := make([]RunView, 0, len(runs))
	for i := len(runs) - 1; i >= 0; i-- { // newest first
		v := RunView{runs[i]}
		if !includeText {
			v.Reply = ""
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

func (s *Service) handleEvents(w http.ResponseWriter, r *http.Request, includeText bool) {
	evs, err := scheduler.Peek(s.store, r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "events not readable")
		return
	}
	out := make([]EventView, 0, len(evs))
	for _, e := range evs {
		v := EventView{ContextKey: e.ContextKey, Source: e.Source, At: e.At}
		if includeText {
			v.Text = e.Text
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": out})
}

func (s *Service) handlePostEvent(w http.ResponseWriter, r *http.Request) {
	sid := r.PathValue("id")
	var req EventRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if err := s.EnqueueEvent(r.Context(), sid, storage.SystemEvent{ContextKey: req.ContextKey, Text: req.Text, Source: "api"}); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Wake == nil || *req.Wake {
		s.RequestWake(sid, scheduler.ReasonMessage)
	}
	w.WriteHeader(http.StatusNoContent)
}

// EnqueueEvent queues a system event for the session's next wake
// (docs/scheduler.md#system-events).
func (s *Service) EnqueueEvent(_ context.Context, sid string, ev storage.SystemEvent) error {
	if ev.At == 0 {
		ev.At = s.now().UnixMilli()
	}
	dropped, err := scheduler.Enqueue(s.store, sid, ev)
	if err != nil {
		return err
	}
	if dropped > 0 {
		s.log.Info("system event queue full; the oldest dropped", "session", sid, "dropped", dropped)
	}
	s.changed(sid)
	return nil
}

func (s *Service) handleWake(w http.ResponseWriter, r *http.Request) {
	var req WakeRequest
	if r.ContentLength != 0 && !decodeBody(w, r, &req) {
		return
	}
	reason := scheduler.ReasonHook
	switch req.Reason {
	case "", "hook":
	case "manual":
		reason = scheduler.ReasonManual
	default:
		writeError(w, http.StatusBadRequest, `reason must be "manual" or "hook"`)
		return
	}
	if s.cfg.Wake.Disabled {
		writeError(w, http.StatusConflict, "wakes are off (wake.enabled: false)")
		return
	}
	s.RequestWake(r.PathValue("id"), reason)
	w.WriteHeader(http.StatusAccepted)
}

// restoreWakes re-arms what the scheduler holds only in memory: which
// sessions have templates, their heartbeats, their task alarms, and a
// wake for each session with queued events.
func (s *Service) restoreWakes(ctx context.Context) {
	if s.cfg.Wake.Disabled {
		return
	}
	var sessions []string
	err := s.store.ScanTemplateSessions(func(sid string) error {
		sessions = append(sessions, sid)
		return nil
	})
	if err != nil {
		s.log.Warn("restoring wake templates failed", "err", err)
	}
	s.wake.mu.Lock()
	for _, sid := range sessions {
		s.wake.templated[sid] = true
	}
	s.wake.mu.Unlock()
	var own []string
	if err := s.store.ScanHeartbeats(func(h storage.Heartbeat) error {
		own = append(own, h.SessionID)
		return nil
	}); err != nil {
		s.log.Warn("restoring heartbeats failed", "err", err)
	}
	for _, sid := range append(own, sessions...) {
		s.armHeartbeat(sid)
	}
	for _, sid := range sessions {
		s.noteTasksChanged(ctx, sid)
	}
	if err := s.store.ScanEventQueues(func(q storage.EventQueue) error {
		s.RequestWake(q.SessionID, scheduler.ReasonMessage)
		return nil
	}); err != nil {
		s.log.Warn("restoring system events failed", "err", err)
	}
	if len(sessions) > 0 {
		s.log.Info("wakes restored", "templates", len(sessions), "heartbeats", len(own))
	}
}
