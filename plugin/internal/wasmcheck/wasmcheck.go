// Package wasmcheck builds Go proxy-wasm modules and checks that their
// imports are what released Envoy provides (SPEC §13: modules must load in
// Envoy 1.33–1.38 and in `chime proxy`'s envoy-1.38 profile). It is used by
// tests only.
package wasmcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// EnvoyWASI is every WASI function Envoy 1.38 registers: proxy-wasm-cpp-host's
// FOR_ALL_WASI_FUNCTIONS before it grew the full Go list (cpp-host commit
// 94091cd, after Envoy 1.38). Of these, poll_oneoff answers ENOSYS.
var EnvoyWASI = []string{
	"fd_write", "fd_read", "fd_seek", "fd_close", "fd_fdstat_get", "fd_fdstat_set_flags",
	"environ_get", "environ_sizes_get", "args_get", "args_sizes_get", "clock_time_get",
	"random_get", "sched_yield", "poll_oneoff", "proc_exit", "path_open",
	"fd_prestat_get", "fd_prestat_dir_name",
}

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

func words(n int) []api.ValueType { return slices.Repeat([]api.ValueType{i32}, n) }

// EnvoyHostFunctions maps every proxy_* function Envoy registers for ABI
// v0.2.1 to its parameter types (all return one i32 status).
var EnvoyHostFunctions = map[string][]api.ValueType{
	"proxy_log":                          words(3),
	"proxy_get_log_level":                words(1),
	"proxy_get_status":                   words(3),
	"proxy_get_property":                 words(4),
	"proxy_set_property":                 words(4),
	"proxy_send_local_response":          words(8),
	"proxy_get_shared_data":              words(5),
	"proxy_set_shared_data":              words(5),
	"proxy_register_shared_queue":        words(3),
	"proxy_resolve_shared_queue":         words(5),
	"proxy_dequeue_shared_queue":         words(3),
	"proxy_enqueue_shared_queue":         words(3),
	"proxy_get_header_map_value":         words(5),
	"proxy_add_header_map_value":         words(5),
	"proxy_replace_header_map_value":     words(5),
	"proxy_remove_header_map_value":      words(3),
	"proxy_get_header_map_pairs":         words(3),
	"proxy_set_header_map_pairs":         words(3),
	"proxy_get_header_map_size":          words(2),
	"proxy_get_buffer_status":            words(3),
	"proxy_get_buffer_bytes":             words(5),
	"proxy_set_buffer_bytes":             words(5),
	"proxy_http_call":                    words(10),
	"proxy_grpc_call":                    words(12),
	"proxy_grpc_stream":                  words(9),
	"proxy_grpc_close":                   words(1),
	"proxy_grpc_cancel":                  words(1),
	"proxy_grpc_send":                    words(4),
	"proxy_set_tick_period_milliseconds": words(1),
	"proxy_get_current_time_nanoseconds": words(1),
	"proxy_define_metric":                words(4),
	"proxy_increment_metric":             {i32, i64},
	"proxy_record_metric":                {i32, i64},
	"proxy_get_metric":                   words(2),
	"proxy_set_effective_context":        words(1),
	"proxy_done":                         words(0),
	"proxy_call_foreign_function":        words(6),
	"proxy_continue_stream":              words(1),
	"proxy_close_stream":                 words(1),
}

// Build compiles the Go package pkg (a path or import path, resolved from
// dir) to a wasip1 reactor module at out.
func Build(dir, pkg, out string) error {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("wasmcheck: go toolchain not found: %w", err)
	}
	cmd := exec.Command(gobin, "build", "-buildmode=c-shared", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("wasmcheck: build %s: %w\n%s", pkg, err, b)
	}
	return nil
}

// Import is one imported function.
type Import struct {
	Module, Name string
	Params       []api.ValueType
	Results      []api.ValueType
}

func (i Import) String() string { return i.Module + "." + i.Name }

// Imports compiles the module with wazero and lists its imported functions.
func Imports(ctx context.Context, wasm []byte) ([]Import, error) {
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	m, err := r.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("wasmcheck: compile: %w", err)
	}
	var out []Import
	for _, f := range m.ImportedFunctions() {
		mod, name, _ := f.Import()
		out = append(out, Import{mod, name, f.ParamTypes(), f.ResultTypes()})
	}
	return out, nil
}

// CheckImports reports every import Envoy 1.38 would not satisfy: WASI
// functions outside EnvoyWASI, env functions that are not proxy_* host
// functions of ABI v0.2.1 or have the wrong signature, and other modules.
func CheckImports(imports []Import) error {
	var errs []error
	for _, im := range imports {
		switch im.Module {
		case "wasi_snapshot_preview1":
			if !slices.Contains(EnvoyWASI, im.Name) {
				errs = append(errs, fmt.Errorf("%s is not provided by Envoy 1.38", im))
			}
		case "env":
			params, ok := EnvoyHostFunctions[im.Name]
			switch {
			case !strings.HasPrefix(im.Name, "proxy_"):
				errs = append(errs, fmt.Errorf("%s is not a proxy_* host function", im))
			case !ok:
				errs = append(errs, fmt.Errorf("%s is not an ABI v0.2.1 host function", im))
			case !slices.Equal(im.Params, params) || !slices.Equal(im.Results, []api.ValueType{i32}):
				errs = append(errs, fmt.Errorf("%s has signature %v → %v, want %v → [i32]",
					im, names(im.Params), names(im.Results), names(params)))
			}
		default:
			errs = append(errs, fmt.Errorf("%s: unknown import module %q", im, im.Module))
		}
	}
	return errors.Join(errs...)
}

func names(ts []api.ValueType) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = api.ValueTypeName(t)
	}
	return out
}
