//go:build !wasm

package reqscan

import (
	"testing"

	"github.com/chimehq/chime/internal/wasmtest"
)

// TestUnderWasm runs this package's tests (with their fuzz seed corpora)
// built for wasip1 under wazero, where the walk is value_wasm.s.
func TestUnderWasm(t *testing.T) {
	wasmtest.Run(t, "-test.run", "^(Test|Fuzz)", "-test.skip", "^TestUnderWasm$")
}
