package storage

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
	"github.com/dgraph-io/badger/v4/table"
	"github.com/dgraph-io/ristretto/v2/z"
)

// A damaged store must not be opened for writing (docs/failures.md): Badger drops
// what it cannot read (a torn MANIFEST forgets its tables and deletes their
// files, a damaged write-ahead log is cut at the damage) and starts with
// less, and the next write reuses the freed file numbers. The store
// therefore keeps a generation: a counter key inside the LSM, bumped after
// writes, and the same number in GenerationFile outside it, written only
// after the key is durable. A store that opens with a generation below the
// file's lost writes.

// GenerationFile is the marker beside the Badger files.
const GenerationFile = "CHIME-GENERATION"

// generationKey is the counter inside the LSM; it is never deleted, so
// compaction cannot drop it.
var generationKey = []byte(keyVersion + "generation")

// markEvery is how often a store with new writes bumps its generation.
const markEvery = time.Second

// ErrDamaged is returned by Open and Check for a store that cannot be read
// fully. Its message names the next step.
var ErrDamaged = errors.New("storage: the store is damaged")

// damaged wraps ErrDamaged with what was found and what to do.
func damaged(dir, what string) error {
	return fmt.Errorf("%w: %s in %s. The host does not start on it, so nothing overwrites what is left. "+
		"Next: stop every process using the directory, keep a copy of it, then restore the last backup "+
		"(`chime store restore --data-dir <new dir> <backup file>`) and point CHIME_DATA_DIR at the new directory, "+
		"or move the directory aside to start empty. `chime store check --data-dir %s` repeats this check",
		ErrDamaged, what, dir, dir)
}

// generationMarker is the content of GenerationFile.
type generationMarker struct {
	Generation uint64 `json:"generation"`
	WrittenAt  int64  `json:"writtenAt"` // Unix ms, for people reading it
}

func readMarker(dir string) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(dir, GenerationFile))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("storage: read %s: %w", GenerationFile, err)
	}
	var m generationMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return 0, damaged(dir, fmt.Sprintf("%s is not readable (%v)", GenerationFile, err))
	}
	return m.Generation, nil
}

// writeMarker replaces GenerationFile atomically and durably.
func writeMarker(dir string, gen uint64) error {
	b, _ := json.Marshal(generationMarker{Generation: gen, WrittenAt: time.Now().UnixMilli()})
	tmp := filepath.Join(dir, GenerationFile+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, GenerationFile)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func readGeneration(txn *badger.Txn) (uint64, error) {
	item, err := txn.Get(generationKey)
	if errors.Is(err, badger.ErrKeyNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var gen uint64
	err = item.Value(func(v []byte) error {
		var perr error
		gen, perr = strconv.ParseUint(string(v), 10, 64)
		return perr
	})
	return gen, err
}

// checkFiles reads the MANIFEST and every table it names before Badger
// does: Badger cuts a torn MANIFEST at the tear and deletes every table it
// no longer names, skips a table whose checksum fails, and panics in a
// goroutine of its own on a truncated one.
func checkFiles(dir string, bo badger.Options) error {
	f, err := os.Open(filepath.Join(dir, badger.ManifestFilename))
	if errors.Is(err, os.ErrNotExist) {
		return nil // a new store, or Badger reports the missing tables itself
	}
	if err != nil {
		return fmt.Errorf("storage: open MANIFEST: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("storage: stat MANIFEST: %w", err)
	}
	mf, good, err := replayManifest(f)
	if err != nil {
		return damaged(dir, fmt.Sprintf("the MANIFEST cannot be read (%v)", err))
	}
	if good < st.Size() {
		return damaged(dir, fmt.Sprintf("the MANIFEST is torn: %d of its %d bytes are readable", good, st.Size()))
	}
	for id, tm := range mf.Tables {
		name := table.NewFilename(id, dir)
		if err := verifyTable(name, tm, bo); err != nil {
			return damaged(dir, fmt.Sprintf("table %s cannot be read (%v)", filepath.Base(name), err))
		}
	}
	return nil
}

// verifyTable checks every block checksum of one table file.
func verifyTable(name string, tm badger.TableManifest, bo badger.Options) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("badger panicked: %v", r)
		}
	}()
	if tm.KeyID != 0 {
		return nil // encrypted: Badger checks it (the host does not encrypt)
	}
	mf, err := z.OpenMmapFile(name, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	t, err := table.OpenTable(mf, table.Options{
		ReadOnly: true, ChkMode: options.OnTableRead, BlockSize: bo.BlockSize,
		BloomFalsePositive: bo.BloomFalsePositive, Compression: tm.Compression,
		TableSize: uint64(bo.BaseTableSize),
	})
	if err != nil {
		return err // OpenTable closed mf
	}
	// Not DecrRef: the last reference deletes the file.
	return t.MmapFile.Close(-1)
}

// replayManifest recovers Badger's panics on garbage input.
func replayManifest(f *os.File) (m badger.Manifest, good int64, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("badger panicked: %v", r)
		}
	}()
	return badger.ReplayManifestFile(f, 0, badger.DefaultOptions(""))
}

