package wasmhost

import (
	abi "github.com/chimehq/chime/internal/proxywasmabi"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// encodePairs serializes a header map with the ABI's pairs codec (docs/local-runtime.md).
func encodePairs(h httpfilter.Headers) []byte {
	return abi.EncodePairsFunc(len(h), func(i int) (string, string) { return h[i].Key, h[i].Value })
}

// decodePairs parses a map a guest sent. Like proxy-wasm-cpp-host it is all
// or nothing: malformed input, or a map over cpp-host's limits, yields an
// empty map rather than an error.
func decodePairs(b []byte) httpfilter.Headers {
	if len(b) > abi.MaxPairsBytes {
		return nil
	}
	var h httpfilter.Headers
	n := 0
	err := abi.DecodePairsFunc(b, func(k, v string) {
		if n++; n <= abi.MaxPairsCount {
			h = append(h, httpfilter.Header{Key: k, Value: v})
		}
	})
	if err != nil || n > abi.MaxPairsCount {
		return nil
	}
	return h
}
