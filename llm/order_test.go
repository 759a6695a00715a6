package llm

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestEditOrder: the insertion sort of a few edits orders them as the
// stable generic sort does, ties included.
func TestEditOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := range 20 {
		for range 200 {
			r := &Request{}
			for range n {
				s := rng.IntN(4)
				r.edits = append(r.edits, edit{start: s, end: s + rng.IntN(2), member: rng.IntN(2) == 0})
			}
			want := make([]int, n)
			for i := range want {
				want[i] = i
			}
			slices.SortStableFunc(want, r.compareEdits)
			if got := r.order(); !slices.Equal(got, want) {
				t.Fatalf("%d edits %+v: order %v, want %v", n, r.edits, got, want)
			}
		}
	}
}
