package testport

import (
	"fmt"
	"net"
	"testing"
)

func TestPickDistinctBindableOutsideEphemeral(t *testing.T) {
	lo, hi := window()
	seen := map[int]bool{}
	for range 200 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if p < lo || p >= hi {
			t.Fatalf("port %d outside %d-%d", p, lo, hi)
		}
	}
	for p := range seen {
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			t.Fatalf("port %d not bindable: %v", p, err)
		}
		l.Close()
		break
	}
}

func TestPickSkipsBoundPorts(t *testing.T) {
	lo, hi := window()
	// Hold a third of the window; Pick must never return one of them.
	var held []net.Listener
	bound := map[int]bool{}
	for p := lo; p < hi; p += 3 {
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			held = append(held, l)
			bound[p] = true
		}
	}
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for range 50 {
		p, err := Pick()
		if err != nil {
			t.Fatal(err)
		}
		if bound[p] {
			t.Fatalf("Pick returned port %d held by a listener", p)
		}
	}
}
