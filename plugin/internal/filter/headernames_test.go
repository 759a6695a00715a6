package filter

import (
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
