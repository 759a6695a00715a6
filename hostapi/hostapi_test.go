package hostapi

import (
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/llm"
)

func TestFollowupMarker(t *testing.T) {
	now := time.Date(2026, 2, 2, 21, 22, 38, 0, time.UTC)
	m := FollowupMarker("secret", "req-1:stop", now)
	for _, at := range []time.Time{now, now.Add(-time.Hour), now.Add(FollowupMarkerTTL)} {
		id, ok := VerifyFollowupMarker("secret", m, at)
		if !ok || id != "req-1:stop" {
			t.Fatalf("valid marker rejected at %v: %q %v", at, id, ok)
		}
	}
	// The expiry is bound: a marker dies within minutes and cannot be
	// given a later expiry without the token.
	if _, ok := VerifyFollowupMarker("secret", m, now.Add(FollowupMarkerTTL+time.Minute)); ok {
		t.Error("expired marker accepted")
	}
	i := strings.LastIndexByte(m, '.')
	j := strings.LastIndexByte(m[:i], '.')
	if _, ok := VerifyFollowupMarker("secret", m[:j]+".99999999999"+m[i:], now); ok {
		t.Error("marker with a changed expiry accepted")
	}
	for _, bad := range []string{
		FollowupMarker("other", "req-1:stop", now), // wrong token
		m[:len(m)-1] + "0",                         // tampered MAC
		"req-2:stop" + m[len("req-1:stop"):],       // MAC of another id
		m[:j] + m[i:],                              // no expiry
		"", ".", "nodot", "a.b", "a.1.", ".1." + m[i+1:],
	} {
		if _, ok := VerifyFollowupMarker("secret", bad, now); ok {
			t.Errorf("forged marker %q accepted", bad)
		}
	}
	if _, ok := VerifyFollowupMarker("", FollowupMarker("", "x", now), now); ok {
		t.Error("an empty token must never authenticate a followup")
	}
}

// FuzzVerifyFollowupMarker: the marker is untrusted header input; only a
// value FollowupMarker made verifies.
func FuzzVerifyFollowupMarker(f *testing.F) {
	now := time.Date(2026, 2, 2, 21, 22, 38, 0, time.UTC)
	f.Add(FollowupMarker("secret", "req-1:stop1", now))
	f.Add("req-1.abc")
	f.Add("a.1.b")
	f.Add("..")
	f.Fuzz(func(t *testing.T, v string) {
		id, ok := VerifyFollowupMarker("secret", v, now)
		if ok && v != FollowupMarker("secret", id, now) && !strings.HasPrefix(v, id+".") {
			t.Fatalf("%q verified as %q", v, id)
		}
	})
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
