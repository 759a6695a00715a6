// Package wasmcheck builds Go proxy-wasm modules and checks that their
// imports are what released Envoy provides (docs/local-runtime.md: modules must load in
// Envoy 1.33–1.38 and in `chime proxy`'s envoy-1.38 profile), against the
// shared ABI catalogue. It is used by tests only.
package wasmcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

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

func catalogueTypes(ts []api.ValueType) []abi.ValueType {
	out := make([]abi.ValueType, len(ts))
	for i, t := range ts {
		out[i] = abi.ValueType(t)
	}
	return out
}

// Imports compiles the module with wazero and lists its imported functions.
func Imports(ctx context.Context, wasm []byte) ([]abi.Func, error) {
	return functions(ctx, wasm, func(m wazero.CompiledModule) []abi.Func {
		var out []abi.Func
		for _, f := range m.ImportedFunctions() {
			mod, name, _ := f.Import()
			out = append(out, abi.Func{Module: mod, Name: name, Params: catalogueTypes(f.ParamTypes()), Results: catalogueTypes(f.ResultTypes())})
		}
		return out
	})
}

// Exports lists the module's exported functions.
func Exports(ctx context.Context, wasm []byte) ([]abi.Func, error) {
	return functions(ctx, wasm, func(m wazero.CompiledModule) []abi.Func {
		var out []abi.Func
		for name, f := range m.ExportedFunctions() {
			out = append(out, abi.Func{Name: name, Params: catalogueTypes(f.ParamTypes()), Results: catalogueTypes(f.ResultTypes())})
		}
		return out
	})
}

func functions(ctx context.Context, wasm []byte, list func(wazero.CompiledModule) []abi.Func) ([]abi.Func, error) {
	r := wazero.NewRuntime(ctx)
	defer r.Close(ctx)
	m, err := r.CompileModule(ctx, wasm)
	if err != nil {
		return nil, fmt.Errorf("wasmcheck: compile: %w", err)
	}
	return list(m), nil
}

// CheckImports reports every import Envoy 1.38 would not satisfy: WASI
// functions outside abi.WASIEnvoy138, env functions that are not proxy_*
// host functions of ABI v0.2.1, wrong signatures, and other modules.
func CheckImports(imports []abi.Func) error {
	var errs []error
	for _, im := range imports {
		var known []abi.Func
		switch im.Module {
		case abi.ModuleWASI:
			known = abi.WASIEnvoy138
		case abi.ModuleEnv:
			if !strings.HasPrefix(im.Name, "proxy_") {
				errs = append(errs, fmt.Errorf("%s is not a proxy_* host function", im))
				continue
			}
			known = abi.HostFunctions
		default:
			errs = append(errs, fmt.Errorf("%s: unknown import module %q", im, im.Module))
			continue
		}
		want, ok := abi.Lookup(known, im.Name)
		switch {
		case !ok && im.Module == abi.ModuleWASI:
			errs = append(errs, fmt.Errorf("%s is not provided by Envoy 1.38", im))
		case !ok:
			errs = append(errs, fmt.Errorf("%s is not an ABI v0.2.1 host function", im))
		case !want.SameSignature(im.Params, im.Results):
			errs = append(errs, fmt.Errorf("%s has signature %v → %v, want %v → %v", im, im.Params, im.Results, want.Params, want.Results))
		}
	}
	return errors.Join(errs...)
}

// CheckExports reports every ABI v0.2.1 callback the module lacks or
// exports with a signature Envoy refuses, and a missing version marker.
func CheckExports(exports []abi.Func) error {
	var errs []error
	if _, ok := abi.Lookup(exports, abi.V021.Marker()); !ok {
		errs = append(errs, fmt.Errorf("missing export %s", abi.V021.Marker()))
	}
	for _, cb := range abi.GuestCallbacks {
		got, ok := abi.Lookup(exports, cb.Name)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("missing export %s", cb.Name))
		case !cb.SameSignature(got.Params, got.Results):
			errs = append(errs, fmt.Errorf("export %s has signature %v → %v, want %v → %v", cb.Name, got.Params, got.Results, cb.Params, cb.Results))
		}
	}
	return errors.Join(errs...)
}
