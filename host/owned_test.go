package host

import "testing"

// The reservations a restarted host releases at once are exactly those
// only a host process settles: hold followups and wake runs, never a
// filter's request id.
func TestOwnedByProcess(t *testing.T) {
	for id, want := range map[string]bool{
		"9f0c2a7d1b3e4f5a6b7c8d9e0f1a2b3c":       false, // the filter's id
		"req-42":                                 false,
		"9f0c2a7d1b3e4f5a6b7c8d9e0f1a2b3c:hold1": true,
		"9f0c2a7d1b3e4f5a6b7c8d9e0f1a2b3c:tool1": true,
		"wake:s-1:1763900000000":                 true,
	} {
		if got := ownedByProcess(id); got != want {
			t.Errorf("ownedByProcess(%q) = %v, want %v", id, got, want)
		}
	}
}
