//go:build wasip1

// Command wasiextra imports wasi_snapshot_preview1.fd_filestat_get and
// fd_readdir (with its u64 cookie), which Envoy 1.38's host lacks and newer
// proxy-wasm-cpp-host provides.
package main

import g "github.com/chimehq/chime/envoy/internal/wasmhost/testdata/guestabi"

func main() {}

//go:wasmimport wasi_snapshot_preview1 fd_filestat_get
func fdFilestatGet(fd, buf uint32) uint32

//go:wasmimport wasi_snapshot_preview1 fd_readdir
func fdReaddir(fd, buf, bufLen uint32, cookie uint64, bufused uint32) uint32

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onAlloc(size uint32) uint32 { return g.Alloc(size) }

//go:wasmexport proxy_on_vm_start
func onVMStart(id, size uint32) uint32 {
	var buf [64]byte
	var used uint32
	g.Log("filestat " + itoa(fdFilestatGet(9, g.Addr(buf[:]))))
	g.Log("readdir " + itoa(fdReaddir(3, g.Addr(buf[:]), 64, 0, g.Ptr(&used))))
	return 1
}

func itoa(v uint32) string {
	if v < 10 {
		return string(rune('0' + v))
	}
	return itoa(v/10) + string(rune('0'+v%10))
}
