package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// TestHostConfigFileApplied: `chime host --config file.yaml` listens where
// the file says, keeps its state in the file's dataDir, and injects a task
// due in 2 min because the file's clock.dueWindow is 5m (the default 60 s
// would not).
func TestHostConfigFileApplied(t *testing.T) {
	port, dataDir := freePort(t), filepath.Join(t.TempDir(), "state")
	cfgPath := filepath.Join(t.TempDir(), "chime.yaml")
	text := fmt.Sprintf("listen: 127.0.0.1:%d\ndataDir: %s\nclock:\n  dueWindow: 5m\n", port, dataDir)
	if err := os.WriteFile(cfgPath, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	hostURL := fmt.Sprintf("http://127.0.0.1:%d", port)
	// Empty values: a CHIME_DATA_DIR or CHIME_CONFIG of the caller's shell
	// must not override the file.
	startChime(t, []string{"CHIME_DATA_DIR=", "CHIME_CONFIG="}, []string{hostURL + "/healthz"}, "host", "--config", cfgPath)

	auth := map[string]string{"authorization": "Bearer " + hostToken}
	due := time.Now().Add(2 * time.Minute).UTC().Format(time.RFC3339)
	code, out := postJSON(t, hostURL+"/v1/tools/execute", auth, map[string]any{
		"sessionId": "s-cfg", "requestId": "sched-1", "name": "clock",
		"arguments": map[string]any{"action": "schedule", "taskId": "", "items": []any{map[string]any{
			"dueAt": due, "task": "check the deploy", "tool": "", "arguments": "", "repeat": "", "maxRuns": 0}}},
	})
	if code != 200 || !strings.Contains(string(out), `"ok":true`) {
		t.Fatalf("schedule: %d %s", code, out)
	}
	code, out = postJSON(t, hostURL+hostapi.PathPrepare, auth, hostapi.PrepareRequest{RequestID: "req-1", Protocol: "chat", SessionID: "s-cfg"})
	var ans hostapi.PrepareResponse
	if code != 200 || json.Unmarshal(out, &ans) != nil {
		t.Fatalf("prepare: %d %s", code, out)
	}
	if !ans.Reserved || !strings.Contains(ans.Reminders, `[scheduled task:"check the deploy"]`) {
		t.Fatalf("task due in 2 min not injected with dueWindow 5m: %s", out)
	}
	if entries, err := os.ReadDir(dataDir); err != nil || len(entries) == 0 {
		t.Fatalf("the file's dataDir %s is not used: %v %v", dataDir, entries, err)
	}
}

// TestConfigCheckCommand: `chime config check` prints ok and exits 0 for a
// good file; for a bad one it names the field and line and exits 1, and so
// does `chime host` given that file.
func TestConfigCheckCommand(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "good.yaml"), filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(good, []byte("holds:\n  max: 2m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("holds:\n  max: 2m\n  maxx: 3m\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (string, int) {
		cmd := exec.Command(chimeBin(t), args...)
		cmd.Env = append(os.Environ(), "CHIME_CONFIG=", "CHIME_NTP=off")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return string(out), exit.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	if out, code := run("config", "check", good); code != 0 || out != "ok\n" {
		t.Fatalf("good file: exit %d %q", code, out)
	}
	want := "bad.yaml:3: holds.maxx: unknown field in holds"
	if out, code := run("config", "check", bad); code != 1 || !strings.Contains(out, want) || strings.Contains(out, "ok") {
		t.Fatalf("bad file: exit %d %q", code, out)
	}
	if out, code := run("host", "--config", bad, "--addr", "127.0.0.1:0", "--data-dir", filepath.Join(dir, "data")); code != 1 || !strings.Contains(out, want) {
		t.Fatalf("host with a bad file: exit %d %q", code, out)
	}
}
