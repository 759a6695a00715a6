package e2e

import (
	"fmt"
	"slices"
	"testing"
)

// TestBalancedOrders checks the benchmark's round orders: each a
// permutation, every stack in every position and right after every other
// stack equally often, never twice in a row across rounds, and the last
// round (the warm-up's order) not ending with the first round's first
// stack.
func TestBalancedOrders(t *testing.T) {
	for _, n := range []int{3, 4, 5, 6} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rows := balancedOrders(n)
			if len(rows)%n != 0 {
				t.Fatalf("%d rows for %d stacks", len(rows), n)
			}
			pos := map[[2]int]int{}   // stack, position
			after := map[[2]int]int{} // stack, the one before it in a round
			for i, row := range rows {
				if len(row) != n || !slices.Equal(slices.Sorted(slices.Values(row)), []int{0, 1, 2, 3, 4, 5}[:n]) {
					t.Fatalf("row %d %v is not a permutation of %d stacks", i, row, n)
				}
				for p, k := range row {
					pos[[2]int{k, p}]++
					if p > 0 {
						after[[2]int{k, row[p-1]}]++
					}
				}
				if i > 0 && rows[i-1][n-1] == row[0] {
					t.Errorf("stack %d runs twice in a row at rounds %d-%d: %v", row[0], i-1, i, rows)
				}
			}
			if last := rows[len(rows)-1]; last[n-1] == rows[0][0] {
				t.Errorf("the warm-up ends with the first round's first stack: %v", rows)
			}
			want := len(rows) / n
			for k := range n {
				for p := range n {
					if pos[[2]int{k, p}] != want {
						t.Errorf("stack %d in position %d %d times, want %d: %v", k, p, pos[[2]int{k, p}], want, rows)
					}
				}
				for j := range n {
					if j != k && after[[2]int{k, j}] != want {
						t.Errorf("stack %d right after %d %d times: %v", k, j, after[[2]int{k, j}], rows)
					}
				}
			}
		})
	}
}
