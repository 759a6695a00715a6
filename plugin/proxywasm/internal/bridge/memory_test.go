package bridge

import "testing"

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
