package wasmhost

import (
	"encoding/binary"
	"testing"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// abiCall encodes one abifuzz script call (testdata/conformance abiFuzz).
func abiCall(op byte, args ...uint32) []byte {
	b := []byte{op}
	for i := range 5 {
		var v uint32
		if i < len(args) {
			v = args[i]
		}
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	return b
}

// FuzzHostABI drives the host functions that read and write guest memory
// (properties, buffers, header maps, shared data, http_call, log) with
// guest-chosen pointers and sizes: the host must answer every call with a
// status and keep serving, whatever the guest passes (issue 17).
func FuzzHostABI(f *testing.F) {
	const oob = 0xfffffff0
	pairs := encodePairs(httpfilter.Headers{{Key: ":path", Value: "/x"}, {Key: "a", Value: "b"}})
	seedPairs := append(abiCall(5, 0, 64, uint32(len(pairs))), make([]byte, 0)...)
	for _, seed := range [][]byte{
		abiCall(0, 0, 11, 200, 204),       // get_property, in scratch
		abiCall(0, oob, 11, oob, oob),     // all out of bounds
		abiCall(1, 0, 5, 16, 400),         // set_property with a size past scratch
		abiCall(2, 0, 0, 1<<31, 100, 104), // get_buffer_bytes, huge max
		abiCall(3, 0, 0, 0, 40, 10),       // set_buffer_bytes
		abiCall(4, 0, 300, 304),           // get_header_map_pairs
		append(seedPairs, pairs...),       // set_header_map_pairs from scratch
		abiCall(6, 0, 10, 3, 300, 304),    // get_header_map_value
		abiCall(7, 0, 10, 3, 20, 500),     // add_header_map_value
		abiCall(8, 0, 10, 4, 20, 3),       // replace
		abiCall(9, 2, oob, 100),           // remove with a bad key
		abiCall(10, 0, 10, 20, 30, 40),    // http_call
		abiCall(11, 0, 4, 100, 104, 108),  // get_shared_data
		abiCall(12, 0, 4, 10, 10, 0),      // set_shared_data
		abiCall(13, 2, 0, 511),            // log
		abiCall(14, 0, 4000, 4095),        // get_buffer_status at scratch's end
		abiCall(15, 0, 4094),              // header map size, straddling scratch's end
	} {
		f.Add(seed)
	}
	h := newHarness(f, "abifuzz")
	f.Fuzz(func(t *testing.T, script []byte) {
		fs := newFakeStream(h.events, 0) // not h.stream: it reports through f
		flt, err := h.f.NewFilter(fs)
		if err != nil {
			t.Fatal(err)
		}
		s := flt.(*stream)
		s.DecodeHeaders(&fs.req, false)
		s.DecodeData(&httpfilter.Buffer{Bytes: script}, true)
		s.OnStreamComplete()
		if s.vm.failed.Load() {
			t.Fatalf("the VM failed on %x: %v", script, s.vm.failErr)
		}
	})
}
