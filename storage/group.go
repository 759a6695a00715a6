package storage

import (
	"errors"
	"fmt"
	"sync"

	badger "github.com/dgraph-io/badger/v4"
)

// Group commit (docs/failures.md#overload): with SyncWrites every Badger
// commit waits for an fsync, and a Badger transaction cannot even start
// before the commits in flight are on disk, so a thousand concurrent
// small writers queue behind one another. UpdateShared lets concurrent
// writers share one transaction and one fsync.

// maxSharedUpdates bounds the calls of one shared transaction, well below
// Badger's limits for small writes; a transaction that grows too big
// anyway is split (ErrTxnTooBig).
const maxSharedUpdates = 256

// groupCommit is the queue of UpdateShared calls waiting for a commit.
type groupCommit struct {
	mu      sync.Mutex
	queue   []*sharedUpdate
	leading bool // a caller is committing rounds
}

// sharedUpdate is one UpdateShared call.
type sharedUpdate struct {
	fn   func(*Tx) error
	err  error
	done bool          // committed or failed: err is final
	lead bool          // woken to commit the next rounds
	wake chan struct{} // done or lead; buffered, so the waker never waits
}

func (u *sharedUpdate) finish(err error) {
	u.err, u.done = err, true
	u.wake <- struct{}{}
}

// errMemberFailed aborts a shared transaction whose member failed.
var errMemberFailed = errors.New("storage: a call of a shared transaction failed")

// UpdateShared is Update for many concurrent callers: the calls waiting
// while a commit is in flight run, in arrival order, in one transaction
// committed with one fsync. Each call is atomic on its own: when fn
// fails, none of its writes are committed, its error is returned, and
// the other calls are committed without it. fn sees the writes of the
// calls before it in the same transaction (as if they ran one after
// another), may run more than once (it must start from scratch each
// time, as Update's conflict retries require too) and must not call the
// Store.
func (s *Store) UpdateShared(fn func(*Tx) error) error {
	u := &sharedUpdate{fn: fn, wake: make(chan struct{}, 1)}
	g := &s.group
	g.mu.Lock()
	g.queue = append(g.queue, u)
	if g.leading {
		g.mu.Unlock()
		<-u.wake
		if u.done {
			return u.err
		}
		// u.lead: the previous committer handed the queue over.
	} else {
		g.leading = true
		g.mu.Unlock()
	}
	// This caller commits rounds until its own call is done, then hands
	// the queue to the next waiting caller: nobody commits for others for
	// longer than it waits itself, and the queue never stalls.
	for {
		g.mu.Lock()
		n := min(len(g.queue), maxSharedUpdates)
		batch := g.queue[:n:n]
		g.queue = g.queue[n:]
		g.mu.Unlock()
		left := s.commitShared(batch)
		g.mu.Lock()
		if len(left) > 0 {
			g.queue = append(left[:len(left):len(left)], g.queue...)
		}
		if !u.done {
			g.mu.Unlock()
			continue
		}
		if len(g.queue) == 0 {
			g.queue = nil // drop the backing array of a burst
			g.leading = false
		} else {
			next := g.queue[0]
			next.lead = true
			next.wake <- struct{}{}
		}
		g.mu.Unlock()
		return u.err
	}
}

// commitShared runs batch in one transaction and finishes its calls. A
// failing call is dropped and the rest run again in a fresh transaction
// (nothing was committed). A transaction too big for Badger is cut: what
// is left over is returned, for the next round.
func (s *Store) commitShared(batch []*sharedUpdate) (left []*sharedUpdate) {
	for len(batch) > 0 {
		failed, failErr := -1, error(nil)
		err := s.Update(func(tx *Tx) error {
			for i, u := range batch {
				if err := runMember(u.fn, tx); err != nil {
					failed, failErr = i, err
					return errMemberFailed
				}
			}
			return nil
		})
		switch {
		case err == nil:
			for _, u := range batch {
				u.finish(nil)
			}
			return left
		case errors.Is(err, errMemberFailed) && failed > 0 && errors.Is(failErr, badger.ErrTxnTooBig):
			// Too big with the calls before it: those commit now, the
			// rest in the next round.
			left = append(batch[failed:len(batch):len(batch)], left...)
			batch = batch[:failed:failed]
		case errors.Is(err, errMemberFailed):
			batch[failed].finish(failErr)
			batch = append(batch[:failed:failed], batch[failed+1:]...)
		case errors.Is(err, badger.ErrTxnTooBig) && len(batch) > 1:
			// Badger counts the commit's own entries too: halve.
			h := len(batch) / 2
			left = append(batch[h:len(batch):len(batch)], left...)
			batch = batch[:h:h]
		default:
			// The commit itself failed (storage, space, conflicts past
			// the retries): every call fails, none is applied.
			for _, u := range batch {
				u.finish(err)
			}
			return left
		}
	}
	return left
}

// runMember runs one call of a shared transaction; a panic is that
// call's error, not the others'.
func runMember(fn func(*Tx) error, tx *Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("storage: panic in a shared update: %v", r)
		}
	}()
	return fn(tx)
}
