package main

import (
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chimehq/chime/host"
)

// TestCronCommand drives `chime cron` against a real host service.
func TestCronCommand(t *testing.T) {
	svc, err := host.New(host.Config{DataDir: t.TempDir(), Token: "tok"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()
	hostTok := []string{"--host", srv.URL, "--token", "tok"}
	cronRun := func(args ...string) (string, error) {
		return run(t, append(append([]string{"cron"}, args...), hostTok...)...)
	}

	out, err := cronRun("add", "--session", "s1", "--cron", "0 9 * * 1-5", "--tz", "Europe/Paris", "--name", "standup", "Prepare", "the", "notes.")
	if err != nil || !strings.Contains(out, "s1 j") || !strings.Contains(out, "cron 0 9 * * 1-5 (Europe/Paris)") {
		t.Fatalf("add cron: %q %v", out, err)
	}
	id := regexp.MustCompile(`j[0-9a-f]{16}`).FindString(out)
	if out, err := cronRun("add", "--session", "s2", "--every", "30m", "--target", "isolated", "poll"); err != nil || !strings.Contains(out, "every 30m0s") {
		t.Fatalf("add every: %q %v", out, err)
	}
	// Bad input: the CLI's own checks, then the host's 400 naming the field.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "--session", "s1", "--every", "5m", "--cron", "* * * * *", "x"}, "exactly one of"},
		{[]string{"add", "--session", "s1", "x"}, "exactly one of"},
		{[]string{"add", "--every", "5m", "x"}, "--session is required"},
		{[]string{"add", "--session", "s1", "--every", "5m", "--tz", "UTC", "x"}, "--tz applies to --cron only"},
		{[]string{"add", "--session", "s1", "--every", "100ms", "x"}, "400 schedule: 100ms is shorter than the minimum 1s"},
		{[]string{"add", "--session", "s1", "--cron", "0 9 * *", "x"}, "400 schedule:"},
		{[]string{"add", "--session", "s1", "--cron", "0 9 * * *", "--tz", "Nowhere/City", "x"}, "400 tz:"},
		{[]string{"add", "--session", "s1", "--at", "2020-01-01T00:00:00Z", "x"}, "has passed"},
		{[]string{"rm", "--session", "s1", "jmissing"}, "404"},
	} {
		if _, err := cronRun(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}

	out, err = cronRun("list", "--text")
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, "standup") || !strings.Contains(out, "Prepare the notes.") || !strings.Contains(out, "s2") {
		t.Fatalf("list: %q %v", out, err)
	}
	out, err = cronRun("list", "--session", "s1")
	if err != nil || strings.Contains(out, "Prepare") || strings.Contains(out, "s2") || !strings.Contains(out, id) {
		t.Fatalf("list one session without text: %q %v", out, err)
	}
	if out, err := cronRun("run", "--session", "s1", id); err != nil || !strings.Contains(out, "ran, ok") {
		t.Fatalf("run: %q %v", out, err)
	}
	if out, err := cronRun("pause", "--session", "s1", id); err != nil || !strings.Contains(out, "enabled false") {
		t.Fatalf("pause: %q %v", out, err)
	}
	if out, err := cronRun("resume", "--session", "s1", id); err != nil || !strings.Contains(out, "enabled true") {
		t.Fatalf("resume: %q %v", out, err)
	}

	// Without a token the host refuses; the data dir's token is found.
	t.Setenv("CHIME_HOST_TOKEN", "")
	t.Setenv("CHIME_DATA_DIR", t.TempDir())
	if _, err := run(t, "cron", "rm", "--session", "s1", id, "--host", srv.URL); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("rm without a token: %v", err)
	}
	if err := os.WriteFile(filepath.Join(os.Getenv("CHIME_DATA_DIR"), host.TokenFile), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "cron", "rm", "--session", "s1", id, "--host", srv.URL); err != nil || !strings.Contains(out, "removed") {
		t.Fatalf("rm: %q %v", out, err)
	}
	if out, _ := cronRun("list"); strings.Contains(out, id) {
		t.Fatalf("still listed after rm: %q", out)
	}
}
