package proxywasm_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/chimehq/chime/plugin/internal/wasmcheck"
)

// TestEveryBindingMatchesEnvoyABI builds a module that links every host
// binding and checks each import's name and signature, and every callback
// export, against the ABI catalogue.
func TestEveryBindingMatchesEnvoyABI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a wasm module")
	}
	out := filepath.Join(t.TempDir(), "allimports.wasm")
	if err := wasmcheck.Build(".", "./internal/allimports", out); err != nil {
		t.Fatal(err)
	}
	wasm, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	imports, err := wasmcheck.Imports(context.Background(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmcheck.CheckImports(imports); err != nil {
		t.Fatal(err)
	}
	exports, err := wasmcheck.Exports(context.Background(), wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmcheck.CheckExports(exports); err != nil {
		t.Fatal(err)
	}
	// One import per bridge.Host method (chime binds neither gRPC nor
	// get_status, get_header_map_size or get_current_time_nanoseconds).
	var env []string
	for _, im := range imports {
		if im.Module == "env" {
			env = append(env, im.Name)
		}
	}
	slices.Sort(env)
	env = slices.Compact(env)
	if want := 31; len(env) != want {
		t.Fatalf("env imports = %d %q, want %d (one per bridge.Host method)", len(env), env, want)
	}
}
