package wasmhost

import (
	"encoding/binary"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// Limits proxy-wasm-cpp-host applies to serialized maps (limits.h).
const (
	maxPairsBytes = 1 << 20
	maxPairsCount = 1024
)

// encodePairs serializes a header map the proxy-wasm way (SPEC §13): a
// little-endian u32 count, count pairs of u32 key/value lengths, then each
// key and value NUL-terminated.
func encodePairs(h httpfilter.Headers) []byte {
	size := 4
	for _, e := range h {
		size += 8 + len(e.Key) + 1 + len(e.Value) + 1
	}
	out := make([]byte, size)
	binary.LittleEndian.PutUint32(out, uint32(len(h)))
	pos := 4
	for _, e := range h {
		binary.LittleEndian.PutUint32(out[pos:], uint32(len(e.Key)))
		binary.LittleEndian.PutUint32(out[pos+4:], uint32(len(e.Value)))
		pos += 8
	}
	for _, e := range h {
		pos += copy(out[pos:], e.Key) + 1
		pos += copy(out[pos:], e.Value) + 1
	}
	return out
}

// decodePairs parses a serialized map. Like the C++ host it is all or
// nothing: any malformed input (bad lengths, missing NULs, trailing bytes,
// over the limits) yields an empty map rather than an error.
func decodePairs(b []byte) httpfilter.Headers {
	if len(b) < 4 || len(b) > maxPairsBytes {
		return nil
	}
	n := binary.LittleEndian.Uint32(b)
	if n > maxPairsCount || uint64(len(b)) < 4+uint64(n)*8 {
		return nil
	}
	type sz struct{ k, v uint32 }
	sizes := make([]sz, n)
	pos := 4
	for i := range sizes {
		sizes[i] = sz{binary.LittleEndian.Uint32(b[pos:]), binary.LittleEndian.Uint32(b[pos+4:])}
		pos += 8
	}
	out := make(httpfilter.Headers, 0, n)
	for _, s := range sizes {
		k, ok := takeNulTerminated(b, &pos, s.k)
		if !ok {
			return nil
		}
		v, ok := takeNulTerminated(b, &pos, s.v)
		if !ok {
			return nil
		}
		out = append(out, httpfilter.Header{Key: k, Value: v})
	}
	if pos != len(b) {
		return nil
	}
	return out
}

func takeNulTerminated(b []byte, pos *int, n uint32) (string, bool) {
	end := uint64(*pos) + uint64(n)
	if end+1 > uint64(len(b)) || b[end] != 0 {
		return "", false
	}
	s := string(b[*pos:end])
	*pos = int(end) + 1
	return s, true
}
