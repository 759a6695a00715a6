package host

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
)

// docs/failures.md "storage write failure: tool error; the process keeps running",
// on a real, small file system. Badger writes through sparse mmap'd files,
// so without the headroom check a full tmpfs is a SIGBUS that kills the
// host (at the 486th 4 KB schedule on 2 MiB). The host runs in a child
// process inside a private mount namespace (`unshare -rm`: works as root
// and, where user namespaces are allowed, without), so a crash is the
// child's exit status and not the test binary's.

const fullDiskEnv = "CHIME_FULLDISK_CHILD" // "<tmpfs size>:<max schedules>"

type fullDiskReport struct {
	OK, Failed   int
	FirstFailure string
	Healthz      json.RawMessage
	Listed       int  // tasks a clock list read back after the failures
	ListOK       bool // the read worked
	PrepareCode  int  // the request path kept answering
	Metrics      string
}

func TestFullTmpfsStartsReadOnly(t *testing.T) {
	r := runFullDisk(t, "2m", 600)
	if r.OK != 0 || r.Failed == 0 {
		t.Fatalf("2 MiB is below the headroom: want every write refused, got %d ok %d failed", r.OK, r.Failed)
	}
	if !strings.Contains(r.FirstFailure, "read-only") {
		t.Fatalf("failure does not say why: %q", r.FirstFailure)
	}
	h := gjson.ParseBytes(r.Healthz)
	if !h.Get("ok").Bool() || h.Get("storage.writable").Bool() || !h.Get("storage.readOnly").Bool() {
		t.Fatalf("healthz: %s", r.Healthz)
	}
	if !r.ListOK || r.PrepareCode != http.StatusOK {
		t.Fatalf("reads and the request path must keep working: list ok=%v, prepare %d", r.ListOK, r.PrepareCode)
	}
	if !strings.Contains(r.Metrics, "chime_storage_writable 0") {
		t.Fatal("metrics do not show the store unwritable")
	}
}

func TestFullTmpfsRefusesWritesAndKeepsServing(t *testing.T) {
	r := runFullDisk(t, "56m", 20000) // 20 000 × 4 KB would overrun 56 MiB
	if r.OK < 1000 || r.Failed == 0 {
		t.Fatalf("want writes until the headroom is reached, then refusals: %d ok %d failed", r.OK, r.Failed)
	}
	if !strings.Contains(r.FirstFailure, "free disk space") {
		t.Fatalf("failure does not say why: %q", r.FirstFailure)
	}
	if !r.ListOK || r.Listed != r.OK {
		t.Fatalf("every acknowledged schedule must read back: listed %d of %d (ok=%v)", r.Listed, r.OK, r.ListOK)
	}
	// Badger's compactions may free some space after the refusals, and
	// writes then resume: healthz must say what the free space allows.
	h := gjson.ParseBytes(r.Healthz)
	above := h.Get("storage.freeBytes").Uint() >= h.Get("storage.minFreeBytes").Uint()
	if !h.Get("ok").Bool() || !h.Get("storage.minFreeBytes").Exists() || h.Get("storage.writable").Bool() != above {
		t.Fatalf("healthz: %s", r.Healthz)
	}
	if r.PrepareCode != http.StatusOK {
		t.Fatalf("prepare: %d", r.PrepareCode)
	}
}

func runFullDisk(t *testing.T, size string, calls int) fullDiskReport {
	t.Helper()
	return runFullDiskChild(t, []string{"-rm"}, size, calls, t.TempDir())
}

