package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
)

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// run executes the chime command line in process and returns its stdout.
func run(t *testing.T, args ...string) (string, error) {
	t.Helper()
	root := newRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.ExecuteContext(context.Background())
	return out.String(), err
}

func TestConfigCheck(t *testing.T) {
	t.Setenv(host.ConfigEnv, "")
	good := writeFile(t, "good.yaml", "holds:\n  max: 2m\n")
	if out, err := run(t, "config", "check", good); err != nil || out != "ok\n" {
		t.Fatalf("good file: %q %v", out, err)
	}
	example, _ := filepath.Abs("../../chime.example.yaml")
	if out, err := run(t, "config", "check", example); err != nil || out != "ok\n" {
		t.Fatalf("chime.example.yaml: %q %v", out, err)
	}

	bad := writeFile(t, "bad.yaml", "clock:\n  dueWindow: 60s\nholds:\n  max: 90\n  nonStreamin: false\n")
	out, err := run(t, "config", "check", bad)
	if err == nil || strings.Contains(out, "ok") {
		t.Fatalf("bad file accepted: %q", out)
	}
	for _, want := range []string{"bad.yaml:4: holds.max: \"90\" is not a duration", "bad.yaml:5: holds.nonStreamin: unknown field in holds"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}

	// A setting that needs envoy.yaml changed too is valid, with a warning.
	long := writeFile(t, "long.yaml", "guards: {maxChainDuration: 30m}\n")
	if out, err := run(t, "config", "check", long); err != nil || !strings.HasPrefix(out, "warning: guards.maxChainDuration") || !strings.HasSuffix(out, "\nok\n") {
		t.Fatalf("warning: %q %v", out, err)
	}

	if _, err := run(t, "config", "check"); err == nil || !strings.Contains(err.Error(), host.ConfigEnv) {
		t.Fatalf("no file: %v", err)
	}
	t.Setenv(host.ConfigEnv, bad)
	if _, err := run(t, "config", "check"); err == nil || !strings.Contains(err.Error(), "holds.max") {
		t.Fatalf("CHIME_CONFIG not checked: %v", err)
	}
	t.Setenv(host.ConfigEnv, good)
	if out, err := run(t, "config", "check"); err != nil || out != "ok\n" {
		t.Fatalf("CHIME_CONFIG good: %q %v", out, err)
	}
	if _, err := run(t, "config", "check", filepath.Join(t.TempDir(), "nope.yaml")); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("missing file: %v", err)
	}
	if _, err := run(t, "config", "check", good, good); err == nil {
		t.Fatal("two files accepted")
	}
}

// TestHostFlagsPrecedence: defaults < file < env < flags (docs/configuration.md).
func TestHostFlagsPrecedence(t *testing.T) {
	for _, k := range []string{"CHIME_DATA_DIR", "CHIME_NTP", "CHIME_NTP_SERVERS", "CHIME_NTP_STALE_AFTER", host.ConfigEnv} {
		t.Setenv(k, "")
	}
	file := writeFile(t, "chime.yaml", "listen: 127.0.0.1:9999\ndataDir: /from/file\nholds: {max: 2m}\n")
	parse := func(args ...string) host.Config {
		t.Helper()
		var f hostFlags
		cmd := &cobra.Command{Use: "x"}
		f.register(cmd, "addr")
		if err := cmd.ParseFlags(args); err != nil {
			t.Fatal(err)
		}
		cfg, err := f.hostConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if cfg := parse(); cfg.Addr != host.DefaultAddr || cfg.DataDir != host.DefaultDataDir || cfg.HoldMax != host.DefaultHoldMax {
		t.Fatalf("defaults: %+v", cfg)
	}
	if cfg := parse("--config", file); cfg.Addr != "127.0.0.1:9999" || cfg.DataDir != "/from/file" || cfg.HoldMax != 2*time.Minute {
		t.Fatalf("file: %+v", cfg)
	}
	t.Setenv("CHIME_DATA_DIR", "/from/env")
	if cfg := parse("--config", file); cfg.DataDir != "/from/env" || cfg.Addr != "127.0.0.1:9999" {
		t.Fatalf("env over file: %+v", cfg)
	}
	if cfg := parse("--config", file, "--data-dir", "/from/flag", "--addr", "127.0.0.1:7777"); cfg.DataDir != "/from/flag" || cfg.Addr != "127.0.0.1:7777" || cfg.HoldMax != 2*time.Minute {
		t.Fatalf("flags over env: %+v", cfg)
	}
	t.Setenv(host.ConfigEnv, file)
	if cfg := parse(); cfg.HoldMax != 2*time.Minute {
		t.Fatalf("CHIME_CONFIG: %+v", cfg)
	}
	var f hostFlags
	f.config = filepath.Join(t.TempDir(), "missing.yaml")
	if _, err := f.hostConfig(); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Fatalf("missing --config file: %v", err)
	}
}

// TestUpFlags: in `chime up`, --config is the host config file and -c the
// Envoy bootstrap (as in `chime proxy -c`).
func TestUpFlags(t *testing.T) {
	cmd := newUpCommand()
	if err := cmd.ParseFlags([]string{"-c", "my-envoy.yaml", "--config", "chime.yaml"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := cmd.Flags().GetString("envoy-config"); v != "my-envoy.yaml" {
		t.Errorf("envoy config %q", v)
	}
	if v, _ := cmd.Flags().GetString("config"); v != "chime.yaml" {
		t.Errorf("host config %q", v)
	}
}
