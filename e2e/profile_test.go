package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chimehq/chime/envoy"
)

// The suite runs chime.wasm under one WASI profile: envoy-1.38 (released
// Envoy) unless CHIME_E2E_WASI_PROFILE names another. `make test` runs the
// whole suite under envoy-1.38 and then the key tests (E2E_139 in the
// Makefile) again under envoy-1.39, so both profiles are covered without
// running everything twice.
func e2eProfile() string {
	if p := os.Getenv("CHIME_E2E_WASI_PROFILE"); p != "" {
		return p
	}
	return envoy.ProfileEnvoy138
}

// TestWASIProfileInEffect proves the profile the suite names is the one
// the runtime uses: a module importing WASI functions only Envoy 1.39
// provides (fd_filestat_get, fd_readdir) starts under envoy-1.39 and is
// refused under envoy-1.38, naming them.
func TestWASIProfileInEffect(t *testing.T) {
	dir := t.TempDir()
	code := filepath.Join(dir, "wasiextra.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", code, "./envoy/internal/wasmhost/testdata/wasiextra")
	cmd.Dir = repoRoot()
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build guest: %v\n%s", err, out)
	}
	cfg := filepath.Join(dir, "envoy.yaml")
	yaml := fmt.Sprintf(`bootstrap_extensions:
- name: envoy.bootstrap.wasm
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.wasm.v3.WasmService
    singleton: true
    config:
      name: wasiextra
      vm_config: { vm_id: wasiextra, runtime: envoy.wasm.runtime.v8, code: { local: { filename: %q } } }
`, code)
	if err := os.WriteFile(cfg, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	profile := e2eProfile()
	srv, err := envoy.Start(context.Background(), envoy.Options{ConfigPath: cfg, WASIProfile: profile, Workers: 1,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil {
		defer srv.Close()
	}
	switch profile {
	case envoy.ProfileEnvoy138:
		if err == nil || !strings.Contains(err.Error(), "fd_filestat_get") {
			t.Fatalf("under %s: start error %v, want the missing 1.39 imports named", profile, err)
		}
	case envoy.ProfileEnvoy139, envoy.ProfileEnvoyLatest:
		if err != nil {
			t.Fatalf("under %s: %v", profile, err)
		}
	default:
		t.Fatalf("CHIME_E2E_WASI_PROFILE=%q is not a profile (%s, %s or %s)", profile, envoy.ProfileEnvoy138, envoy.ProfileEnvoy139, envoy.ProfileEnvoyLatest)
	}
}
