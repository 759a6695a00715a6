//go:build wasip1

// Command initcall calls a proxy-wasm hostcall from a package init, which
// runs inside _initialize where Envoy only allows logging and basic WASI.
package main

import g "github.com/chimehq/chime/envoy/internal/wasmhost/testdata/guestabi"

func init() { g.ProxySetTickPeriod(10) }

func main() {}

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onAlloc(size uint32) uint32 { return g.Alloc(size) }
