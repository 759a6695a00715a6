package bridge

import "unsafe"

// Allocations keeps every buffer handed to the host by
// proxy_on_memory_allocate reachable until the guest takes it back. The host
// writes a hostcall's result into such a buffer and returns only its
// address; without this table the GC (non-moving, but free to collect) could
// reclaim the buffer before the guest reads it, e.g. when the host allocates
// twice during one call.
//
// A hostcall hands back one or two buffers before the guest takes them, so
// the table is a short list searched from its end: a map cost the guest a
// hash, an insert and a delete per buffer.
type Allocations struct {
	live []liveBuffer
}

type liveBuffer struct {
	addr uintptr
	buf  []byte
}

// Alloc returns a buffer of size bytes (at least one, so it has an
// address) and its address, and keeps it alive. A small buffer is zeroed;
// a large one may be a recycled one (see Recycle) that the host is about
// to overwrite.
func (a *Allocations) Alloc(size uint32) ([]byte, uintptr) {
	buf := Spare(int(max(size, 1)))
	buf = buf[:cap(buf)][:max(size, 1)]
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	a.live = append(a.live, liveBuffer{addr, buf})
	return buf, addr
}

// Take releases the buffer at addr and returns its first size bytes. It
// reports false when addr was not allocated here or is too small, so a
// confused host cannot make the guest read arbitrary memory.
func (a *Allocations) Take(addr uintptr, size uint32) ([]byte, bool) {
	i := len(a.live) - 1
	for i >= 0 && a.live[i].addr != addr {
		i--
	}
	if i < 0 {
		return nil, false
	}
	buf := a.live[i].buf
	last := len(a.live) - 1
	a.live[i] = a.live[last]
	a.live[last] = liveBuffer{}
	a.live = a.live[:last]
	if uint64(size) > uint64(len(buf)) {
		return nil, false
	}
	// The capacity stays: a reuse class's buffer goes back to Recycle with
	// its class's size, and the room past size is this buffer's alone.
	return buf[:size], true
}

// Reset drops buffers the host allocated but never returned. It is called
// when a top-level callback starts, when none can be in flight.
func (a *Allocations) Reset() {
	clear(a.live)
	a.live = a.live[:0]
}

// Len is the number of buffers kept alive.
func (a *Allocations) Len() int { return len(a.live) }

// Large buffers (request bodies, mostly) are reused: in a wasm guest's
// small heap every fresh megabyte runs the GC about once, which costs
// more than the filter's whole edit of that megabyte.
const (
	reuseMin  = 64 << 10 // smaller buffers come from the allocator
	maxSpares = 8
)

// spares are large buffers handed back by Recycle, free for reuse.
var spares [][]byte

// Spare returns an empty buffer with room for n bytes: the smallest
// recycled one that fits, or a new one. Its bytes are not zeroed.
func Spare(n int) []byte {
	if c := smallClass(n); c >= 0 {
		if l := smalls[c]; len(l) > 0 {
			b := l[len(l)-1]
			l[len(l)-1] = nil
			smalls[c] = l[:len(l)-1]
			return b[:0]
		}
		return make([]byte, 0, smallMin<<c)
	}
	if n >= reuseMin {
		best := -1
		for i, b := range spares {
			if cap(b) >= n && (best < 0 || cap(b) < cap(spares[best])) {
				best = i
			}
		}
		if best >= 0 {
			b := spares[best]
			spares[best] = spares[len(spares)-1]
			spares[len(spares)-1] = nil
			spares = spares[:len(spares)-1]
			return b[:0]
		}
		// Room for what an edit adds, so the buffer fits a grown body later.
		return make([]byte, 0, n+n/8)
	}
	return make([]byte, 0, n)
}

// Buffers of smallMin up to reuseMin bytes (the bodies of most requests,
// a few KB with the tool schemas the filter adds, header maps, shared
// data values and short JSON answers) are
// kept per power-of-two class, up to maxSmalls each: every request reusing
// them instead of allocating leaves the guest's GC far less to do.
const (
	smallMin  = 64
	maxSmalls = 16
)

var smalls [10][][]byte // 64 to 512 bytes, 1, 2, 4, 8, 16, 32 KiB

// smallClass is the class whose buffers hold n bytes, or -1 when n is
// below smallMin or at least reuseMin.
func smallClass(n int) int {
	if n < smallMin || n >= reuseMin {
		return -1
	}
	c := 0
	for smallMin<<c < n {
		c++
	}
	return c
}

// Recycle hands a buffer back for reuse; ones below smallMin are left to
// the GC, as are buffers past the classes' limits. The caller must hold
// no reference to b (nor to any slice of it) afterwards. A buffer already
// recycled is not taken twice.
func Recycle(b []byte) {
	b = b[:cap(b)]
	if c := smallClass(cap(b)); c >= 0 {
		if smallMin<<c != cap(b) || len(smalls[c]) >= maxSmalls {
			return // not of a class's exact size: Spare could hand out too little
		}
		for _, s := range smalls[c] {
			if unsafe.SliceData(s[:cap(s)]) == unsafe.SliceData(b) {
				return
			}
		}
		smalls[c] = append(smalls[c], b[:0])
		return
	}
	if cap(b) < reuseMin || len(spares) >= maxSpares {
		return
	}
	for _, s := range spares {
		if unsafe.SliceData(s) == unsafe.SliceData(b) {
			return
		}
	}
	spares = append(spares, b[:0])
}
