package wasmhost

import (
	"bytes"
	"fmt"
	"testing"

	abi "github.com/chimehq/chime/internal/proxywasmabi"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

func TestDecodePairsLimits(t *testing.T) {
	h := httpfilter.Headers{{Key: "a", Value: "1"}, {Key: "b", Value: "22"}}
	if got := decodePairs(encodePairs(h)); len(got) != 2 || got[0] != h[0] || got[1] != h[1] {
		t.Fatalf("round trip = %v", got)
	}
	var many httpfilter.Headers
	for i := range abi.MaxPairsCount + 1 {
		many = append(many, httpfilter.Header{Key: fmt.Sprint("k", i), Value: "v"})
	}
	if got := decodePairs(encodePairs(many)); len(got) != 0 {
		t.Errorf("%d pairs accepted; cpp-host's limit is %d", len(got), abi.MaxPairsCount)
	}
	if got := decodePairs(encodePairs(many[:abi.MaxPairsCount])); len(got) != abi.MaxPairsCount {
		t.Errorf("%d pairs at the limit decoded as %d", abi.MaxPairsCount, len(got))
	}
	big := encodePairs(httpfilter.Headers{{Key: "k", Value: string(bytes.Repeat([]byte("v"), abi.MaxPairsBytes))}})
	if got := decodePairs(big); len(got) != 0 {
		t.Error("a map over 1 MiB was accepted")
	}
	good := encodePairs(h)
	for _, bad := range [][]byte{{1, 0, 0}, append(append([]byte(nil), good...), 0), good[:len(good)-1]} {
		if got := decodePairs(bad); len(got) != 0 {
			t.Errorf("decodePairs(%v) = %v, want empty", bad, got)
		}
	}
}

func FuzzHostDecodePairs(f *testing.F) {
	f.Add(encodePairs(httpfilter.Headers{{Key: "a", Value: "1"}, {Key: "b", Value: "22"}}))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h := decodePairs(b)
		if len(h) == 0 {
			return
		}
		// Anything accepted re-encodes to the same bytes.
		if again := encodePairs(h); !bytes.Equal(again, b) {
			t.Fatalf("round trip mismatch: %v -> %v -> %v", b, h, again)
		}
	})
}
