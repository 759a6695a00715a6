package host

import (
	"encoding/json"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/chimehq/chime/host/timers"
)

// The timer API (docs/host-api.md#timers) is what the dashboard and
// `chime timers` drive: GET lists a session's timers under the dashboard's
// access rule (reasons are text: ?include=text), POST acts on one and
// always needs the token.

// TimerView is one timer of GET /api/sessions/{id}/timers; times are Unix
// ms (0 = unset), durations ms.
type TimerView struct {
	TimerID     string `json:"timerId"`
	Status      string `json:"status"`
	Background  bool   `json:"background"`
	TotalMs     int64  `json:"totalMs"`
	RemainingMs int64  `json:"remainingMs"`
	ElapsedMs   int64  `json:"elapsedMs"`
	CreatedAt   int64  `json:"createdAt"`
	EndAt       int64  `json:"endAt"`
	PauseUntil  int64  `json:"pauseUntil"`
	FinishedAt  int64  `json:"finishedAt"`
	// History is every transition; its reasons only with ?include=text.
	History []TimerTransitionView `json:"history"`
	Reason  string                `json:"reason,omitempty"` // only with ?include=text
}

// TimerTransitionView is one recorded transition.
type TimerTransitionView struct {
	At     int64  `json:"at"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// TimerAction is the optional body of POST …/timers/{tid}/{action}.
type TimerAction struct {
	Reason string `json:"reason"`
	// PauseSeconds is how long pause lasts (required for pause).
	PauseSeconds float64 `json:"pauseSeconds"`
}

func timerView(v timers.View, includeText bool) TimerView {
	out := TimerView{
		TimerID: v.TimerID, Status: v.Status, Background: v.Background,
		TotalMs: v.Total.Milliseconds(), RemainingMs: v.Remaining.Milliseconds(), ElapsedMs: v.Elapsed.Milliseconds(),
		CreatedAt: unixMs(v.CreatedAt), EndAt: unixMs(v.EndAt), PauseUntil: unixMs(v.PauseUntil), FinishedAt: unixMs(v.FinishedAt),
		History: make([]TimerTransitionView, 0, len(v.History)),
	}
	for _, h := range v.History {
		tv := TimerTransitionView{At: h.At, Status: h.Status}
		if includeText {
			tv.Reason = h.Reason
		}
		out.History = append(out.History, tv)
	}
	if includeText {
		out.Reason = v.Reason
	}
	return out
}

func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func (s *Service) handleTimers(w http.ResponseWriter, r *http.Request, includeText bool) {
	vs, err := s.timers.List(r.PathValue("id"))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
		return
	}
	out := make([]TimerView, 0, len(vs))
	for _, v := range vs {
		out = append(out, timerView(v, includeText))
	}
	writeJSON(w, http.StatusOK, out)
}

// maxActionBody bounds the action body: a reason and a number.
const maxActionBody = 8 << 10

func (s *Service) handleTimerAction(w http.ResponseWriter, r *http.Request) {
	sid, tid, action := r.PathValue("id"), r.PathValue("tid"), r.PathValue("action")
	var body TimerAction
	data, err := io.ReadAll(io.LimitReader(r.Body, maxActionBody+1))
	switch {
	case err != nil:
		writeError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return
	case len(data) > maxActionBody:
		writeError(w, http.StatusRequestEntityTooLarge, "body larger than 8 KiB")
		return
	case len(strings.TrimSpace(string(data))) > 0:
		dec := json.NewDecoder(strings.NewReader(string(data)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, `body must be {"reason":"…","pauseSeconds":N}: `+err.Error())
			return
		}
	}
	reason := strings.TrimSpace(body.Reason)
	if reason == "" {
		reason = action + " from the API"
	}
	var v timers.View
	switch action {
	case "stop":
		v, err = s.timers.Stop(sid, tid, reason)
	case "cancel":
		v, err = s.timers.Cancel(sid, tid, reason)
	case "resume":
		v, err = s.timers.Resume(sid, tid, reason)
	case "pause":
		p := body.PauseSeconds
		if math.IsNaN(p) || p <= 0 || p > timers.DefaultMaxDuration.Seconds() {
			writeError(w, http.StatusBadRequest, "pause needs pauseSeconds > 0 (at most a week)")
			return
		}
		v, err = s.timers.Pause(sid, tid, time.Duration(p*float64(time.Second)), reason)
	default:
		writeError(w, http.StatusNotFound, "action must be stop, cancel, pause or resume")
		return
	}
	switch {
	case errors.Is(err, timers.ErrUnknown), errors.Is(err, timers.ErrNoSession):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, timers.ErrState):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
	default:
		s.log.Info("timer changed through the API", "session", sid, "timer", tid, "action", action)
		writeJSON(w, http.StatusOK, timerView(v, true))
	}
}
