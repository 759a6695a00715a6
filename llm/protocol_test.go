package llm

import (
	"fmt"
	"strings"
	"testing"
)

// TestDetectProtocolDecodesAsUpstreams: a path with percent-encoded
// unreserved characters is the path an upstream serves, so the filter
// must see it too (docs/failures.md); an encoded slash is not a separator.
func TestDetectProtocolDecodesAsUpstreams(t *testing.T) {
	for path, want := range map[string]Protocol{
		"/v1/chat/completions":         Chat,
		"/%76%31/chat/completions":     Chat,
		"/v1/%63hat/completions?x=%41": Chat,
		"/v1/respons%65s":              Responses,
		"/v1/MESSAGES":                 Unknown,
		"/%76%31/%6d%65ssages/":        Messages,
		"/v1%2Fchat/completions":       Unknown,
		"/v1/chat/completions%":        Unknown,
		"/v1/chat/completions%2":       Unknown,
		"/v1/chat%zz/completions":      Unknown,
		"/v1/chat/completions%3Fx=1":   Unknown,
	} {
		if got := DetectProtocol(path); got != want {
			t.Errorf("DetectProtocol(%q) = %v, want %v", path, got, want)
		}
	}
}

// FuzzDetectProtocol: encoding any unreserved character of a path never
// changes what the filter detects.
func FuzzDetectProtocol(f *testing.F) {
	for _, s := range []string{"/v1/chat/completions", "/v1/responses?x", "/v1/messages/", "/%76%31/chat/completions", "/v1%2fchat", "%"} {
		f.Add(s, uint8(3))
	}
	f.Fuzz(func(t *testing.T, path string, every uint8) {
		want := DetectProtocol(path)
		var b strings.Builder
		q := strings.IndexAny(path, "?#")
		for i := 0; i < len(path); i++ {
			c := path[i]
			if (q < 0 || i < q) && every > 0 && i%int(every) == 0 && isUnreserved(c) {
				fmt.Fprintf(&b, "%%%02X", c)
				continue
			}
			b.WriteByte(c)
		}
		if got := DetectProtocol(b.String()); got != want && !strings.Contains(path, "%") {
			t.Fatalf("%q detected %v, encoded %q detected %v", path, want, b.String(), got)
		}
	})
}
