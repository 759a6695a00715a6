package storage

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/dustin/go-humanize"
)

// DefaultMinFree is the free space the store keeps in its data directory
// (docs/failures.md "storage write failure"). Badger writes its write-ahead log,
// its tables and its value log through mmap'd files that it preallocates
// sparsely, so a write onto a full file system is a SIGBUS that kills the
// process, not an error. Below this headroom writes are refused before
// Badger sees them: a memtable flush (8 MiB table + a new 16 MiB log file)
// and an L0→L1 compaction (up to 2 × 8 MiB of new tables before the old
// ones go) fit in it.
const DefaultMinFree = 48 << 20

// ErrNoSpace is returned by a write refused because the data directory has
// less free space than the store's headroom. Reads keep working.
var ErrNoSpace = errors.New("storage: not enough free disk space")

// ErrReadOnly is returned by a write to a store that started read-only
// because its disk was full.
var ErrReadOnly = errors.New("storage: store is read-only")

// FreeSpaceFunc reports the bytes available to this process on the file
// system holding dir (statfs f_bavail × f_bsize).
type FreeSpaceFunc func(dir string) (uint64, error)

// Space is the data directory's free-space state, for /healthz and /metrics.
type Space struct {
	Free     uint64 // bytes available at the last check
	MinFree  uint64 // the headroom writes need
	Low      bool   // Free < MinFree: writes are refused
	ReadOnly bool   // started on a full disk: writes refused until restart
	Err      string // the last statfs error, if any
}

// space watches the data directory's free space.
type space struct {
	dir      string
	minFree  uint64
	statfs   FreeSpaceFunc
	readOnly bool // fixed at open
	free     atomic.Uint64
	low      atomic.Bool
	lastErr  atomic.Pointer[string]
}

// check refreshes the free-space state and returns ErrNoSpace (wrapped
// with the numbers and the next step) when a write must be refused. A
// statfs error lets the write through: the check guards Badger, it does
// not replace it.
func (sp *space) check() error {
	if sp == nil || sp.statfs == nil {
		return nil
	}
	if sp.readOnly {
		return fmt.Errorf("%w: it started with %s free in %s, below the %s headroom; free disk space, then restart the host",
			ErrReadOnly, humanize.IBytes(sp.free.Load()), sp.dir, humanize.IBytes(sp.minFree))
	}
	free, err := sp.statfs(sp.dir)
	if err != nil {
		msg := err.Error()
		sp.lastErr.Store(&msg)
		return nil
	}
	sp.lastErr.Store(nil)
	sp.free.Store(free)
	low := free < sp.minFree
	sp.low.Store(low)
	if low {
		return fmt.Errorf("%w: %s free in %s, below the %s headroom the store keeps; write refused (writes resume once space is freed)",
			ErrNoSpace, humanize.IBytes(free), sp.dir, humanize.IBytes(sp.minFree))
	}
	return nil
}

func (sp *space) state() Space {
	if sp == nil {
		return Space{}
	}
	st := Space{Free: sp.free.Load(), MinFree: sp.minFree, Low: sp.low.Load() || sp.readOnly, ReadOnly: sp.readOnly}
	if e := sp.lastErr.Load(); e != nil {
		st.Err = *e
	}
	return st
}

// Space reports the data directory's free-space state as of the last write
// or the last call to it; it refreshes the figure itself.
func (s *Store) Space() Space {
	if s.space == nil {
		return Space{}
	}
	if !s.space.readOnly {
		_ = s.space.check()
	}
	return s.space.state()
}
