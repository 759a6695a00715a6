package storage

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// crashEnv makes the test binary act as the SIGKILL victim (TestDurability).
const crashEnv = "CHIME_STORAGE_CRASH_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		crashChild(dir)
		return // unreachable: crashChild kills the process
	}
	if dir := os.Getenv(crash300Env); dir != "" {
		crash300Child(dir)
		return // unreachable
	}
	os.Exit(m.Run())
}

// crashChild writes one task and SIGKILLs itself the moment Put returned,
// so nothing (Close, deferred flushes, exit handlers) can run afterwards.
func crashChild(dir string) {
	s, err := Open(dir, Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(3)
	}
	err = s.PutTask(ClockTask{TaskID: "survivor", SessionID: "crash/session", DueAt: 42, Task: "after kill"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "put:", err)
		os.Exit(4)
	}
	fmt.Println("written")
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

func openTemp(t testing.TB) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestDurabilityAfterSIGKILL(t *testing.T) {
	dir := t.TempDir()
	err := runWriterChild(t, crashEnv, dir)
	var exitErr *exec.ExitError
	if !errors.As(err, &exitErr) {
		t.Fatalf("child should die by signal, got %v", err)
	}
	if ws, ok := exitErr.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child not killed by SIGKILL: %v", exitErr)
	}

	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("reopen after SIGKILL: %v", err)
	}
	defer s.Close()
	got, ok, err := s.GetTask("crash/session", "survivor")
	if err != nil || !ok {
		t.Fatalf("task lost after SIGKILL: ok=%v err=%v", ok, err)
	}
	if got.Task != "after kill" || got.DueAt != 42 {
		t.Fatalf("task corrupted: %+v", got)
	}
}

func TestTaskRoundTrip(t *testing.T) {
	s := openTemp(t)
	in := ClockTask{
		TaskID: "t1", SessionID: "sess-1", DueAt: 1770038558229, UTCOffsetSec: -28800,
		TimeZone: "America/Los_Angeles", Task: "check build", Tool: "bash",
		Arguments: `{"cmd":"make"}`, Repeat: "every 10m", MaxRuns: 3, Runs: 1,
		CreatedAt: 1, UpdatedAt: 2, NotBeforeRequestID: "req-1", DeliveredAt: 3,
		LastDeliveredAt: 3, DeliveryCount: 4, ReservedBy: "req-2", ReservedAt: 5,
	}
	if err := s.PutTask(in); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.GetTask("sess-1", "t1")
	if err != nil || !ok {
		t.Fatalf("get: ok=%v err=%v", ok, err)
	}
	if got != in {
		t.Fatalf("round trip changed the task:\n got %+v\nwant %+v", got, in)
	}
	if _, ok, _ := s.GetTask("sess-1", "nope"); ok {
		t.Fatal("unknown task found")
	}
	if _, ok, _ := s.GetTask("sess-1", "../t1"); ok {
		t.Fatal("invalid task id must read as unknown")
	}
	deleted, err := s.DeleteTask("sess-1", "t1")
	if err != nil || !deleted {
		t.Fatalf("delete: %v %v", deleted, err)
	}
	deleted, err = s.DeleteTask("sess-1", "t1")
	if err != nil || deleted {
		t.Fatalf("second delete should report false: %v %v", deleted, err)
	}
}

func TestPutTaskRejectsBadIDs(t *testing.T) {
	s := openTemp(t)
	if err := s.PutTask(ClockTask{TaskID: "a/b", SessionID: "s"}); err == nil {
		t.Fatal("task id with / accepted")
	}
	if err := s.PutTask(ClockTask{TaskID: "ok", SessionID: ""}); !errors.Is(err, ErrEmptyID) {
		t.Fatalf("empty session id: %v", err)
	}
}

func TestListTasksOrdered(t *testing.T) {
	s := openTemp(t)
	for i, due := range []int64{300, 100, 200} {
		if err := s.PutTask(ClockTask{TaskID: fmt.Sprintf("t%d", i), SessionID: "s", DueAt: due}); err != nil {
			t.Fatal(err)
		}
	}
	ts, err := s.ListTasks("s")
	if err != nil {
		t.Fatal(err)
	}
	var dues []int64
	for _, x := range ts {
		dues = append(dues, x.DueAt)
	}
	if fmt.Sprint(dues) != "[100 200 300]" {
		t.Fatalf("order: %v", dues)
	}
}

