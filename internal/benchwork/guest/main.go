//go:build wasip1

// Command guest exposes benchwork.Editor to a wasm host: the host writes a
// body into memory from alloc, calls edit, and gets the output length.
package main

import (
	"unsafe"

	"github.com/chimehq/chime/internal/benchwork"
)

func main() {}

// keep holds the input so the GC never frees memory the host writes; out
// is the output buffer. Both are reused across calls, as the filter
// reuses its body buffers.
var keep, out []byte

var editor benchwork.Editor

//go:wasmexport alloc
func alloc(size uint32) unsafe.Pointer {
	if cap(keep) < int(size) {
		keep = make([]byte, size)
	}
	keep = keep[:size]
	return unsafe.Pointer(unsafe.SliceData(keep))
}

// edit returns the edited length, or 0 on a parse error.
//
//go:wasmexport edit
func edit(ptr unsafe.Pointer, size uint32) uint32 {
	in := unsafe.Slice((*byte)(ptr), size)
	var err error
	out, err = editor.Edit(in, out)
	if err != nil {
		return 0
	}
	return uint32(len(out))
}