// StoreInfo is what a full read of the store found.
type StoreInfo struct {
	Keys       int    // live keys
	Tasks      int    // clock tasks
	Sessions   int    // session records
	Generation uint64 // the generation inside the store
	Marker     uint64 // the generation in GenerationFile
}

// verify reads every key and value (checksums on) and compares the
// generation with the marker.
func (s *Store) verify(dir string) (StoreInfo, error) {
	var info StoreInfo
	marker, err := readMarker(dir)
	if err != nil {
		return info, err
	}
	info.Marker = marker
	err = s.db.View(func(txn *badger.Txn) error {
		gen, err := readGeneration(txn)
		if err != nil {
			return fmt.Errorf("generation key: %w", err)
		}
		info.Generation = gen
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if err := item.Value(func([]byte) error { return nil }); err != nil {
				return fmt.Errorf("read %q: %w", item.Key(), err)
			}
			info.Keys++
			switch {
			case isTaskKey(item.Key()):
				info.Tasks++
			case isMetaKey(item.Key()):
				info.Sessions++
			}
		}
		return nil
	})
	if err != nil {
		return info, damaged(dir, fmt.Sprintf("a full read failed (%v)", err))
	}
	if info.Generation < marker {
		return info, damaged(dir, fmt.Sprintf("the store holds generation %d but had reached %d (%s): it opened with less than it last held",
			info.Generation, marker, GenerationFile))
	}
	return info, nil
}

// markLoop bumps the generation once a second while there were writes.
func (s *Store) markLoop() {
	defer close(s.markDone)
	t := time.NewTicker(markEvery)
	defer t.Stop()
	for {
		select {
		case <-s.markStop:
			return
		case <-t.C:
			if err := s.mark(); err != nil && !errors.Is(err, ErrNoSpace) && !errors.Is(err, ErrReadOnly) {
				s.log.Warn("storage: recording the store generation failed", "err", err)
			}
		}
	}
}

// mark bumps the generation key, then the marker file, if anything was
// written since the last mark.
func (s *Store) mark() error {
	s.markMu.Lock()
	defer s.markMu.Unlock()
	if !s.dirty.Swap(false) {
		return nil
	}
	var gen uint64
	err := s.update(func(tx *Tx) error {
		g, err := readGeneration(tx.txn)
		if err != nil {
			return err
		}
		gen = g + 1
		return tx.txn.Set(generationKey, []byte(strconv.FormatUint(gen, 10)))
	}, false)
	if err != nil {
		s.dirty.Store(true)
		return err
	}
	return writeMarker(s.dir, gen)
}

// Info reads the whole store as Open does and reports what it holds.
func (s *Store) Info() (StoreInfo, error) { return s.verify(s.dir) }

// Backup writes a full Badger backup of the store to w (docs/failures.md; `chime
// store backup`). It returns the store version it covers.
func (s *Store) Backup(w io.Writer) (uint64, error) {
	v, err := s.db.Backup(w, 0)
	if err != nil {
		return 0, fmt.Errorf("storage: backup: %w", err)
	}
	return v, nil
}

// Restore loads a backup written by Backup into an empty store and records
// its generation, so the restored store opens as whole.
func (s *Store) Restore(r io.Reader) error {
	empty := true
	if err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{})
		defer it.Close()
		it.Rewind()
		empty = !it.Valid()
		return nil
	}); err != nil {
		return err
	}
	if !empty {
		return fmt.Errorf("storage: restore into %s: the store is not empty; restore into a new directory", s.dir)
	}
	if err := s.db.Load(r, 64); err != nil {
		return fmt.Errorf("storage: restore: %w", err)
	}
	s.dirty.Store(true)
	return s.mark()
}
