package abi

import (
	"encoding/binary"
	"errors"
	"strings"
)

// EncodePairs serializes a header map in the v0.2.1 format: a little-endian
// u32 count, then a (key size, value size) u32 pair per entry, then every key
// and value followed by a NUL. An empty map encodes as an empty slice.
func EncodePairs(pairs [][2]string) []byte {
	if len(pairs) == 0 {
		return nil
	}
	size := 4 + 8*len(pairs)
	for _, p := range pairs {
		size += len(p[0]) + len(p[1]) + 2
	}
	buf := make([]byte, size)
	binary.LittleEndian.PutUint32(buf, uint32(len(pairs)))
	off := 4
	for _, p := range pairs {
		binary.LittleEndian.PutUint32(buf[off:], uint32(len(p[0])))
		binary.LittleEndian.PutUint32(buf[off+4:], uint32(len(p[1])))
		off += 8
	}
	for _, p := range pairs {
		off += copy(buf[off:], p[0]) + 1 // the NUL is already zero
		off += copy(buf[off:], p[1]) + 1
	}
	return buf
}

// ErrMalformedPairs reports serialized pairs that do not match their header.
var ErrMalformedPairs = errors.New("proxywasm: malformed serialized header pairs")

// DecodePairs parses the v0.2.1 pairs format. Both empty forms (no bytes, or
// a zero count) give an empty map. Sizes are checked against the buffer
// before anything is allocated, so hostile input cannot force large
// allocations or out-of-range reads.
func DecodePairs(buf []byte) ([][2]string, error) {
	if len(buf) == 0 || (len(buf) == 1 && buf[0] == 0) {
		return nil, nil
	}
	if len(buf) < 4 {
		return nil, ErrMalformedPairs
	}
	n := uint64(binary.LittleEndian.Uint32(buf))
	if n == 0 {
		return nil, nil
	}
	// Each pair needs 8 bytes of sizes and at least 2 NULs.
	if n > uint64(len(buf)-4)/10 {
		return nil, ErrMalformedPairs
	}
	sizes := buf[4:]
	data := uint64(4 + 8*n)
	end := uint64(len(buf))
	// Check every size and NUL first, then copy the data once: the keys
	// and values are substrings of one string (two allocations instead of
	// one per key and value).
	off := data
	for i := uint64(0); i < n; i++ {
		ks := uint64(binary.LittleEndian.Uint32(sizes[8*i:]))
		vs := uint64(binary.LittleEndian.Uint32(sizes[8*i+4:]))
		if off+ks+1 > end || buf[off+ks] != 0 {
			return nil, ErrMalformedPairs
		}
		off += ks + 1
		if off+vs+1 > end || buf[off+vs] != 0 {
			return nil, ErrMalformedPairs
		}
		off += vs + 1
	}
	text := string(buf[data:off])
	out := make([][2]string, n)
	off = 0
	for i := uint64(0); i < n; i++ {
		ks := uint64(binary.LittleEndian.Uint32(sizes[8*i:]))
		vs := uint64(binary.LittleEndian.Uint32(sizes[8*i+4:]))
		out[i][0] = text[off : off+ks]
		off += ks + 1
		out[i][1] = text[off : off+vs]
		off += vs + 1
	}
	return out, nil
}

// EncodePropertyPath joins path segments with NULs, as Envoy expects for
// proxy_get_property / proxy_set_property.
func EncodePropertyPath(path []string) []byte {
	return []byte(strings.Join(path, "\x00"))
}
