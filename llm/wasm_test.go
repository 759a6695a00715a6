//go:build !wasm

package llm

import (
	"testing"

	"github.com/chimehq/chime/internal/wasmtest"
)

// TestUnderWasm runs this package's tests (with their fuzz seed corpora)
// built for wasip1 under wazero: the filter runs this code as wasm, where
// the JSON walk is assembly (internal/reqscan/value_wasm.s).
func TestUnderWasm(t *testing.T) {
	wasmtest.Run(t, "-test.run", "^(Test|Fuzz)", "-test.skip", "^TestUnderWasm$")
}
