package filter

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/chimehq/chime/hostapi"
)

func TestHeaderRoleOf(t *testing.T) {
	want := map[string]uint8{
		":method": roleMethod, ":path": rolePath, hostapi.HeaderFollowup: roleMarker,
		"x-request-id": roleRequestID, hostapi.HeaderTimezone: roleTimezone,
		"content-length": roleLength, "accept-encoding": roleEncoding,
	}
	for i, name := range sessionHeaderNames {
		want[name] = roleSession + uint8(i)
	}
	for name, role := range want {
		for _, n := range []string{name, strings.ToUpper(name), strings.ToUpper(name[:1]) + name[1:]} {
			if got := headerRoleOf(n); got != role {
				t.Errorf("headerRoleOf(%q) = %d, want %d", n, got, role)
			}
		}
	}
	for _, n := range []string{"", "content-type", "authorization", ":authority", "x-request-ie", "x-chime-sessions",
		"session", "x-claude-code-session-id-", strings.Repeat("a", 300), "content-lengt\u00e9"} {
		if got := headerRoleOf(n); got != roleNone {
			t.Errorf("headerRoleOf(%q) = %d, want none", n, got)
		}
	}
}

func BenchmarkHeaderRoleOf(b *testing.B) {
	names := []string{":authority", ":path", ":method", ":scheme", "content-type", "content-length",
		"authorization", "user-agent", "accept", "x-session-id", "anthropic-version", "x-forwarded-proto", "x-request-id"}
	for b.Loop() {
		for _, n := range names {
			headerRoleOf(n)
		}
	}
}

// readResponseHeaders finds what a first-match lookup without case finds,
// over random header lists with repeats, other names and mixed case.
func TestReadResponseHeaders(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	names := []string{":status", "content-type", "content-encoding", "content-length", "Content-Type", "CONTENT-LENGTH",
		":Status", "date", "server", "content-typ", "x-content-type"}
	lookup := func(hs [][2]string, name string) (string, bool) {
		for _, kv := range hs {
			if strings.EqualFold(kv[0], name) {
				return kv[1], true
			}
		}
		return "", false
	}
	for i := 0; i < 2000; i++ {
		var hs [][2]string
		for j := range r.IntN(8) {
			hs = append(hs, [2]string{names[r.IntN(len(names))], fmt.Sprint("v", i, j)})
		}
		got := readResponseHeaders(hs)
		status, _ := lookup(hs, ":status")
		ct, _ := lookup(hs, "content-type")
		enc, _ := lookup(hs, "content-encoding")
		length, hasLength := lookup(hs, "content-length")
		if want := (responseHeaders{status, ct, enc, length, hasLength}); got != want {
			t.Fatalf("headers %q: got %+v, want %+v", hs, got, want)
		}
	}
}
