package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// Options tunes Open. The zero value is a durable on-disk store.
type Options struct {
	// Logger receives Badger's warnings and errors; nil means slog.Default().
	Logger *slog.Logger
	// InMemory keeps everything in RAM (dir must be ""). Not durable: tests only.
	InMemory bool
	// MinFree is the free space writes need in the data directory; 0 means
	// DefaultMinFree (docs/failures.md). Below it writes fail with ErrNoSpace.
	MinFree uint64
	// FreeSpace reports free bytes; nil means statfs (tests inject one).
	FreeSpace FreeSpaceFunc
}

// Store is the host's database. It is safe for concurrent use.
type Store struct {
	db    *badger.DB
	dir   string
	log   *slog.Logger
	space *space // nil in memory

	dirty    atomic.Bool // written since the last generation mark
	markMu   sync.Mutex
	markStop chan struct{}
	markDone chan struct{}
	close    sync.Once
	group    groupCommit // UpdateShared (group.go)
	// prepareChanged runs after a commit that changed prepare state (prepare_gen.go).
	prepareChanged func()
}

// ErrClosed is returned by every operation on a closed store.
var ErrClosed = errors.New("storage: store is closed")

// Open opens (creating if needed) the database in dir, sized for a sidecar:
// small memtables and caches, two compactors, synchronous writes (docs/clock-tool.md).
//
// docs/failures.md: every table is checksummed when opened and the whole store is
// read once; a store that cannot be read fully, or holds less than it last
// knew (GenerationFile), is refused with ErrDamaged. A data directory with
// less free space than Options.MinFree opens read-only: reads work, writes
// fail with ErrReadOnly until a restart with space.
func Open(dir string, opts Options) (*Store, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	bo := badger.DefaultOptions(dir)
	if opts.InMemory {
		if dir != "" {
			return nil, fmt.Errorf("storage: in-memory store needs an empty dir, got %q", dir)
		}
		bo = badger.DefaultOptions("").WithInMemory(true)
	} else {
		if dir == "" {
			return nil, errors.New("storage: empty data directory")
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("storage: create data dir %q: %w", dir, err)
		}
	}
	sp := &space{dir: dir, minFree: opts.MinFree, statfs: opts.FreeSpace}
	if sp.minFree == 0 {
		sp.minFree = DefaultMinFree
	}
	if sp.statfs == nil {
		sp.statfs = freeSpace
	}
	if !opts.InMemory {
		if free, err := sp.statfs(dir); err == nil {
			sp.free.Store(free)
			if free < sp.minFree {
				sp.readOnly = true
				// No compaction either: it writes new tables through mmap.
				bo = bo.WithNumCompactors(0).WithCompactL0OnClose(false)
				logger.Warn("storage: the data directory is almost full; starting read-only (free disk space, then restart)",
					"dir", dir, "free", free, "minFree", sp.minFree)
			}
		}
	}
	numCompactors := 2
	if sp.readOnly {
		numCompactors = 0
	}
	bo = bo.
		WithChecksumVerificationMode(options.OnBlockRead). // tables: checkFiles

		WithVerifyValueChecksum(true).
		WithSyncWrites(true).
		WithMemTableSize(8 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8).
		WithBaseTableSize(2 << 20).
		WithBaseLevelSize(8 << 20).
		WithValueThreshold(64 << 10).
		WithValueLogFileSize(16 << 20).
		WithBlockCacheSize(8 << 20).
		WithIndexCacheSize(4 << 20).
		WithNumCompactors(numCompactors).
		WithNumGoroutines(2).
		WithMetricsEnabled(false).
		WithLogger(slogBridge{logger}).
		WithLoggingLevel(badger.WARNING)
	if !opts.InMemory {
		if err := removeEmptyLogFiles(dir, logger); err != nil {
			return nil, err
		}
		if err := checkFiles(dir, bo); err != nil {
			return nil, err
		}
	}
	db, err := openRecover(bo)
	if err != nil {
		if opts.InMemory {
			return nil, fmt.Errorf("storage: open in memory: %w", err)
		}
		return nil, damaged(dir, fmt.Sprintf("Badger cannot open it (%v)", err))
	}
	s := &Store{db: db, dir: dir, log: logger}
	if opts.InMemory {
		return s, nil
	}
	s.space = sp
	if _, err := s.verify(dir); err != nil {
		_ = db.Close()
		return nil, err
	}
	s.markStop, s.markDone = make(chan struct{}), make(chan struct{})
	go s.markLoop()
	return s, nil
}

