package proxywasmabi

import (
	"encoding/binary"
	"errors"
	"strings"
)

// Limits proxy-wasm-cpp-host applies to a serialized map a guest sends
// (limits.h); a larger map is treated as malformed.
const (
	MaxPairsBytes = 1 << 20
	MaxPairsCount = 1024
)

// ErrMalformedPairs reports serialized pairs that do not match their header.
var ErrMalformedPairs = errors.New("proxy-wasm: malformed serialized header pairs")

// EncodePairs serializes a header map in the v0.2.1 format: a
// little-endian u32 count, then a (key size, value size) u32 pair per
// entry, then every key and value followed by a NUL. An empty map encodes
// as no bytes, as Envoy hands it to a guest.
func EncodePairs(pairs [][2]string) []byte {
	return EncodePairsFunc(len(pairs), func(i int) (string, string) { return pairs[i][0], pairs[i][1] })
}

// EncodePairsFunc is EncodePairs for n pairs read through pair, for
// callers whose header maps are not [][2]string.
func EncodePairsFunc(n int, pair func(i int) (key, value string)) []byte {
	if n == 0 {
		return nil
	}
	size := 4 + 8*n
	for i := range n {
		k, v := pair(i)
		size += len(k) + len(v) + 2
	}
	buf := make([]byte, size)
	binary.LittleEndian.PutUint32(buf, uint32(n))
	off := 4
	data := 4 + 8*n
	for i := range n {
		k, v := pair(i)
		binary.LittleEndian.PutUint32(buf[off:], uint32(len(k)))
		binary.LittleEndian.PutUint32(buf[off+4:], uint32(len(v)))
		off += 8
		data += copy(buf[data:], k) + 1 // the NUL is already zero
		data += copy(buf[data:], v) + 1
	}
	return buf
}

// DecodePairs parses the v0.2.1 pairs format. Empty forms (no bytes, a
// lone NUL, or a zero count) give an empty map. It is all or nothing, as
// in proxy-wasm-cpp-host: bad sizes, a missing NUL or trailing bytes are
// ErrMalformedPairs.
func DecodePairs(buf []byte) ([][2]string, error) {
	n, text, err := scanPairs(buf)
	if err != nil || n == 0 {
		return nil, err
	}
	// The loop of walkPairs without its callback: the guest decodes a
	// header map on every request, and a call costs there.
	out := make([][2]string, n)
	off := 0
	for i := range out {
		ks := int(binary.LittleEndian.Uint32(buf[4+8*i:]))
		vs := int(binary.LittleEndian.Uint32(buf[8+8*i:]))
		out[i][0] = text[off : off+ks]
		off += ks + 1
		out[i][1] = text[off : off+vs]
		off += vs + 1
	}
	return out, nil
}

// DecodePairsFunc is DecodePairs calling fn for each pair in order. The
// whole buffer is checked first, so fn sees every pair or none.
func DecodePairsFunc(buf []byte, fn func(key, value string)) error {
	n, text, err := scanPairs(buf)
	if err != nil || n == 0 {
		return err
	}
	walkPairs(buf, n, text, fn)
	return nil
}

// scanPairs checks every size and NUL against the buffer before anything
// is allocated, so hostile input cannot force large allocations or
// out-of-range reads. The keys and values are then substrings of text,
// one copy of the data.
func scanPairs(buf []byte) (n int, text string, err error) {
	if len(buf) == 0 || (len(buf) == 1 && buf[0] == 0) {
		return 0, "", nil
	}
	if len(buf) < 4 {
		return 0, "", ErrMalformedPairs
	}
	count := uint64(binary.LittleEndian.Uint32(buf))
	if count == 0 {
		return 0, "", nil
	}
	// Each pair needs 8 bytes of sizes and at least 2 NULs.
	if count > uint64(len(buf)-4)/10 {
		return 0, "", ErrMalformedPairs
	}
	data := 4 + 8*count
	off, end := data, uint64(len(buf))
	for i := range count {
		ks := uint64(binary.LittleEndian.Uint32(buf[4+8*i:]))
		vs := uint64(binary.LittleEndian.Uint32(buf[8+8*i:]))
		if off+ks+1 > end || buf[off+ks] != 0 {
			return 0, "", ErrMalformedPairs
		}
		off += ks + 1
		if off+vs+1 > end || buf[off+vs] != 0 {
			return 0, "", ErrMalformedPairs
		}
		off += vs + 1
	}
	if off != end {
		return 0, "", ErrMalformedPairs
	}
	return int(count), string(buf[data:]), nil
}

// walkPairs yields the n pairs scanPairs checked.
func walkPairs(buf []byte, n int, text string, fn func(k, v string)) {
	off := 0
	for i := range n {
		ks := int(binary.LittleEndian.Uint32(buf[4+8*i:]))
		vs := int(binary.LittleEndian.Uint32(buf[8+8*i:]))
		k := text[off : off+ks]
		off += ks + 1
		fn(k, text[off:off+vs])
		off += vs + 1
	}
}

// EncodePropertyPath joins path segments with NULs, the form of
// proxy_get_property / proxy_set_property paths.
func EncodePropertyPath(path []string) []byte {
	return []byte(strings.Join(path, "\x00"))
}

// SplitPropertyPath is the host's inverse of EncodePropertyPath; a
// trailing NUL (some SDKs send one) is ignored.
func SplitPropertyPath(path string) []string {
	return strings.Split(strings.TrimSuffix(path, "\x00"), "\x00")
}
