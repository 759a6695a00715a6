package hostapi

import (
	"testing"

	"github.com/chimehq/chime/llm"
)

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

// TestDirectiveKind: every directive the grammar knows maps to the kind the
// host applies, named as the tag names it; unknown tags map to none.
func TestDirectiveKind(t *testing.T) {
	for _, tag := range []string{
		`<**stopMessage:"go on",2**>`, `<**stopMessage:clear**>`,
		`<**clock:{"dueAt":"2026-01-01T00:00:00Z","task":"t"}**>`, `<**clock:clear**>`,
		`<**route:fast**>`, `<**route:clear**>`,
	} {
		ds := llm.ParseDirectives(tag)
		if len(ds) != 1 || ds[0].Err != nil {
			t.Fatalf("%s: %+v", tag, ds)
		}
		if got := DirectiveKind(ds[0].Kind); got == "" || got != ds[0].Kind.String() {
			t.Errorf("%s: kind %q, grammar says %q", tag, got, ds[0].Kind.String())
		}
	}
	if got := DirectiveKind(llm.ParseDirectives(`<**nonsense**>`)[0].Kind); got != "" {
		t.Errorf("unknown tag maps to %q", got)
	}
}

// FuzzVerifyFollowupMarker: the x-chime-followup header comes from the
// client (issue 17). Only a marker made with the token verifies, and it
// gives back the id it was made for.
func FuzzVerifyFollowupMarker(f *testing.F) {
	f.Add("tok", "req-1", "")
	f.Add("tok", "a.b.c", "x")
	f.Add("", "r", "")
	f.Add("tok", "", ".deadbeef")
	f.Fuzz(func(t *testing.T, token, id, forged string) {
		if token != "" && id != "" {
			got, ok := VerifyFollowupMarker(token, FollowupMarker(token, id))
			if !ok || got != id {
				t.Fatalf("own marker of %q: %q %v", id, got, ok)
			}
		}
		if got, ok := VerifyFollowupMarker(token, forged); ok && FollowupMarker(token, got) != forged {
			t.Fatalf("forged %q verified as %q", forged, got)
		}
	})
}
