//go:build !wasm

package memeq

import (
	"testing"

	"github.com/chimehq/chime/internal/wasmtest"
)

// TestUnderWasm runs this package's tests (with their fuzz seed corpora)
// built for wasip1 under wazero, where Equal is the word-wise loop.
func TestUnderWasm(t *testing.T) {
	wasmtest.Run(t, "-test.run", "^(Test|Fuzz)", "-test.skip", "^TestUnderWasm$")
}
