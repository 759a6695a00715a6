package wasmcheck

import (
	"strings"
	"testing"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

func fn(module, name string, params []abi.ValueType, results ...abi.ValueType) abi.Func {
	return abi.Func{Module: module, Name: name, Params: params, Results: results}
}

var (
	i32, i64 = abi.I32, abi.I64
	one      = []abi.ValueType{i32}
	four     = []abi.ValueType{i32, i32, i32, i32}
)

func TestCheckImports(t *testing.T) {
	good := []abi.Func{
		fn(abi.ModuleWASI, "poll_oneoff", four, i32),
		fn(abi.ModuleEnv, "proxy_increment_metric", []abi.ValueType{i32, i64}, i32),
		fn(abi.ModuleEnv, "proxy_done", nil, i32),
	}
	if err := CheckImports(good); err != nil {
		t.Fatalf("CheckImports(good) = %v", err)
	}
	bad := map[string]abi.Func{
		"not provided by Envoy 1.38":  fn(abi.ModuleWASI, "clock_res_get", []abi.ValueType{i32, i32}, i32),
		"not a proxy_* host function": fn(abi.ModuleEnv, "malloc", one, i32),
		"not an ABI v0.2.1":           fn(abi.ModuleEnv, "proxy_on_tick", one, i32),
		"has signature":               fn(abi.ModuleEnv, "proxy_log", []abi.ValueType{i32, i32}, i32),
		"unknown import module":       fn("gojs", "runtime.ticks", nil),
	}
	bad["has signature (WASI)"] = fn(abi.ModuleWASI, "fd_seek", four, i32)
	for want, im := range bad {
		err := CheckImports(append(good, im))
		if want, _, _ = strings.Cut(want, " ("); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckImports(+%s) = %v, want %q", im, err, want)
		}
	}
}

func TestCheckExports(t *testing.T) {
	exports := append([]abi.Func{{Name: abi.V021.Marker()}}, abi.GuestCallbacks...)
	if err := CheckExports(exports); err != nil {
		t.Fatalf("CheckExports(all callbacks) = %v", err)
	}
	exports[1] = abi.Func{Name: exports[1].Name, Params: one}
	err := CheckExports(exports[:len(exports)-1])
	if err == nil || !strings.Contains(err.Error(), "missing export "+abi.GuestCallbacks[len(abi.GuestCallbacks)-1].Name) ||
		!strings.Contains(err.Error(), "export "+abi.GuestCallbacks[0].Name+" has signature") {
		t.Fatalf("CheckExports(broken) = %v", err)
	}
}
