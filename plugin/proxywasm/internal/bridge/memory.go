package bridge

import "unsafe"

// Allocations keeps every buffer handed to the host by
// proxy_on_memory_allocate reachable until the guest takes it back. The host
// writes a hostcall's result into such a buffer and returns only its
// address; without this table the GC (non-moving, but free to collect) could
// reclaim the buffer before the guest reads it, e.g. when the host allocates
// twice during one call.
type Allocations struct {
	live map[uintptr][]byte
}

// Alloc returns a zeroed buffer of size bytes (at least one, so it has an
// address) and its address, and keeps it alive.
func (a *Allocations) Alloc(size uint32) ([]byte, uintptr) {
	buf := make([]byte, max(size, 1))
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	if a.live == nil {
		a.live = make(map[uintptr][]byte)
	}
	a.live[addr] = buf
	return buf, addr
}

// Take releases the buffer at addr and returns its first size bytes. It
// reports false when addr was not allocated here or is too small, so a
// confused host cannot make the guest read arbitrary memory.
func (a *Allocations) Take(addr uintptr, size uint32) ([]byte, bool) {
	buf, ok := a.live[addr]
	if !ok {
		return nil, false
	}
	delete(a.live, addr)
	if uint64(size) > uint64(len(buf)) {
		return nil, false
	}
	return buf[:size:size], true
}

// Reset drops buffers the host allocated but never returned. It is called
// when a top-level callback starts, when none can be in flight.
func (a *Allocations) Reset() { clear(a.live) }

// Len is the number of buffers kept alive.
func (a *Allocations) Len() int { return len(a.live) }
