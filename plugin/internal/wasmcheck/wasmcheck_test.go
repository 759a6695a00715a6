package wasmcheck

import (
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"
)

func TestCheckImports(t *testing.T) {
	good := []Import{
		{"wasi_snapshot_preview1", "poll_oneoff", words(4), words(1)},
		{"env", "proxy_increment_metric", []api.ValueType{i32, i64}, words(1)},
		{"env", "proxy_done", nil, words(1)},
	}
	if err := CheckImports(good); err != nil {
		t.Fatalf("CheckImports(good) = %v", err)
	}
	bad := map[string]Import{
		"not provided by Envoy 1.38":  {"wasi_snapshot_preview1", "clock_res_get", words(2), words(1)},
		"not a proxy_* host function": {"env", "malloc", words(1), words(1)},
		"not an ABI v0.2.1":           {"env", "proxy_on_tick", words(1), words(1)},
		"has signature":               {"env", "proxy_log", words(2), words(1)},
		"unknown import module":       {"gojs", "runtime.ticks", nil, nil},
	}
	for want, im := range bad {
		err := CheckImports(append(good, im))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckImports(+%s) = %v, want %q", im, err, want)
		}
	}
}
