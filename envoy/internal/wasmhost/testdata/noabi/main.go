//go:build wasip1

// Command noabi is a reactor that exports no proxy_abi_version marker.
package main

func main() {}

//go:wasmexport proxy_on_memory_allocate
func onAlloc(size uint32) uint32 { return 0 }