// runFullDiskChild runs fullDiskChild under unshare with flags, env the
// extra environment (a loop-mounted image, a count to list).
func runFullDiskChild(t *testing.T, flags []string, size string, calls int, mnt string, env ...string) fullDiskReport {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("this test needs unshare(1) (util-linux) to mount a private file system: %v", err)
	}
	cmd := exec.Command(unshare, append(flags, os.Args[0], "-test.run=^$")...)
	cmd.Env = append(append(os.Environ(), fullDiskEnv+"="+size+":"+fmt.Sprint(calls)+":"+mnt), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		t.Fatalf("the host died of %v on a full %s tmpfs\n%s", ws.Signal(), size, tail(stderr.String()))
	}
	if i := strings.Index(stderr.String(), "SIGBUS"); i >= 0 {
		t.Fatalf("the host crashed on a full %s tmpfs: %s", size, stderr.String()[max(0, i-200):min(stderr.Len(), i+200)])
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, tail(stderr.String()))
	}
	var r fullDiskReport
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("child report %q: %v\n%s", stdout.String(), err, tail(stderr.String()))
	}
	fs := size + " tmpfs"
	if size == "" {
		fs = "ext4 image"
	}
	t.Logf("%s: %d ok, %d refused; healthz %s", fs, r.OK, r.Failed, r.Healthz)
	return r
}

const (
	fullDiskImageEnv = "CHIME_FULLDISK_EXT4" // an ext4 image to loop-mount instead of the tmpfs
	fullDiskListEnv  = "CHIME_FULLDISK_LIST" // list at least this many tasks' sessions
)

// The same on ext4 in a loop-mounted image, where the unfixed host died at
// the 80th schedule of an 8 MiB image and again on every restart: a small
// image starts read-only; a larger one takes writes until the headroom,
// then refuses them, and a host restarted on it (the disk still full)
// starts, reads back every acknowledged schedule and keeps serving.
// Loop devices need root (CI runs as root).
func TestFullExt4ImageRefusesWritesAcrossRestart(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test loop-mounts an ext4 image, which needs root (CI runs as root)")
	}
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Fatalf("this test needs mkfs.ext4 (e2fsprogs): %v", err)
	}
	image := func(size string) string {
		img := filepath.Join(t.TempDir(), "disk.img")
		if out, err := exec.Command("truncate", "-s", size, img).CombinedOutput(); err != nil {
			t.Fatalf("truncate: %v: %s", err, out)
		}
		if out, err := exec.Command(mkfs, "-q", "-F", img).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4: %v: %s", err, out)
		}
		return img
	}

	small := image("8M")
	r := runFullDiskChild(t, []string{"-m"}, "", 300, t.TempDir(), fullDiskImageEnv+"="+small)
	if r.OK != 0 || r.Failed == 0 || !strings.Contains(r.FirstFailure, "read-only") {
		t.Fatalf("8 MiB ext4: want every write refused as read-only, got %d ok %d failed (%q)", r.OK, r.Failed, r.FirstFailure)
	}
	if !r.ListOK || r.PrepareCode != http.StatusOK || !gjson.GetBytes(r.Healthz, "storage.readOnly").Bool() {
		t.Fatalf("8 MiB ext4: reads, prepare and healthz: list ok=%v prepare %d healthz %s", r.ListOK, r.PrepareCode, r.Healthz)
	}

	big := image("64M")
	first := runFullDiskChild(t, []string{"-m"}, "", 20000, t.TempDir(), fullDiskImageEnv+"="+big)
	if first.OK < 200 || first.Failed == 0 || !strings.Contains(first.FirstFailure, "free disk space") {
		t.Fatalf("64 MiB ext4: want writes until the headroom, then refusals saying why: %d ok %d failed (%q)", first.OK, first.Failed, first.FirstFailure)
	}
	if !first.ListOK || first.Listed != first.OK {
		t.Fatalf("64 MiB ext4: listed %d of %d acknowledged", first.Listed, first.OK)
	}
	again := runFullDiskChild(t, []string{"-m"}, "", 20000, t.TempDir(), fullDiskImageEnv+"="+big, fullDiskListEnv+"="+strconv.Itoa(first.OK))
	// What the store freed while reopening may take a few more writes.
	if again.OK > 20 || again.Failed == 0 || !strings.Contains(again.FirstFailure, "free disk space") {
		t.Fatalf("restarted on the full image: want writes refused, got %d ok %d failed (%q)", again.OK, again.Failed, again.FirstFailure)
	}
	if want := first.OK + again.OK; !again.ListOK || again.Listed != want || again.PrepareCode != http.StatusOK {
		t.Fatalf("restarted on the full image: listed %d of %d (ok=%v), prepare %d", again.Listed, want, again.ListOK, again.PrepareCode)
	}
}

