package timers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// Result is every timer tool's answer (docs/timers.md#results). Errors are
// ok:false with the reason; they never fail the call.
type Result struct {
	OK         bool    `json:"ok"`
	TimerID    string  `json:"timer_id"`
	Status     string  `json:"status,omitempty"`
	TotalS     float64 `json:"total_s"`
	RemainingS float64 `json:"remaining_s"`
	ElapsedS   float64 `json:"elapsed_s"`
	TimedOut   bool    `json:"timed_out"`
	// Reason is the timer's reason, or why the call failed.
	Reason string `json:"reason"`
	// WaitedS is how long a timer call was held.
	WaitedS *float64 `json:"waited_s,omitempty"`
	// Note says what the model should know: a clamped wait, a notice to come.
	Note string `json:"note,omitempty"`
}

// listResult is read_timer "".
type listResult struct {
	OK     bool     `json:"ok"`
	Timers []Result `json:"timers"`
}

// maxReasonLen bounds a timer's reason.
const maxReasonLen = 500

// args holds every timer tool's arguments; each tool reads its own.
type args struct {
	TotalDuration   *float64 `json:"total_duration"`
	TimeoutDuration *float64 `json:"timeout_duration"`
	PauseDuration   *float64 `json:"pause_duration"`
	TimerID         *string  `json:"timer_id"`
	Reason          *string  `json:"reason"`
}

// Execute runs one timer tool call for the requesting session and returns
// its JSON result (host.ToolExecutor). A timer call blocks for its wait;
// ctx ending (the client left) ends the wait and sends the timer to the
// background.
func (m *Manager) Execute(ctx context.Context, sessionID, name string, raw json.RawMessage) json.RawMessage {
	if !slices.Contains(hostapi.TimerToolNames(), name) {
		return fail("", fmt.Sprintf("unknown timer tool %q", name))
	}
	var a args
	if err := decode(raw, &a); err != nil {
		return fail("", err.Error())
	}
	id := strings.TrimSpace(deref(a.TimerID))
	reason := strings.TrimSpace(deref(a.Reason))
	if len(reason) > maxReasonLen {
		return fail(id, fmt.Sprintf("reason is %d bytes; keep it under %d", len(reason), maxReasonLen))
	}
	if sessionID == "" {
		return fail(id, ErrNoSession.Error())
	}
	switch name {
	case hostapi.TimerToolName:
		return m.timerCall(ctx, sessionID, id, reason, a)
	case hostapi.ReadTimerToolName:
		if id == "" {
			vs, err := m.List(sessionID)
			if err != nil {
				return fail("", "storage failure: "+err.Error())
			}
			out := listResult{OK: true, Timers: make([]Result, 0, len(vs))}
			for _, v := range vs {
				out.Timers = append(out.Timers, result(v))
			}
			return marshal(out)
		}
		return answer(id)(m.Get(sessionID, id))
	}
	if id == "" {
		return fail("", name+" needs timer_id; call read_timer with timer_id \"\" to list the session's timers")
	}
	switch name {
	case hostapi.StopTimerToolName:
		return answer(id)(m.Stop(sessionID, id, reason))
	case hostapi.CancelTimerToolName:
		v, err := m.Cancel(sessionID, id, reason)
		if err != nil {
			return fail(id, err.Error())
		}
		r := result(v)
		r.Note = "the timer keeps running in the background; you will get a [timer completed: …] message when it ends"
		return marshal(r)
	case hostapi.PauseTimerToolName:
		d, err := duration("pause_duration", a.PauseDuration, m.cfg.MaxDuration, false)
		if err != nil {
			return fail(id, err.Error())
		}
		return answer(id)(m.Pause(sessionID, id, d, reason))
	case hostapi.ResumeTimerToolName:
		return answer(id)(m.Resume(sessionID, id, reason))
	}
	panic("timers: tool " + name + " listed but not served")
}

// timerCall creates a timer (id "") or continues one, and waits on it.
func (m *Manager) timerCall(ctx context.Context, sessionID, id, reason string, a args) json.RawMessage {
	timeout, err := duration("timeout_duration", a.TimeoutDuration, m.cfg.MaxDuration, true)
	if err != nil {
		return fail(id, err.Error())
	}
	if id == "" {
		total, err := duration("total_duration", a.TotalDuration, m.cfg.MaxDuration, false)
		if err != nil {
			return fail("", err.Error())
		}
		rec, err := m.Create(sessionID, reason, total)
		if err != nil {
			return fail("", err.Error())
		}
		id = rec.TimerID
	}
	v, w, err := m.Wait(ctx, sessionID, id, timeout)
	if err != nil {
		return fail(id, err.Error())
	}
	r := result(v)
	r.TimedOut = w.TimedOut
	waited := seconds(w.For)
	r.WaitedS = &waited
	switch {
	case w.Clamped:
		r.Note = fmt.Sprintf("the wait was limited to timerMaxWait (%s); call timer again with this timer_id to keep waiting", m.cfg.MaxWait)
	case v.Status == Background:
		r.Note = "the wait was cancelled; the timer keeps running in the background"
	}
	return marshal(r)
}

// decode reads the arguments strictly: a JSON object, known fields only.
func decode(raw json.RawMessage, a *args) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		raw = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(a); err != nil {
		return fmt.Errorf("arguments are not the tool's JSON object: %v", err)
	}
	if dec.More() {
		return errors.New("arguments: trailing data after the JSON object")
	}
	return nil
}

// duration reads a duration in seconds: finite, not negative, at most max;
// zero only where zeroOK (a timeout of 0 waits as long as allowed).
func duration(field string, v *float64, maxD time.Duration, zeroOK bool) (time.Duration, error) {
	if v == nil {
		return 0, fmt.Errorf("bad duration: %s is required (seconds, a number)", field)
	}
	s := *v
	switch {
	case math.IsNaN(s) || math.IsInf(s, 0) || s < 0:
		return 0, fmt.Errorf("bad duration: %s must be a number of seconds ≥ 0, got %v", field, s)
	case s == 0 && !zeroOK:
		return 0, fmt.Errorf("bad duration: %s must be more than 0 seconds", field)
	case s > maxD.Seconds():
		return 0, fmt.Errorf("bad duration: %s is %v s; at most %v s", field, s, maxD.Seconds())
	}
	return time.Duration(s * float64(time.Second)), nil
}

func result(v View) Result {
	return Result{
		OK: true, TimerID: v.TimerID, Status: v.Status, Reason: v.Reason,
		TotalS: seconds(v.Total), RemainingS: seconds(v.Remaining), ElapsedS: seconds(v.Elapsed),
	}
}

// answer renders what an operation on timer id returned.
func answer(id string) func(View, error) json.RawMessage {
	return func(v View, err error) json.RawMessage {
		if err != nil {
			return fail(id, err.Error())
		}
		return marshal(result(v))
	}
}

func fail(id, reason string) json.RawMessage {
	return marshal(Result{OK: false, TimerID: id, Reason: reason})
}

// seconds rounds to a tenth: enough for a model, stable in tests.
func seconds(d time.Duration) float64 { return math.Round(d.Seconds()*10) / 10 }

func deref[T any](p *T) T {
	if p == nil {
		var z T
		return z
	}
	return *p
}

func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // plain structs of this package
	}
	return b
}
