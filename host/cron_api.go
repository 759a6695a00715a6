package host

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/chimehq/chime/host/cron"
	"github.com/chimehq/chime/storage"
)

// The cron job API (docs/cron.md#api) is what `chime cron` and the
// dashboard drive: GETs list jobs under the dashboard's access rule (a job's
// text is text: ?include=text, which needs the token), every change needs
// the token.

// JobView is one job of the cron API; times are Unix ms of host time
// (0 = unset).
type JobView struct {
	JobID               string `json:"jobId"`
	Session             string `json:"session"`
	Name                string `json:"name,omitempty"`
	Kind                string `json:"kind"`
	Schedule            string `json:"schedule"`
	TZ                  string `json:"tz,omitempty"`
	Target              string `json:"target"`
	Enabled             bool   `json:"enabled"`
	Source              string `json:"source,omitempty"` // "config" for a job of the host config file
	NextRunAt           int64  `json:"nextRunAt"`
	LastRunAt           int64  `json:"lastRunAt"`
	LastStatus          string `json:"lastStatus,omitempty"`
	LastError           string `json:"lastError,omitempty"`
	ConsecutiveFailures int    `json:"consecutiveFailures"`
	Runs                int64  `json:"runs"`
	CreatedAt           int64  `json:"createdAt"`
	Text                string `json:"text,omitempty"` // only with the token
}

// JobCreate is the body of POST /api/sessions/{id}/jobs.
type JobCreate struct {
	Name     string `json:"name,omitempty"`
	Kind     string `json:"kind,omitempty"` // at, every, cron; empty: told from schedule
	Schedule string `json:"schedule"`
	TZ       string `json:"tz,omitempty"`
	Text     string `json:"text"`
	Target   string `json:"target,omitempty"` // main (default) or isolated
}

// maxJobBody bounds a create body: the text and a few short fields.
const maxJobBody = 64 << 10

func jobView(j storage.CronJob, includeText bool) JobView {
	v := JobView{
		JobID: j.JobID, Session: j.SessionID, Name: j.Name, Kind: j.Kind, Schedule: j.Schedule, TZ: j.TZ, Target: j.Target,
		Enabled: j.Enabled, Source: j.Source, NextRunAt: j.NextRunAt, LastRunAt: j.LastRunAt, LastStatus: j.LastStatus,
		LastError: j.LastError, ConsecutiveFailures: j.ConsecutiveFailures, Runs: j.Runs, CreatedAt: j.CreatedAt,
	}
	if includeText {
		v.Text = j.Text
	}
	return v
}

// newCron builds the cron manager and its metrics (New).
func (s *Service) newCron() error {
	cm := s.metrics.RegisterCron(func() float64 { return float64(s.cron.Live()) })
	var err error
	s.cron, err = cron.New(cron.Config{
		Store: s.store, Clock: s.clock, Sink: s.cronSink(),
		MaxPerSession: s.cfg.CronMaxPerSession, Disabled: s.cfg.DisableCron, Logger: s.log,
		Observe: func(outcome string, late time.Duration) {
			cm.Runs.WithLabelValues(outcome).Inc()
			if late >= 0 {
				cm.Lateness.Observe(late.Seconds())
			}
		},
	})
	return err
}

// restoreCron loads the stored jobs and reconciles those of the config
// file (Serve, before the loop starts). Overdue jobs run once when the
// loop starts.
func (s *Service) restoreCron() {
	n, err := s.cron.Restore()
	if err != nil {
		s.log.Warn("restoring cron jobs failed; those not restored stay stored", "err", err)
	} else if n > 0 {
		s.log.Info("cron jobs restored", "count", n)
	}
	if s.cfg.DisableCron {
		return
	}
	if err := s.cron.Declare(s.cfg.CronJobs); err != nil {
		s.log.Warn("some cron jobs of the host config were not applied", "err", err)
	}
}

func (s *Service) handleJobs(w http.ResponseWriter, r *http.Request, includeText bool) {
	js := s.cron.List(r.PathValue("id"))
	out := make([]JobView, 0, len(js))
	for _, j := range js {
		out = append(out, jobView(j, includeText))
	}
	writeJSON(w, http.StatusOK, out)
}

// handleAllJobs lists every session's jobs (GET /api/jobs).
func (s *Service) handleAllJobs(w http.ResponseWriter, r *http.Request, includeText bool) {
	js := s.cron.ListAll()
	out := make([]JobView, 0, len(js))
	for _, j := range js {
		out = append(out, jobView(j, includeText))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) handleJob(w http.ResponseWriter, r *http.Request, includeText bool) {
	j, err := s.cron.Get(r.PathValue("id"), r.PathValue("jid"))
	if err != nil {
		s.jobError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, jobView(j, includeText))
}

func (s *Service) handleJobCreate(w http.ResponseWriter, r *http.Request) {
	var body JobCreate
	if !decodeStrict(w, r, &body, maxJobBody) {
		return
	}
	sid := r.PathValue("id")
	j, err := s.cron.Create(cron.Spec{Session: sid, Name: body.Name, Kind: body.Kind, Schedule: body.Schedule, TZ: body.TZ, Text: body.Text, Target: body.Target})
	if err != nil {
		s.jobError(w, err)
		return
	}
	s.log.Info("cron job created through the API", "session", sid, "job", j.JobID, "kind", j.Kind, "target", j.Target)
	writeJSON(w, http.StatusCreated, jobView(j, true))
}

func (s *Service) handleJobDelete(w http.ResponseWriter, r *http.Request) {
	sid, jid := r.PathValue("id"), r.PathValue("jid")
	if err := s.cron.Delete(sid, jid); err != nil {
		s.jobError(w, err)
		return
	}
	s.log.Info("cron job deleted through the API", "session", sid, "job", jid)
	writeJSON(w, http.StatusOK, map[string]string{"deleted": jid})
}

// handleJobAction is POST …/jobs/{jid}/run|pause|resume.
func (s *Service) handleJobAction(w http.ResponseWriter, r *http.Request) {
	sid, jid, action := r.PathValue("id"), r.PathValue("jid"), r.PathValue("action")
	var j storage.CronJob
	var err error
	switch action {
	case "run":
		j, err = s.cron.RunNow(r.Context(), sid, jid)
	case "pause":
		j, err = s.cron.Pause(sid, jid)
	case "resume":
		j, err = s.cron.Resume(sid, jid)
	default:
		writeError(w, http.StatusNotFound, "action must be run, pause or resume")
		return
	}
	if err != nil {
		s.jobError(w, err)
		return
	}
	s.log.Info("cron job changed through the API", "session", sid, "job", jid, "action", action, "status", j.LastStatus)
	writeJSON(w, http.StatusOK, jobView(j, true))
}

// jobError answers an error of the cron manager: 400 naming the field,
// 404, 409 or 500.
func (s *Service) jobError(w http.ResponseWriter, err error) {
	var fe *cron.FieldError
	switch {
	case errors.As(err, &fe):
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": fe.Error(), "field": fe.Field})
	case errors.Is(err, cron.ErrUnknown):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, cron.ErrLimit), errors.Is(err, cron.ErrBusy), errors.Is(err, cron.ErrState), errors.Is(err, cron.ErrDisabled):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
	}
}

// decodeStrict reads a JSON body of at most limit bytes into v, refusing
// unknown fields; it answers 400 or 413 itself.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any, limit int64) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(strings.ToLower(ct), "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, "the body must be application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, limit))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("trailing data after the JSON object")
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d KiB", limit>>10))
			return false
		}
		writeError(w, http.StatusBadRequest, "malformed JSON body: "+err.Error())
		return false
	}
	return true
}
