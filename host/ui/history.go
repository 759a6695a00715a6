package ui

import (
	"cmp"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"

	"github.com/chimehq/chime/host/timers"
)

// The history view (GET /api/sessions/{id}/history) is every recorded
// transition of a session, newest first, from one or more sources: the
// timers' own transition logs today (kept with each timer, written through
// on every transition, for the timer retention after it ends), the
// session's wake runs and its deliveries (sources the host adds).

// History limits for ?limit=N.
const (
	DefaultHistoryLimit = 500
	MaxHistoryLimit     = 5000
)

// HistoryEntry is one transition. At is Unix ms; Reason only with the
// token and ?include=text.
type HistoryEntry struct {
	At     int64  `json:"at"`
	Kind   string `json:"kind"` // "timer", "run" or "delivery"
	ID     string `json:"id"`
	Status string `json:"status"`
	Reason string `json:"reason,omitempty"`
}

// HistorySource lists one kind of a session's transitions.
type HistorySource func(sessionID string, includeText bool) ([]HistoryEntry, error)

// TimerHistory is the source of timer transitions; list is
// timers.Manager.List.
func TimerHistory(list func(sessionID string) ([]timers.View, error)) HistorySource {
	return func(sessionID string, includeText bool) ([]HistoryEntry, error) {
		vs, err := list(sessionID)
		if err != nil {
			return nil, err
		}
		var out []HistoryEntry
		for _, v := range vs {
			// Newest first, so that transitions of one millisecond keep
			// their order through the stable sort.
			for i := len(v.History) - 1; i >= 0; i-- {
				h := v.History[i]
				e := HistoryEntry{At: h.At, Kind: "timer", ID: v.TimerID, Status: h.Status}
				if includeText {
					e.Reason = h.Reason
				}
				out = append(out, e)
			}
		}
		return out, nil
	}
}

// HistoryHandler answers GET …/{id}/history with the merged sources as
// {"history":[…]}, newest first; the caller applies the access rule and
// says whether text may be shown.
func HistoryHandler(sources ...HistorySource) func(w http.ResponseWriter, r *http.Request, includeText bool) {
	return func(w http.ResponseWriter, r *http.Request, includeText bool) {
		limit := DefaultHistoryLimit
		if v := r.URL.Query().Get("limit"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > MaxHistoryLimit {
				writeError(w, http.StatusBadRequest, "limit must be 1.."+strconv.Itoa(MaxHistoryLimit))
				return
			}
			limit = n
		}
		sid := r.PathValue("id")
		all := []HistoryEntry{}
		for _, src := range sources {
			es, err := src(sid, includeText)
			if err != nil {
				writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
				return
			}
			all = append(all, es...)
		}
		slices.SortStableFunc(all, func(a, b HistoryEntry) int {
			return cmp.Or(cmp.Compare(b.At, a.At), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.ID, b.ID))
		})
		writeJSON(w, http.StatusOK, struct {
			History []HistoryEntry `json:"history"`
		}{all[:min(limit, len(all))]})
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}
