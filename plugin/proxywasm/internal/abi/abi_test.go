package abi

import (
	"bytes"
	"reflect"
	"testing"
)

func TestEncodePairsMatchesSpecExample(t *testing.T) {
	// The v0.2.1 spec's own example: {{"a": "1"}, {"b": "22"}}.
	got := EncodePairs([][2]string{{"a", "1"}, {"b", "22"}})
	want := []byte{
		2, 0, 0, 0,
		1, 0, 0, 0, 1, 0, 0, 0,
		1, 0, 0, 0, 2, 0, 0, 0,
		'a', 0, '1', 0, 'b', 0, '2', '2', 0,
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("EncodePairs = %v, want %v", got, want)
	}
}

func TestDecodePairs(t *testing.T) {
	in := [][2]string{{":path", "/v1/messages"}, {"x-empty", ""}, {"", "v"}, {"dup", "1"}, {"dup", "2"}}
	got, err := DecodePairs(EncodePairs(in))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip = %q, want %q", got, in)
	}
	for _, empty := range [][]byte{nil, {0}, {0, 0, 0, 0}} {
		got, err := DecodePairs(empty)
		if err != nil || len(got) != 0 {
			t.Errorf("DecodePairs(%v) = %q, %v; want empty", empty, got, err)
		}
	}
}

func TestDecodePairsRejectsMalformed(t *testing.T) {
	good := EncodePairs([][2]string{{"k", "v"}})
	cases := map[string][]byte{
		"short header":      {1, 0},
		"huge count":        {0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0},
		"truncated":         good[:len(good)-1],
		"missing key NUL":   append(append([]byte{}, good[:12]...), 'k', 'x', 'v', 0),
		"oversized value":   {1, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 'k', 0, 'v', 0},
		"missing value NUL": append(append([]byte{}, good[:12]...), 'k', 0, 'v', 'x'),
	}
	for name, in := range cases {
		if got, err := DecodePairs(in); err == nil {
			t.Errorf("%s: DecodePairs(%v) = %q, want error", name, in, got)
		}
	}
}

func FuzzDecodePairs(f *testing.F) {
	f.Add(EncodePairs([][2]string{{"a", "1"}, {"b", "22"}}))
	f.Add(EncodePairs([][2]string{{":authority", "chime-host"}, {"", ""}}))
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		pairs, err := DecodePairs(in)
		if err != nil {
			return
		}
		// Whatever decodes must re-encode and decode to the same map.
		again, err := DecodePairs(EncodePairs(pairs))
		if err != nil || len(again) != len(pairs) || (len(pairs) > 0 && !reflect.DeepEqual(again, pairs)) {
			t.Fatalf("re-decode of %q = %q, %v", pairs, again, err)
		}
	})
}

func TestEncodePropertyPath(t *testing.T) {
	if got := string(EncodePropertyPath([]string{"request", "headers", "x"})); got != "request\x00headers\x00x" {
		t.Fatalf("EncodePropertyPath = %q", got)
	}
}

func TestAllocationsTakeOnce(t *testing.T) {
	var a Allocations
	buf, addr := a.Alloc(8)
	copy(buf, "abcdefgh")
	_, addr2 := a.Alloc(0)
	if a.Len() != 2 {
		t.Fatalf("Len = %d, want 2", a.Len())
	}
	got, ok := a.Take(addr, 3)
	if !ok || string(got) != "abc" {
		t.Fatalf("Take = %q, %v", got, ok)
	}
	if _, ok := a.Take(addr, 3); ok {
		t.Fatal("second Take of the same buffer succeeded")
	}
	if _, ok := a.Take(addr2, 2); ok {
		t.Fatal("Take larger than the allocation succeeded")
	}
	if _, ok := a.Take(12345, 0); ok {
		t.Fatal("Take of an unknown address succeeded")
	}
	a.Alloc(4)
	a.Reset()
	if a.Len() != 0 {
		t.Fatalf("Len after Reset = %d", a.Len())
	}
}

func BenchmarkDecodePairs(b *testing.B) {
	in := EncodePairs([][2]string{{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "api.openai.com"},
		{"content-type", "application/json"}, {"authorization", "Bearer sk-xxxxxxxxxxxxxxxxxxxxxxxx"}, {"x-request-id", "0123456789abcdef"}})
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		if _, err := DecodePairs(in); err != nil {
			b.Fatal(err)
		}
	}
}
