//go:build linux

package wasmhost

import (
	"context"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// withGuestMemory makes every guest linear memory an anonymous mapping of
// its whole limit (1 GiB), as V8 reserves it in Envoy: memory.grow never
// copies, the kernel commits pages only as the guest touches them, and
// Free returns them, so a replaced VM leaves nothing behind. A Go slice of
// that capacity would be zeroed, and so committed, whenever the heap reused
// freed memory for it.
func withGuestMemory(ctx context.Context) context.Context {
	return experimental.WithMemoryAllocator(ctx, experimental.MemoryAllocatorFunc(mapGuestMemory))
}

func mapGuestMemory(capacity, max uint64) experimental.LinearMemory {
	if max == 0 || max > 1<<32 {
		max = 1 << 32
	}
	buf, err := syscall.Mmap(-1, 0, int(max), syscall.PROT_READ|syscall.PROT_WRITE,
		syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
	if err != nil {
		return &sliceMemory{max: max}
	}
	return &mappedMemory{buf: buf}
}

// mappedMemory is a linear memory inside one fixed mapping.
type mappedMemory struct{ buf []byte }

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if m.buf == nil || size > uint64(len(m.buf)) {
		return nil
	}
	return m.buf[:size]
}

func (m *mappedMemory) Free() {
	if m.buf != nil {
		_ = syscall.Munmap(m.buf)
		m.buf = nil
	}
}
