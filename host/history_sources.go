package host

import (
	"github.com/chimehq/chime/host/ui"
)

// runHistory is the history view's source of wake runs
// (docs/dashboard.md#history): one entry per run, its why as the reason.
func (s *Service) runHistory(sid string, includeText bool) ([]ui.HistoryEntry, error) {
	runs, err := s.runsOf(sid)
	if err != nil {
		return nil, err
	}
	out := make([]ui.HistoryEntry, 0, len(runs))
	for _, r := range runs {
		e := ui.HistoryEntry{At: r.StartedAt, Kind: "run", ID: r.ID, Status: r.Status + " (" + r.Reason + ")"}
		if includeText {
			e.Reason = r.Why
			if r.Error != "" {
				e.Reason = r.Error
			}
		}
		out = append(out, e)
	}
	return out, nil
}

// deliveryHistory is the source of deliveries: their enqueueing, and
// their delivery or last state.
func (s *Service) deliveryHistory(sid string, includeText bool) ([]ui.HistoryEntry, error) {
	ds, err := s.delivery.List(sid, "")
	if err != nil {
		return nil, err
	}
	var out []ui.HistoryEntry
	for _, d := range ds {
		out = append(out, ui.HistoryEntry{At: d.EnqueuedAt, Kind: "delivery", ID: d.ID, Status: "queued (" + d.Connector + ")"})
		if d.State != "queued" {
			at := d.UpdatedAt
			if d.DeliveredAt != 0 {
				at = d.DeliveredAt
			}
			e := ui.HistoryEntry{At: at, Kind: "delivery", ID: d.ID, Status: d.State + " (" + d.Connector + ")"}
			if includeText {
				e.Reason = d.LastError
			}
			out = append(out, e)
		}
	}
	return out, nil
}