// removeEmptyLogFiles deletes memtable and value log files of 0 bytes.
// Badger creates such a file and then sizes it (a memtable's write-ahead
// log; a value log, which also gets a 20-byte header at once); a process
// killed between the two leaves an empty file, which holds nothing, yet
// Badger refuses to open a directory with one ("while opening fid: N err:
// Create a new file" for a .mem, dgraph-io/badger#2207, open; "Open
// existing file: ...vlog err: Create a new file" for a .vlog). Nothing
// refers to an empty file's offsets, so without it the store opens as it
// was.
func removeEmptyLogFiles(dir string, logger *slog.Logger) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("storage: read data dir %q: %w", dir, err)
	}
	for _, e := range ents {
		kind := ""
		switch {
		case strings.HasSuffix(e.Name(), ".mem"):
			kind = "memtable"
		case strings.HasSuffix(e.Name(), ".vlog"):
			kind = "value log"
		}
		if kind == "" || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("storage: remove the empty %s file %s left by a crash: %w", kind, e.Name(), err)
		}
		logger.Warn("storage: removed an empty file left by a crash", "dir", dir, "file", e.Name(), "kind", kind)
	}
	return nil
}

// openRecover turns a panic inside Badger's open path into an error, and
// a fault on an mmap'd file that cannot be backed (SIGBUS on a full disk)
// into a panic first.
func openRecover(bo badger.Options) (db *badger.DB, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("badger panicked: %v", r)
		}
	}()
	return badger.Open(bo)
}

// Close records the generation, then flushes and closes the database.
// Calling it twice is harmless.
func (s *Store) Close() error {
	var markErr error
	s.close.Do(func() {
		if s.markStop != nil {
			close(s.markStop)
			<-s.markDone
			if err := s.mark(); err != nil && !errors.Is(err, ErrNoSpace) && !errors.Is(err, ErrReadOnly) {
				markErr = err
			}
		}
	})
	if err := s.db.Close(); err != nil {
		return fmt.Errorf("storage: close: %w", err)
	}
	if markErr != nil {
		return fmt.Errorf("storage: close: record generation: %w", markErr)
	}
	return nil
}

// Update runs fn in a read-write transaction and commits it synchronously.
// Conflicts with a concurrent writer are retried a few times.
// On a data directory short of space it fails with ErrNoSpace (or
// ErrReadOnly) before Badger sees the write (docs/failures.md).
func (s *Store) Update(fn func(*Tx) error) error { return s.update(fn, true) }

// update is Update; dirty=false for the generation mark's own write.
func (s *Store) update(fn func(*Tx) error, dirty bool) error {
	if err := s.space.check(); err != nil {
		return err
	}
	var err error
	var changed bool
	for attempt := 0; attempt < 5; attempt++ {
		changed, err = s.runWrite(fn)
		if !errors.Is(err, badger.ErrConflict) {
			break
		}
	}
	if err == nil && dirty {
		s.dirty.Store(true)
	}
	if err == nil && changed && s.prepareChanged != nil {
		s.prepareChanged()
	}
	return err
}

// View runs fn in a read-only snapshot.
func (s *Store) View(fn func(*Tx) error) error {
	_, err := s.run(false, fn)
	return err
}

// runWrite runs fn in a read-write transaction and reports whether it
// wrote prepare state (prepare_gen.go).
func (s *Store) runWrite(fn func(*Tx) error) (bool, error) { return s.run(true, fn) }

