package proxywasm

import (
	"math/rand/v2"
	"testing"
)

// TestStreamTable holds streamTable to a map over random puts, gets and
// deletes of ids that collide in the ring.
func TestStreamTable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tab streamTable
	ref := map[uint32]*streamEntry{}
	for i := 0; i < 200000; i++ {
		id := uint32(r.IntN(4 * streamSlots))
		switch r.IntN(3) {
		case 0:
			e := &streamEntry{pluginID: uint32(i)}
			tab.put(id, e)
			ref[id] = e
		case 1:
			tab.del(id)
			delete(ref, id)
		}
		got, ok := tab.get(id)
		want, wok := ref[id]
		if ok != wok || got != want {
			t.Fatalf("step %d: get(%d) = %p %v, want %p %v", i, id, got, ok, want, wok)
		}
	}
	for id, want := range ref {
		if got, ok := tab.get(id); !ok || got != want {
			t.Fatalf("get(%d) = %p %v, want %p", id, got, ok, want)
		}
	}
}
