package bridge

import (
	"testing"
	"unsafe"
)

func TestAllocationsTakeOnce(t *testing.T) {
	var a Allocations
	buf, addr := a.Alloc(8)
	copy(buf, "abcdefgh")
	_, addr2 := a.Alloc(0)
	if a.Len() != 2 {
		t.Fatalf("Len = %d, want 2", a.Len())
	}
	got, ok := a.Take(addr, 3)
	if !ok || string(got) != "abc" {
		t.Fatalf("Take = %q, %v", got, ok)
	}
	if _, ok := a.Take(addr, 3); ok {
		t.Fatal("second Take of the same buffer succeeded")
	}
	if _, ok := a.Take(addr2, 2); ok {
		t.Fatal("Take larger than the allocation succeeded")
	}
	if _, ok := a.Take(12345, 0); ok {
		t.Fatal("Take of an unknown address succeeded")
	}
	a.Alloc(4)
	a.Reset()
	if a.Len() != 0 {
		t.Fatalf("Len after Reset = %d", a.Len())
	}
}

func TestSpareReusesRecycledBuffers(t *testing.T) {
	spares = nil
	b := Spare(reuseMin)
	if cap(b) < reuseMin || len(b) != 0 {
		t.Fatalf("Spare: len %d cap %d", len(b), cap(b))
	}
	b = append(b, "body"...)
	Recycle(b)
	Recycle(b[:1]) // the same buffer again: kept once
	Recycle(make([]byte, 10))
	if len(spares) != 1 {
		t.Fatalf("%d spares, want 1", len(spares))
	}
	var a Allocations
	got, addr := a.Alloc(reuseMin)
	if unsafe.SliceData(got) != unsafe.SliceData(b) || len(got) != reuseMin {
		t.Fatal("Alloc of a large buffer did not reuse the recycled one")
	}
	if _, ok := a.Take(addr, 4); !ok || len(spares) != 0 {
		t.Fatalf("Take failed or the spare is still listed (%d)", len(spares))
	}
	if c := Spare(2 * reuseMin); cap(c) < 2*reuseMin || unsafe.SliceData(c) == unsafe.SliceData(b) {
		t.Fatal("Spare handed out a buffer too small")
	}
	for i := 0; i < maxSpares+2; i++ {
		Recycle(make([]byte, reuseMin))
	}
	if len(spares) != maxSpares {
		t.Fatalf("%d spares kept, want at most %d", len(spares), maxSpares)
	}
	spares = nil
}

// TestTakenBufferRecycles: a body the host wrote through Alloc, taken back
// and recycled when the stream is done, is the buffer the next body of
// its class gets (request bodies of 256 B to 64 KiB, every request).
func TestTakenBufferRecycles(t *testing.T) {
	smalls = [len(smalls)][][]byte{}
	var a Allocations
	_, addr := a.Alloc(17854) // Claude Code's first request
	body, ok := a.Take(addr, 17854)
	if !ok || len(body) != 17854 {
		t.Fatalf("Take: %d bytes, %v", len(body), ok)
	}
	Recycle(body)
	next, _ := a.Alloc(20000)
	if unsafe.SliceData(next) != unsafe.SliceData(body) {
		t.Fatal("the next body of the same class got a fresh buffer, not the recycled one")
	}
}