func (s *Store) run(write bool, fn func(*Tx) error) (changed bool, err error) {
	defer func() {
		// A write failure must reach the caller as an error (docs/failures.md).
		if r := recover(); r != nil {
			err = fmt.Errorf("storage: badger panicked: %v", r)
		}
	}()
	var tx *Tx
	body := func(txn *badger.Txn) error {
		tx = &Tx{txn: txn}
		return fn(tx)
	}
	if write {
		err = s.db.Update(body)
		changed = tx != nil && tx.prepareChanged
	} else {
		err = s.db.View(body)
	}
	if errors.Is(err, badger.ErrDBClosed) {
		return changed, ErrClosed
	}
	return changed, err
}

// Tx is one transaction. It must not be used after the callback returns.
type Tx struct {
	txn            *badger.Txn
	prepareChanged bool // wrote state a prepare answer depends on (prepare_gen.go)
}

func (tx *Tx) getJSON(key []byte, v any) (bool, error) {
	item, err := tx.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("storage: get %s: %w", key, err)
	}
	if err := item.Value(func(b []byte) error { return json.Unmarshal(b, v) }); err != nil {
		return false, fmt.Errorf("storage: decode %s: %w", key, err)
	}
	return true, nil
}

func (tx *Tx) putJSON(key []byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("storage: encode %s: %w", key, err)
	}
	if err := tx.txn.Set(key, b); err != nil {
		return fmt.Errorf("storage: put %s: %w", key, err)
	}
	tx.noteWrite(key)
	return nil
}

func (tx *Tx) del(key []byte) (bool, error) {
	_, err := tx.txn.Get(key)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("storage: get %s: %w", key, err)
	}
	if err := tx.txn.Delete(key); err != nil {
		return false, fmt.Errorf("storage: delete %s: %w", key, err)
	}
	tx.noteWrite(key)
	return true, nil
}

// scan calls fn for every key with prefix, in key order, with a raw value
// valid only during the call.
func (tx *Tx) scan(prefix []byte, fn func(key, val []byte) error) error {
	it := tx.txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: 32})
	defer it.Close()
	for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
		item := it.Item()
		key := item.Key()
		if err := item.Value(func(v []byte) error { return fn(key, v) }); err != nil {
			return err
		}
	}
	return nil
}

// --- sessions ---

// Session returns the session record of id.
func (tx *Tx) Session(id string) (Session, bool, error) {
	sid, err := sanitizeID(id)
	if err != nil {
		return Session{}, false, err
	}
	var s Session
	ok, err := tx.getJSON(metaKey(sid), &s)
	return s, ok, err
}

// PutSession writes a session record; s.ID must be set.
func (tx *Tx) PutSession(s Session) error {
	sid, err := sanitizeID(s.ID)
	if err != nil {
		return err
	}
	// Only the route of a session record is prepare state (prepare_gen.go).
	var old Session
	if _, err := tx.getJSON(metaKey(sid), &old); err != nil || old.Route != s.Route {
		tx.prepareChanged = true
	}
	return tx.putJSON(metaKey(sid), s)
}

// --- clock tasks ---

// Task returns one task of a session.
func (tx *Tx) Task(sessionID, taskID string) (ClockTask, bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return ClockTask{}, false, err
	}
	if !ValidTaskID(taskID) {
		return ClockTask{}, false, nil
	}
	var t ClockTask
	ok, err := tx.getJSON(taskKey(sid, taskID), &t)
	return t, ok, err
}

// PutTask writes t under t.SessionID / t.TaskID.
func (tx *Tx) PutTask(t ClockTask) error {
	sid, err := sanitizeID(t.SessionID)
	if err != nil {
		return fmt.Errorf("%s: %w", errBadRecordID, err)
	}
	if !ValidTaskID(t.TaskID) {
		return fmt.Errorf("%s %q", errBadTaskID, t.TaskID)
	}
	return tx.putJSON(taskKey(sid, t.TaskID), t)
}

// DeleteTask removes a task and reports whether it existed.
func (tx *Tx) DeleteTask(sessionID, taskID string) (bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return false, err
	}
	if !ValidTaskID(taskID) {
		return false, nil
	}
	return tx.del(taskKey(sid, taskID))
}

