// Package wasmtest runs a package's tests compiled for wasip1 under
// wazero, the way the filter runs: code that differs between the wasm
// build and the native one (assembly, GOARCH switches) is tested where it
// ships. It is used by tests only.
package wasmtest

import (
	"context"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
	"github.com/tetratelabs/wazero/sys"
)

// Run builds the tests of the package in the current directory for
// wasip1 and runs them under wazero with args (go test's -test.* flags),
// the directory mounted as the module's root so relative testdata paths
// resolve and a fresh one as /tmp. It fails t with the output if they
// fail.
func Run(t *testing.T, args ...string) {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "pkg.test.wasm")
	build := exec.Command("go", "test", "-c", "-o", bin, ".")
	build.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the tests for wasip1: %v\n%s", err, out)
	}
	code, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	var out strings.Builder
	cfg := wazero.NewModuleConfig().
		WithArgs(append([]string{"pkg.test"}, args...)...).
		WithEnv("PWD", "/").WithEnv("TMPDIR", "/tmp").
		WithFSConfig(wazero.NewFSConfig().WithReadOnlyDirMount(dir, "/").WithDirMount(t.TempDir(), "/tmp")).
		WithStdout(&out).WithStderr(&out).
		WithSysWalltime().WithSysNanotime().WithSysNanosleep().
		WithRandSource(rand.Reader)
	_, err = rt.InstantiateWithConfig(ctx, code, cfg)
	var exit *sys.ExitError
	if errors.As(err, &exit) && exit.ExitCode() == 0 {
		err = nil
	}
	if err != nil {
		t.Fatalf("the tests under wasm: %v\n%s", err, out.String())
	}
	t.Logf("the tests under wasm:\n%s", out.String())
}
