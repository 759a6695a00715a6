package wasmhost

import (
	"bytes"
	"testing"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

func TestPairsRoundTrip(t *testing.T) {
	h := httpfilter.Headers{{Key: "a", Value: "1"}, {Key: "b", Value: "22"}}
	b := encodePairs(h)
	// The spec's example: {"a": "1"}, {"b": "22"}.
	want := []byte{2, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 'a', 0, '1', 0, 'b', 0, '2', '2', 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("encode = %v", b)
	}
	got := decodePairs(b)
	if len(got) != 2 || got[0] != h[0] || got[1] != h[1] {
		t.Fatalf("decode = %v", got)
	}
	for _, bad := range [][]byte{nil, {1, 0, 0}, append(append([]byte(nil), b...), 0), b[:len(b)-1], {0xff, 0xff, 0, 0}} {
		if d := decodePairs(bad); len(d) != 0 {
			t.Errorf("decodePairs(%v) = %v, want empty", bad, d)
		}
	}
}

func FuzzDecodePairs(f *testing.F) {
	f.Add(encodePairs(httpfilter.Headers{{Key: "a", Value: "1"}, {Key: "b", Value: "22"}}))
	f.Add(encodePairs(nil))
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