// Tasks lists a session's tasks ordered by dueAt, then task id.
func (tx *Tx) Tasks(sessionID string) ([]ClockTask, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return nil, err
	}
	var out []ClockTask
	err = tx.scan(taskPrefix(sid), func(key, val []byte) error {
		var t ClockTask
		if err := json.Unmarshal(val, &t); err != nil {
			return fmt.Errorf("storage: decode %s: %w", key, err)
		}
		out = append(out, t)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sortTasks(out)
	return out, nil
}

// --- stopMessage ---

// StopMessage returns the session's stopMessage state.
func (tx *Tx) StopMessage(sessionID string) (StopMessage, bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return StopMessage{}, false, err
	}
	var m StopMessage
	ok, err := tx.getJSON(stopKey(sid), &m)
	return m, ok, err
}

// PutStopMessage writes the session's stopMessage state.
func (tx *Tx) PutStopMessage(sessionID string, m StopMessage) error {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return err
	}
	return tx.putJSON(stopKey(sid), m)
}

// DeleteStopMessage removes the session's stopMessage state.
func (tx *Tx) DeleteStopMessage(sessionID string) (bool, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return false, err
	}
	return tx.del(stopKey(sid))
}

// --- applied directives ---

// AppliedDirectives returns the session's applied-directive digests; a
// session without any gets the zero value.
func (tx *Tx) AppliedDirectives(sessionID string) (AppliedDirectives, error) {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return AppliedDirectives{}, err
	}
	var a AppliedDirectives
	_, err = tx.getJSON(directivesKey(sid), &a)
	return a, err
}

// PutAppliedDirectives writes the session's applied-directive digests.
func (tx *Tx) PutAppliedDirectives(sessionID string, a AppliedDirectives) error {
	sid, err := sanitizeID(sessionID)
	if err != nil {
		return err
	}
	return tx.putJSON(directivesKey(sid), a)
}

// --- reservations ---

// Reservation returns the reservation record of a request id.
func (tx *Tx) Reservation(requestID string) (Reservation, bool, error) {
	rid, err := sanitizeID(requestID)
	if err != nil {
		return Reservation{}, false, err
	}
	var r Reservation
	ok, err := tx.getJSON(reservationKey(rid), &r)
	return r, ok, err
}

// PutReservation writes r under r.RequestID.
func (tx *Tx) PutReservation(r Reservation) error {
	rid, err := sanitizeID(r.RequestID)
	if err != nil {
		return err
	}
	return tx.putJSON(reservationKey(rid), r)
}

// DeleteReservation removes a request's reservation record.
func (tx *Tx) DeleteReservation(requestID string) (bool, error) {
	rid, err := sanitizeID(requestID)
	if err != nil {
		return false, err
	}
	return tx.del(reservationKey(rid))
}

// Reservations lists every reservation record.
func (tx *Tx) Reservations() ([]Reservation, error) {
	var out []Reservation
	err := tx.scan([]byte(reservePrefix), func(key, val []byte) error {
		var r Reservation
		if err := json.Unmarshal(val, &r); err != nil {
			return fmt.Errorf("storage: decode %s: %w", key, err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

// --- NTP ---

// NTP returns the persisted NTP state.
func (tx *Tx) NTP() (NTPState, bool, error) {
	var st NTPState
	ok, err := tx.getJSON([]byte(ntpKey), &st)
	return st, ok, err
}

// PutNTP writes the NTP state.
func (tx *Tx) PutNTP(st NTPState) error { return tx.putJSON([]byte(ntpKey), st) }

func sortTasks(ts []ClockTask) {
	sort.Slice(ts, func(i, j int) bool {
		if ts[i].DueAt != ts[j].DueAt {
			return ts[i].DueAt < ts[j].DueAt
		}
		return ts[i].TaskID < ts[j].TaskID
	})
}

// slogBridge adapts slog to Badger's logger; Badger is set to WARNING so
// info and debug lines never reach it.
type slogBridge struct{ l *slog.Logger }

func (b slogBridge) Errorf(f string, a ...any) {
	b.l.Error(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}

func (b slogBridge) Warningf(f string, a ...any) {
	b.l.Warn(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}

func (b slogBridge) Infof(f string, a ...any) {
	b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}

func (b slogBridge) Debugf(f string, a ...any) {
	b.l.Debug(strings.TrimSpace(fmt.Sprintf(f, a...)), "component", "badger")
}