// Sessions whose raw ids nest or prefix each other must stay disjoint.
func TestSessionIsolation(t *testing.T) {
	s := openTemp(t)
	ids := []string{"a", "a/b", "ab", "a/task", "a/task/x", "~abc", "a ",
		strings.Repeat("z", 500), strings.Repeat("z", 501), "ä", "a\x00b"}
	for _, id := range ids {
		if err := s.PutTask(ClockTask{TaskID: "same", SessionID: id, Task: "of " + id}); err != nil {
			t.Fatalf("put %q: %v", id, err)
		}
		if err := s.PutStopMessage(id, StopMessage{Text: "stop " + id, MaxRepeats: 1}); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range ids {
		ts, err := s.ListTasks(id)
		if err != nil {
			t.Fatal(err)
		}
		if len(ts) != 1 || ts[0].Task != "of "+id {
			t.Fatalf("session %q sees %+v", id, ts)
		}
		m, ok, err := s.GetStopMessage(id)
		if err != nil || !ok || m.Text != "stop "+id {
			t.Fatalf("stopMessage of %q: %+v %v %v", id, m, ok, err)
		}
	}
	n, err := s.ClearTasks("a")
	if err != nil || n != 1 {
		t.Fatalf("clear a: %d %v", n, err)
	}
	for _, id := range ids[1:] {
		if ts, _ := s.ListTasks(id); len(ts) != 1 {
			t.Fatalf("clearing %q touched %q", "a", id)
		}
	}
	count := 0
	if err := s.ScanTasks(func(ClockTask) error { count++; return nil }); err != nil {
		t.Fatal(err)
	}
	if count != len(ids)-1 {
		t.Fatalf("scan saw %d tasks, want %d", count, len(ids)-1)
	}
}

func TestSanitizeSessionID(t *testing.T) {
	cases := map[string]bool{ // id → kept verbatim
		"abc":                    true,
		"session_01HX-9.z":       true,
		"a/b":                    false,
		"":                       false,
		"~abc":                   false,
		"with space":             false,
		strings.Repeat("x", 128): true,
		strings.Repeat("x", 129): false,
	}
	for id, verbatim := range cases {
		got, err := SanitizeSessionID(id)
		if id == "" {
			if !errors.Is(err, ErrEmptyID) {
				t.Fatalf("empty id: %v", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		if verbatim != (got == id) {
			t.Fatalf("%q → %q (verbatim=%v)", id, got, verbatim)
		}
		if !verbatim && (!strings.HasPrefix(got, "~") || len(got) != 41) {
			t.Fatalf("%q → %q, want ~ + 40 hex", id, got)
		}
	}
	x, _ := SanitizeSessionID("a/b")
	y, _ := SanitizeSessionID("a/c")
	if x == y {
		t.Fatal("distinct ids collided")
	}
}

func FuzzSanitizeSessionID(f *testing.F) {
	for _, s := range []string{"a", "a/b", "~x", "session_1", strings.Repeat("q", 200), "\xff", "a\nb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		got, err := SanitizeSessionID(id)
		if id == "" {
			if err == nil {
				t.Fatal("empty id accepted")
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if got == "" || len(got) > MaxIDLen || strings.Contains(got, "/") || !(verbatimOK(got) || strings.HasPrefix(got, "~")) {
			t.Fatalf("bad key part %q for %q", got, id)
		}
		if strings.HasPrefix(got, "~") == (got == id) {
			t.Fatalf("hashed/verbatim confusion: %q → %q", id, got)
		}
		again, _ := SanitizeSessionID(id)
		if again != got {
			t.Fatal("not deterministic")
		}
	})
}

func TestSessionsAndTouch(t *testing.T) {
	s := openTemp(t)
	if err := s.TouchSession("s1", "", 100); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchSession("s1", "webhook", 200); err != nil {
		t.Fatal(err)
	}
	if err := s.TouchSession("s2/x", "", 300); err != nil {
		t.Fatal(err)
	}
	got, ok, err := s.GetSession("s1")
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if got != (Session{ID: "s1", CreatedAt: 100, LastSeenAt: 200, LastChannel: "webhook"}) {
		t.Fatalf("session: %+v", got)
	}
	// A task key must not be mistaken for a session record.
	if err := s.PutTask(ClockTask{TaskID: "meta", SessionID: "s3"}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListSessions()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != "s2/x" || list[1].ID != "s1" {
		t.Fatalf("sessions: %+v", list)
	}
}

func TestStopMessageNTPReservationRoundTrip(t *testing.T) {
	s := openTemp(t)
	m := StopMessage{Text: "continue", MaxRepeats: 10, Used: 2, UpdatedAt: 5, LastUsedAt: 6}
	if err := s.PutStopMessage("s", m); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.GetStopMessage("s"); err != nil || !ok || got != m {
		t.Fatalf("stop: %+v %v %v", got, ok, err)
	}
	if ok, err := s.DeleteStopMessage("s"); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, ok, _ := s.GetStopMessage("s"); ok {
		t.Fatal("stopMessage survived delete")
	}

	if _, ok, err := s.LoadNTP(); ok || err != nil {
		t.Fatalf("fresh store has ntp state: %v %v", ok, err)
	}
	st := NTPState{Status: "ok", OffsetMs: -12, Server: "127.0.0.1:123", UpdatedAt: 99, Error: ""}
	if err := s.SaveNTP(st); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := s.LoadNTP(); err != nil || !ok || got != st {
		t.Fatalf("ntp: %+v %v %v", got, ok, err)
	}

	r := Reservation{RequestID: "req:1/x", SessionID: "s", TaskIDs: []string{"a", "b"}, ReservedAt: 7}
	err := s.Update(func(tx *Tx) error { return tx.PutReservation(r) })
	if err != nil {
		t.Fatal(err)
	}
	err = s.View(func(tx *Tx) error {
		got, ok, err := tx.Reservation("req:1/x")
		if err != nil || !ok || got.SessionID != "s" || len(got.TaskIDs) != 2 {
			return fmt.Errorf("reservation: %+v %v %v", got, ok, err)
		}
		all, err := tx.Reservations()
		if err != nil || len(all) != 1 {
			return fmt.Errorf("reservations: %+v %v", all, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestClearTasksBeyondOneChunk(t *testing.T) {
	s := openTemp(t)
	const n = clearChunk + 250
	err := s.Update(func(tx *Tx) error {
		for i := 0; i < n; i++ {
			if err := tx.PutTask(ClockTask{TaskID: fmt.Sprintf("t%05d", i), SessionID: "big"}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.PutTask(ClockTask{TaskID: "keep", SessionID: "other"}); err != nil {
		t.Fatal(err)
	}
	got, err := s.ClearTasks("big")
	if err != nil || got != n {
		t.Fatalf("cleared %d (%v), want %d", got, err, n)
	}
	if ts, _ := s.ListTasks("big"); len(ts) != 0 {
		t.Fatalf("%d tasks left", len(ts))
	}
	if ts, _ := s.ListTasks("other"); len(ts) != 1 {
		t.Fatal("other session lost its task")
	}
}

func TestClosedStoreReturnsErrors(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.PutTask(ClockTask{TaskID: "x", SessionID: "s"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("write on closed store: %v", err)
	}
	if _, err := s.ListTasks("s"); !errors.Is(err, ErrClosed) {
		t.Fatalf("read on closed store: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

func TestOpenUnusableDir(t *testing.T) {
	base := t.TempDir()
	file := filepath.Join(base, "plain-file")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(file, Options{}); err == nil {
		t.Fatal("open on a regular file succeeded")
	}
	if _, err := Open(filepath.Join(file, "sub"), Options{}); err == nil {
		t.Fatal("open below a regular file succeeded")
	}
	if _, err := Open("", Options{}); err == nil {
		t.Fatal("empty dir accepted")
	}
	if os.Geteuid() != 0 { // root ignores permission bits
		ro := filepath.Join(base, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(ro, Options{}); err == nil {
			s.Close()
			t.Fatal("open on a read-only dir succeeded")
		}
	}
}

// A second process (or Store) on the same dir is refused, not corrupted.
func TestOpenLockedDir(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s2, err := Open(dir, Options{}); err == nil {
		s2.Close()
		t.Fatal("second open of a locked dir succeeded")
	}
}

func TestInMemory(t *testing.T) {
	s, err := Open("", Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.PutTask(ClockTask{TaskID: "x", SessionID: "s", Task: "m"}); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := s.GetTask("s", "x"); !ok || got.Task != "m" {
		t.Fatal("in-memory round trip failed")
	}
	if _, err := Open("dir", Options{InMemory: true}); err == nil {
		t.Fatal("in-memory with a dir accepted")
	}
}

func BenchmarkPutTask(b *testing.B) {
	s := openTemp(b)
	t := ClockTask{TaskID: "bench", SessionID: "session-bench", DueAt: time.Now().UnixMilli(), Task: "benchmark task", Arguments: `{}`}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		t.DeliveryCount = i
		if err := s.PutTask(t); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetTask(b *testing.B) {
	s := openTemp(b)
	if err := s.PutTask(ClockTask{TaskID: "bench", SessionID: "session-bench", Task: "benchmark task"}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok, err := s.GetTask("session-bench", "bench"); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// SIGKILL cannot tell fsync from the page cache, so the write-through and
// sidecar sizing options are checked directly.
func TestOpenOptions(t *testing.T) {
	s := openTemp(t)
	o := s.db.Opts()
	if !o.SyncWrites {
		t.Fatal("SyncWrites is off: writes are not write-through (docs/clock-tool.md)")
	}
	if o.MemTableSize > 8<<20 || o.NumMemtables > 2 || o.BlockCacheSize > 8<<20 || o.NumCompactors != 2 {
		t.Fatalf("not sized for a sidecar: %+v", o)
	}
}

// TestClaimDirective: a digest is claimed once per session (docs/directives.md), the
// claim survives a reopen, is per session, bounded to the newest
// MaxDirectiveDigests, and can be released.
func TestClaimDirective(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	claim := func(s *Store, sid, digest string, want bool) {
		t.Helper()
		got, err := s.ClaimDirective(sid, digest)
		if err != nil || got != want {
			t.Fatalf("ClaimDirective(%q, %q) = %v, %v; want %v", sid, digest, got, err, want)
		}
	}
	claim(s, "a", "d1", true)
	claim(s, "a", "d1", false)
	for _, other := range []string{"a/b", "ab", "a/directives", "A", strings.Repeat("a", 500)} {
		claim(s, other, "d1", true) // one session never sees another's digests
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, dir)
	claim(s, "a", "d1", false) // persisted
	if err := s.ReleaseDirective("a", "d1"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseDirective("a", "never-claimed"); err != nil {
		t.Fatal(err)
	}
	claim(s, "a", "d1", true)

	// Bounded: the oldest digest is forgotten first.
	for i := range MaxDirectiveDigests {
		claim(s, "bounded", fmt.Sprint("d", i), true)
	}
	claim(s, "bounded", "one-more", true)
	got, err := s.DirectiveDigests("bounded")
	if err != nil || len(got) != MaxDirectiveDigests || got[0] != "d1" || got[len(got)-1] != "one-more" {
		t.Fatalf("digests: %d %v, first %q", len(got), err, got[0])
	}
	claim(s, "bounded", "d1", false)
	claim(s, "bounded", "d0", true)

	if _, err := s.ClaimDirective("", "d"); !errors.Is(err, ErrEmptyID) {
		t.Fatalf("empty session: %v", err)
	}
	if _, err := s.ClaimDirective("a", ""); err == nil {
		t.Fatal("empty digest accepted")
	}
}

// TestClaimDirectiveConcurrent: copies of one request racing each other
// claim a digest exactly once.
func TestClaimDirectiveConcurrent(t *testing.T) {
	s := openTemp(t)
	const n = 8
	results := make(chan bool, n)
	for range n {
		go func() {
			ok, err := s.ClaimDirective("race", "same")
			if err != nil {
				t.Error(err)
			}
			results <- ok
		}()
	}
	won := 0
	for range n {
		if <-results {
			won++
		}
	}
	if won != 1 {
		t.Fatalf("%d claims won, want 1", won)
	}
}

func openAt(t testing.TB, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// runWriterChild runs this test binary as a child that writes to dir (the
// env variable name selects what it writes), reports "written" and is
// killed before it can close the store. It returns how the child ended.
func runWriterChild(t *testing.T, env, dir string) error {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	err = cmd.Wait()
	if strings.TrimSpace(line) != "written" {
		t.Fatalf("child did not report the write: %q (wait: %v)", line, err)
	}
	return err
}