func tail(s string) string {
	if len(s) > 3000 {
		return s[len(s)-3000:]
	}
	return s
}

// fullDiskChild mounts the tmpfs, schedules 4 KB tasks until writes are
// refused (or the budget ends), then checks reads, healthz and prepare.
func fullDiskChild() int {
	var size, mnt string
	var calls int
	parts := strings.SplitN(os.Getenv(fullDiskEnv), ":", 3)
	size, mnt = parts[0], parts[2]
	fmt.Sscan(parts[1], &calls)
	if img := os.Getenv(fullDiskImageEnv); img != "" {
		// A loop device needs mount(8) to set it up.
		if out, err := exec.Command("mount", "-t", "ext4", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "mount ext4 image: %v: %s\n", err, out)
			return 2
		}
	} else if err := syscall.Mount("tmpfs", mnt, "tmpfs", 0, "size="+size); err != nil {
		fmt.Fprintln(os.Stderr, "mount tmpfs:", err)
		return 2
	}
	svc, err := New(Config{DataDir: filepath.Join(mnt, "data"), Token: testToken, Clock: clockwork.NewFakeClockAt(t0)}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "new:", err)
		return 3
	}
	defer svc.Close()
	post := func(path string, body any) *bytes.Buffer {
		raw, _ := json.Marshal(body)
		req := newRequest(http.MethodPost, path, raw)
		req.Header.Set("Authorization", "Bearer "+testToken)
		return serve(svc, req).Body
	}
	var r fullDiskReport
	due := t0.Add(time.Hour).Format(time.RFC3339)
	session := func(i int) string { return fmt.Sprintf("s%03d", i/50) } // under 200 tasks each
	for i := 0; i < calls && r.Failed < 5; i++ {
		// Random text: Badger compresses its tables, and x's would not fill the disk.
		noise := make([]byte, 2900)
		_, _ = rand.Read(noise)
		task := fmt.Sprintf("%05d %s", i, base64.StdEncoding.EncodeToString(noise))
		args, _ := json.Marshal(map[string]any{"action": "schedule", "items": []map[string]any{{"dueAt": due, "task": task}}})
		res := gjson.ParseBytes(post(PathToolsExecute, ToolCall{SessionID: session(i), RequestID: fmt.Sprint("r", i), Name: "clock", Arguments: args}).Bytes())
		if res.Get("ok").Bool() {
			r.OK++
			continue
		}
		if r.Failed == 0 {
			r.FirstFailure = res.Get("error").String()
		}
		r.Failed++
	}
	r.ListOK = true
	upTo := r.OK + r.Failed
	if n, err := strconv.Atoi(os.Getenv(fullDiskListEnv)); err == nil {
		upTo = max(upTo, n) // a restarted host reads back what the first one acknowledged
	}
	for i := 0; i <= upTo/50; i++ {
		res := gjson.ParseBytes(post(PathToolsExecute, ToolCall{SessionID: session(i * 50), RequestID: "list", Name: "clock", Arguments: json.RawMessage(`{"action":"list"}`)}).Bytes())
		r.ListOK = r.ListOK && res.Get("ok").Bool()
		r.Listed += int(res.Get("items.#").Int())
	}
	r.Healthz = serve(svc, newRequest(http.MethodGet, "/healthz", nil)).Body.Bytes()
	r.Metrics = serve(svc, newRequest(http.MethodGet, "/metrics", nil)).Body.String()
	raw, _ := json.Marshal(hostapi.PrepareRequest{SessionID: "s000", RequestID: "p1"})
	req := newRequest(http.MethodPost, hostapi.PathPrepare, raw)
	req.Header.Set("Authorization", "Bearer "+testToken)
	r.PrepareCode = serve(svc, req).Code
	_ = json.NewEncoder(os.Stdout).Encode(r)
	return 0
}
