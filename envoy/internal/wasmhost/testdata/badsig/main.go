//go:build wasip1

// Command badsig exports proxy_on_vm_start with one parameter instead of
// two, which Envoy refuses ("Bad function signature").
package main

import g "github.com/chimehq/chime/envoy/internal/wasmhost/testdata/guestabi"

func main() {}

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onAlloc(size uint32) uint32 { return g.Alloc(size) }

//go:wasmexport proxy_on_vm_start
func onVMStart(id uint32) uint32 { return 1 }
