package storage

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// --- cron jobs (docs/cron.md) ---

// CronJob is one cron job of a session. Times are Unix ms of host time
// (0 = unset).
type CronJob struct {
	JobID     string `json:"jobId"`
	SessionID string `json:"sessionId"`
	Name      string `json:"name,omitempty"`
	Kind      string `json:"kind"`     // at, every, cron
	Schedule  string `json:"schedule"` // normalized
	TZ        string `json:"tz,omitempty"`
	Text      string `json:"text"`
	Target    string `json:"target"` // main, isolated
	Enabled   bool   `json:"enabled"`
	// Source is "config" for a job declared in the host config file
	// (reconciled at startup), "" for one created through the API.
	Source              string `json:"source,omitempty"`
	NextRunAt           int64  `json:"nextRunAt,omitempty"`
	LastRunAt           int64  `json:"lastRunAt,omitempty"`
	LastStatus          string `json:"lastStatus,omitempty"`
	LastError           string `json:"lastError,omitempty"`
	ConsecutiveFailures int    `json:"consecutiveFailures,omitempty"`
	Runs                int64  `json:"runs,omitempty"`
	CreatedAt           int64  `json:"createdAt"`
}

const jobSegment = "job/"

func jobPrefix(sid string) []byte { return []byte(sessionRoot(sid) + jobSegment) }

func jobKey(sid, id string) []byte { return []byte(sessionRoot(sid) + jobSegment + id) }

// isJobKey reports whether k is v1/s/<sid>/job/<id>.
func isJobKey(k []byte) bool {
	rest, ok := strings.CutPrefix(string(k), sessionPrefix)
	if !ok {
		return false
	}
	i := strings.IndexByte(rest, '/')
	return i > 0 && strings.HasPrefix(rest[i+1:], jobSegment)
}

// CronJob returns one job of a session; an id that cannot be a job id is
// simply not found.
func (tx *Tx) CronJob(sessionID, jobID string) (CronJob, bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return CronJob{}, false, err
	}
	if !ValidTaskID(jobID) {
		return CronJob{}, false, nil
	}
	var j CronJob
	ok, err := tx.getJSON(jobKey(sid, jobID), &j)
	return j, ok, err
}

// PutCronJob writes j under j.SessionID / j.JobID.
func (tx *Tx) PutCronJob(j CronJob) error {
	sid, err := sanitizeID(j.SessionID)
	if err != nil {
		return fmt.Errorf("%s: %w", errBadRecordID, err)
	}
	if !ValidTaskID(j.JobID) {
		return fmt.Errorf("storage: invalid job id %q", j.JobID)
	}
	return tx.putJSON(jobKey(sid, j.JobID), j)
}

// DeleteCronJob removes a job and reports whether it existed.
func (tx *Tx) DeleteCronJob(sessionID, jobID string) (bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return false, err
	}
	if !ValidTaskID(jobID) {
		return false, nil
	}
	return tx.del(jobKey(sid, jobID))
}

// CronJobs lists a session's jobs, oldest first.
func (tx *Tx) CronJobs(sessionID string) ([]CronJob, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return nil, err
	}
	var out []CronJob
	err = tx.scan(jobPrefix(sid), func(key, val []byte) error {
		var j CronJob
		if err := json.Unmarshal(val, &j); err != nil {
			return fmt.Errorf("storage: decode %s: %w", key, err)
		}
		out = append(out, j)
		return nil
	})
	sort.SliceStable(out, func(i, k int) bool {
		if out[i].CreatedAt != out[k].CreatedAt {
			return out[i].CreatedAt < out[k].CreatedAt
		}
		return out[i].JobID < out[k].JobID
	})
	return out, err
}

// PutCronJob writes one job in its own synchronous transaction.
func (s *Store) PutCronJob(j CronJob) error {
	return s.Update(func(tx *Tx) error { return tx.PutCronJob(j) })
}

// GetCronJob reads one job.
func (s *Store) GetCronJob(sessionID, jobID string) (j CronJob, ok bool, err error) {
	err = s.View(func(tx *Tx) error {
		j, ok, err = tx.CronJob(sessionID, jobID)
		return err
	})
	return j, ok, err
}

// ListCronJobs reads a session's jobs, oldest first.
func (s *Store) ListCronJobs(sessionID string) (js []CronJob, err error) {
	err = s.View(func(tx *Tx) error {
		js, err = tx.CronJobs(sessionID)
		return err
	})
	return js, err
}

// DeleteCronJob removes one job.
func (s *Store) DeleteCronJob(sessionID, jobID string) (ok bool, err error) {
	err = s.Update(func(tx *Tx) error {
		ok, err = tx.DeleteCronJob(sessionID, jobID)
		return err
	})
	return ok, err
}

// ScanCronJobs calls fn for every job of every session (restore at
// start). fn must not write to the store.
func (s *Store) ScanCronJobs(fn func(CronJob) error) error {
	return s.View(func(tx *Tx) error {
		return tx.scan([]byte(sessionPrefix), func(key, val []byte) error {
			if !isJobKey(key) {
				return nil
			}
			var j CronJob
			if err := json.Unmarshal(val, &j); err != nil {
				return fmt.Errorf("storage: decode %s: %w", key, err)
			}
			return fn(j)
		})
	})
}
