// Command plugin is chime.wasm, the proxy-wasm HTTP filter (docs/architecture.md). Build:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o chime.wasm ./plugin
//
// The filter logic lives in plugin/internal/filter.
package main

import (
	// The guest has no file system: embed the IANA zone database so every
	// zone renders in the time tag, DST included (docs/time.md#time-tag).
	_ "time/tzdata"

	"github.com/chimehq/chime/plugin/internal/filter"
	"github.com/chimehq/chime/plugin/proxywasm"
)

func init() { proxywasm.SetVMContext(filter.NewVMContext()) }

// main is never run in a c-shared (reactor) module; the host drives the
// exported callbacks after _initialize.
func main() {}
