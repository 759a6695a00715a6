package llm

import "testing"

func TestFollowupMarker(t *testing.T) {
	m := FollowupMarker("secret", "req-1:stop")
	id, ok := VerifyFollowupMarker("secret", m)
	if !ok || id != "req-1:stop" {
		t.Fatalf("valid marker rejected: %q %v", id, ok)
	}
	for _, bad := range []string{
		FollowupMarker("other", "req-1:stop"),                // wrong token
		"req-1:stop." + m[len("req-1:stop."):len(m)-1] + "0", // tampered MAC
		"req-2:stop" + m[len("req-1:stop"):],                 // MAC of another id
		"", ".", "nodot",
	} {
		if _, ok := VerifyFollowupMarker("secret", bad); ok {
			t.Errorf("forged marker %q accepted", bad)
		}
	}
	if _, ok := VerifyFollowupMarker("", FollowupMarker("", "x")); ok {
		t.Error("an empty token must never authenticate a followup")
	}
}
