// Package touch coalesces session lastSeenAt updates (docs/protocols.md#session-identity). Every
// prepare touches its session; writing that synchronously would cost one
// fsync per request, so touches are kept in memory and written in one
// transaction per flush. Only lastSeenAt (and a first-seen record) can be
// lost in a crash; tasks, stopMessage and routes are still written through.
package touch

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/chimehq/chime/storage"
)

// chunk bounds one flush transaction well below Badger's batch limit.
const chunk = 500

// maxPending triggers an early flush, bounding memory between ticks.
const maxPending = 10000

// Batcher holds pending touches. It is safe for concurrent use.
type Batcher struct {
	store *storage.Store
	log   *slog.Logger

	mu      sync.Mutex
	pending map[string]int64 // original session id → last seen, Unix ms
	full    chan struct{}    // signalled when pending reaches maxPending

	flushMu sync.Mutex // one flush at a time
}

// New returns an empty Batcher writing to store.
func New(store *storage.Store, log *slog.Logger) *Batcher {
	return &Batcher{store: store, log: log, pending: map[string]int64{}, full: make(chan struct{}, 1)}
}

// Touch records that session id was seen at nowMs.
func (b *Batcher) Touch(id string, nowMs int64) {
	if id == "" {
		return
	}
	b.mu.Lock()
	if nowMs > b.pending[id] {
		b.pending[id] = nowMs
	}
	n := len(b.pending)
	b.mu.Unlock()
	if n >= maxPending {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

// Pending returns a copy of the touches not yet written.
func (b *Batcher) Pending() map[string]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.pending)
}

// Get returns the pending touch of one session.
func (b *Batcher) Get(id string) (int64, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ms, ok := b.pending[id]
	return ms, ok
}

// Flush writes every pending touch: a missing session record is created,
// an existing one gets lastSeenAt = max(stored, touched). Touches whose
// write failed stay pending for the next flush.
func (b *Batcher) Flush() error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.mu.Lock()
	batch := b.pending
	b.pending = map[string]int64{}
	b.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	ids := make([]string, 0, len(batch))
	for id := range batch {
		ids = append(ids, id)
	}
	var firstErr error
	for start := 0; start < len(ids); start += chunk {
		part := ids[start:min(start+chunk, len(ids))]
		err := b.store.Update(func(tx *storage.Tx) error {
			for _, id := range part {
				ms := batch[id]
				s, ok, err := tx.Session(id)
				if err != nil {
					return err
				}
				if !ok {
					s = storage.Session{ID: id, CreatedAt: ms}
				}
				if ms <= s.LastSeenAt {
					continue
				}
				s.LastSeenAt = ms
				if err := tx.PutSession(s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			b.requeue(part, batch)
		}
	}
	return firstErr
}

// requeue puts failed touches back, unless the pending set is already full
// (a store that keeps failing must not grow memory without bound).
func (b *Batcher) requeue(ids []string, batch map[string]int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range ids {
		if len(b.pending) >= maxPending {
			return
		}
		if batch[id] > b.pending[id] {
			b.pending[id] = batch[id]
		}
	}
}

// Run flushes on every tick and when the pending set is full, and once more
// when ctx ends.
func (b *Batcher) Run(ctx context.Context, tick <-chan time.Time) {
	flush := func() {
		if err := b.Flush(); err != nil {
			b.log.Warn("session touch flush failed; will retry", "err", err)
		}
	}
	for {
		select {
		case <-ctx.Done():
			flush()
			return
		case <-tick:
			flush()
		case <-b.full:
			flush()
		}
	}
}
