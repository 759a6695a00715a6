package host

import (
	"context"
	"time"

	"github.com/chimehq/chime/storage"
)

// Run records are history, not state: they are batched and written in
// one transaction per flush (every TouchSync, at most a few seconds), so a
// busy host does not spend a synchronous write on each run. A crash loses
// at most the records of the last flush; what a run did (its reminders
// committed, its events acknowledged, its delivery) is written through.

// maxPendingRuns triggers an early flush.
const maxPendingRuns = 5000

// recordRun queues a run for the session's bounded history.
func (s *Service) recordRun(sid string, run storage.WakeRun) {
	if run.ID == "" {
		run.ID, _ = s.nextRunID(sid)
	}
	s.wake.mu.Lock()
	s.wake.pendingRuns[sid] = append(s.wake.pendingRuns[sid], run)
	s.wake.nPending++
	full := s.wake.nPending >= maxPendingRuns
	s.wake.mu.Unlock()
	if full {
		select {
		case s.wake.flushNow <- struct{}{}:
		default:
		}
	}
	s.changed(sid)
}

// flushRuns writes the queued run records.
func (s *Service) flushRuns() error {
	s.wake.flushMu.Lock()
	defer s.wake.flushMu.Unlock()
	s.wake.mu.Lock()
	batch := s.wake.pendingRuns
	s.wake.pendingRuns, s.wake.nPending = map[string][]storage.WakeRun{}, 0
	s.wake.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	sids := make([]string, 0, len(batch))
	for sid := range batch {
		sids = append(sids, sid)
	}
	var firstErr error
	for start := 0; start < len(sids); start += 500 {
		part := sids[start:min(start+500, len(sids))]
		err := s.store.Update(func(tx *storage.Tx) error {
			for _, sid := range part {
				r, err := tx.WakeRuns(sid)
				if err != nil {
					return err
				}
				r.Runs = keepLastRuns(append(r.Runs, batch[sid]...))
				if err := tx.PutWakeRuns(r); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil && firstErr == nil {
			firstErr = err
		}
	}
	return firstErr
}

func keepLastRuns(runs []storage.WakeRun) []storage.WakeRun {
	if n := len(runs) - maxRunsKept; n > 0 {
		return append([]storage.WakeRun(nil), runs[n:]...)
	}
	return runs
}

// runsOf is the session's run history: what is stored and what waits for
// the next flush, oldest first.
func (s *Service) runsOf(sid string) ([]storage.WakeRun, error) {
	var stored storage.WakeRuns
	err := s.store.View(func(tx *storage.Tx) error {
		var err error
		stored, err = tx.WakeRuns(sid)
		return err
	})
	s.wake.mu.Lock()
	runs := append(stored.Runs, s.wake.pendingRuns[sid]...)
	s.wake.mu.Unlock()
	return keepLastRuns(runs), err
}

// runRecorder flushes run records on every tick and when many wait.
func (s *Service) runRecorder(ctx context.Context, tick <-chan time.Time) {
	flush := func() {
		if err := s.flushRuns(); err != nil {
			s.log.Warn("writing wake run records failed", "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case <-tick:
			flush()
		case <-s.wake.flushNow:
			flush()
		}
	}
}
