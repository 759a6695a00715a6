package storage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// crash300Env makes the test binary write 300 tasks, record the
// generation and SIGKILL itself, leaving them in the write-ahead log only.
const crash300Env = "CHIME_STORAGE_CRASH300_DIR"

func put300(s *Store) error {
	for i := range 300 {
		err := s.PutTask(ClockTask{TaskID: fmt.Sprintf("t%03d", i), SessionID: fmt.Sprintf("s%d", i%7), DueAt: int64(i), Task: strings.Repeat("x", 100)})
		if err != nil {
			return err
		}
	}
	return nil
}

func crash300Child(dir string) {
	s, err := Open(dir, Options{})
	if err == nil {
		err = put300(s)
	}
	if err == nil {
		err = s.mark()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(3)
	}
	fmt.Println("written")
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// storeWAL300 leaves 300 tasks in a killed store's write-ahead log.
func storeWAL300(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	runWriterChild(t, crash300Env, dir)
	return dir
}

// storeClosed300 is a cleanly closed store of 300 tasks: in table files.
func storeClosed300(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := put300(s); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func countTasks(t *testing.T, s *Store) int {
	t.Helper()
	n := 0
	if err := s.ScanTasks(func(ClockTask) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

func onlyFile(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(m) == 0 {
		t.Fatalf("no %s in %s", pattern, dir)
	}
	return m[0]
}

// mustRefuse asserts that Open refuses the damaged store with a message
// that names the next step, and leaves it unchanged for a later rescue.
func mustRefuse(t *testing.T, dir string) {
	t.Helper()
	before := listing(t, dir)
	s, err := Open(dir, Options{})
	if err == nil {
		n := countTasks(t, s)
		_ = s.Close()
		t.Fatalf("a damaged store opened (with %d of 300 tasks)", n)
	}
	if !errors.Is(err, ErrDamaged) {
		t.Fatalf("want ErrDamaged, got %v", err)
	}
	if !strings.Contains(err.Error(), "chime store restore") {
		t.Fatalf("the error does not name the next step: %v", err)
	}
	for name := range before {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil && strings.HasSuffix(name, ".sst") {
			t.Fatalf("refusing deleted table %s", name)
		}
	}
}

func listing(t *testing.T, dir string) map[string]bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, e := range ents {
		m[e.Name()] = true
	}
	return m
}

func TestHealthyStoresReopenWhole(t *testing.T) {
	for name, dir := range map[string]string{"closed": storeClosed300(t), "killed": storeWAL300(t)} {
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if n := countTasks(t, s); n != 300 {
			t.Errorf("%s: %d of 300 tasks", name, n)
		}
		info, err := s.Info()
		if err != nil || info.Tasks != 300 || info.Generation < info.Marker || info.Marker == 0 {
			t.Errorf("%s: info %+v, %v", name, info, err)
		}
		_ = s.Close()
	}
}

func TestRefusesTornManifest(t *testing.T) {
	dir := storeClosed300(t)
	mf := filepath.Join(dir, "MANIFEST")
	st, err := os.Stat(mf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(mf, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	mustRefuse(t, dir)
}

func TestRefusesCutWAL(t *testing.T) {
	dir := storeWAL300(t)
	if err := os.Truncate(onlyFile(t, dir, "*.mem"), 40<<10); err != nil {
		t.Fatal(err)
	}
	mustRefuse(t, dir)
}

func TestRefusesGarbageInWAL(t *testing.T) {
	dir := storeWAL300(t)
	garbage(t, onlyFile(t, dir, "*.mem"), 20<<10)
	mustRefuse(t, dir)
}

func TestRefusesGarbageInTable(t *testing.T) {
	dir := storeClosed300(t)
	sst := onlyFile(t, dir, "*.sst")
	st, _ := os.Stat(sst)
	garbage(t, sst, st.Size()/3)
	mustRefuse(t, dir)
}

func TestRefusesTruncatedTable(t *testing.T) {
	dir := storeClosed300(t)
	sst := onlyFile(t, dir, "*.sst")
	st, _ := os.Stat(sst)
	if err := os.Truncate(sst, st.Size()/2); err != nil {
		t.Fatal(err)
	}
	mustRefuse(t, dir)
}

// garbage overwrites 512 bytes at off.
func garbage(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	junk := []byte(strings.Repeat("\xde\xad\xbe\xef", 128))
	if _, err := f.WriteAt(junk, off); err != nil {
		t.Fatal(err)
	}
}

func TestBackupRestore(t *testing.T) {
	dir := storeClosed300(t)
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	bak := filepath.Join(t.TempDir(), "store.bak")
	f, _ := os.Create(bak)
	if _, err := s.Backup(f); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	_ = s.Close()

	to := t.TempDir()
	r, err := Open(to, Options{})
	if err != nil {
		t.Fatal(err)
	}
	in, _ := os.Open(bak)
	defer in.Close()
	if err := r.Restore(in); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r, err = Open(to, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if n := countTasks(t, r); n != 300 {
		t.Fatalf("restored %d of 300 tasks", n)
	}
	in2, _ := os.Open(bak)
	defer in2.Close()
	if err := r.Restore(in2); err == nil {
		t.Fatal("restore into a non-empty store accepted")
	}
}

// TestOpensWithEmptyMemtable: a process killed between creating a
// memtable's log and sizing it leaves an empty .mem file; the store opens
// with everything it held (Badger alone refuses, dgraph-io/badger#2207).
// TestOpensWithEmptyValueLog: a value log file of 0 bytes (a kill between
// creating and sizing it, seen in TestCrashRecovery) holds nothing, and
// the store opens with everything it had.
func TestOpensWithEmptyValueLog(t *testing.T) {
	for _, name := range []string{"000005.vlog", "000001.vlog"} {
		dir := storeClosed300(t)
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Open(dir, Options{})
		if err != nil {
			t.Fatalf("open with an empty %s: %v", name, err)
		}
		if n := countTasks(t, s); n != 300 {
			t.Errorf("%s: %d of 300 tasks", name, n)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestOpensWithEmptyMemtable(t *testing.T) {
	dir := storeClosed300(t)
	if err := os.WriteFile(filepath.Join(dir, "00042.mem"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("open with an empty memtable file: %v", err)
	}
	defer s.Close()
	if n := countTasks(t, s); n != 300 {
		t.Errorf("%d of 300 tasks", n)
	}
}
