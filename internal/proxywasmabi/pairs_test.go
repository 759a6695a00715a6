package proxywasmabi

import (
	"bytes"
	"reflect"
	"testing"
)

// The v0.2.1 spec's own example: {{"a": "1"}, {"b": "22"}}.
var specExample = []byte{
	2, 0, 0, 0,
	1, 0, 0, 0, 1, 0, 0, 0,
	1, 0, 0, 0, 2, 0, 0, 0,
	'a', 0, '1', 0, 'b', 0, '2', '2', 0,
}

func TestEncodePairsMatchesSpecExample(t *testing.T) {
	if got := EncodePairs([][2]string{{"a", "1"}, {"b", "22"}}); !bytes.Equal(got, specExample) {
		t.Fatalf("EncodePairs = %v, want %v", got, specExample)
	}
	h := []struct{ k, v string }{{"a", "1"}, {"b", "22"}}
	if got := EncodePairsFunc(len(h), func(i int) (string, string) { return h[i].k, h[i].v }); !bytes.Equal(got, specExample) {
		t.Fatalf("EncodePairsFunc = %v, want %v", got, specExample)
	}
	if got := EncodePairs(nil); got != nil {
		t.Fatalf("EncodePairs(nil) = %v, want no bytes", got)
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
	var seen [][2]string
	if err := DecodePairsFunc(specExample, func(k, v string) { seen = append(seen, [2]string{k, v}) }); err != nil ||
		!reflect.DeepEqual(seen, [][2]string{{"a", "1"}, {"b", "22"}}) {
		t.Fatalf("DecodePairsFunc = %q, %v", seen, err)
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
		"trailing byte":     append(append([]byte{}, good...), 0),
		"missing key NUL":   append(append([]byte{}, good[:12]...), 'k', 'x', 'v', 0),
		"oversized value":   {1, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 'k', 0, 'v', 0},
		"missing value NUL": append(append([]byte{}, good[:12]...), 'k', 0, 'v', 'x'),
	}
	for name, in := range cases {
		if got, err := DecodePairs(in); err == nil {
			t.Errorf("%s: DecodePairs(%v) = %q, want error", name, in, got)
		}
		called := false
		if err := DecodePairsFunc(in, func(string, string) { called = true }); err == nil || called {
			t.Errorf("%s: DecodePairsFunc = %v, called %v; want an error before any pair", name, err, called)
		}
	}
}

func FuzzDecodePairs(f *testing.F) {
	f.Add(specExample)
	f.Add(EncodePairs([][2]string{{":authority", "chime-host"}, {"", ""}}))
	f.Add([]byte{})
	f.Add([]byte{0})
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, in []byte) {
		pairs, err := DecodePairs(in)
		if err != nil || len(pairs) == 0 {
			return
		}
		// Anything accepted with pairs re-encodes to the same bytes.
		if again := EncodePairs(pairs); !bytes.Equal(again, in) {
			t.Fatalf("round trip mismatch: %v -> %q -> %v", in, pairs, again)
		}
	})
}

func TestPropertyPath(t *testing.T) {
	p := EncodePropertyPath([]string{"request", "headers", "x"})
	if string(p) != "request\x00headers\x00x" {
		t.Fatalf("EncodePropertyPath = %q", p)
	}
	for _, in := range []string{string(p), string(p) + "\x00"} {
		if got := SplitPropertyPath(in); !reflect.DeepEqual(got, []string{"request", "headers", "x"}) {
			t.Errorf("SplitPropertyPath(%q) = %q", in, got)
		}
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
