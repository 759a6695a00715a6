//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm)

package reqscan

import "encoding/binary"

// load64 reads 8 bytes at b[i:] little-endian (portable version).
func load64(b []byte, i int) uint64 { return binary.LittleEndian.Uint64(b[i:]) }

// load64s is load64 for a string.
func load64s(s string, i int) uint64 { return binary.LittleEndian.Uint64([]byte(s[i : i+8])) }
