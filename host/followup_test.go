package host

import (
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
)

// TestFollowupMarkerAcceptedOnce: the host accepts a followup marker it
// signed once, before it expires; a replay, an expired or a forged marker
// gets 403 (docs/failures.md).
func TestFollowupMarkerAcceptedOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	accept := func(marker string) int {
		return f.do(t, http.MethodPost, hostapi.PathFollowup, testToken, hostapi.FollowupRequest{Marker: marker}).Code
	}
	m := hostapi.FollowupMarker(testToken, "r1:stop1", t0)
	if code := accept(m); code != http.StatusNoContent {
		t.Fatalf("fresh marker: %d", code)
	}
	if code := accept(m); code != http.StatusForbidden {
		t.Fatalf("replayed marker: %d, want 403", code)
	}
	if code := accept(hostapi.FollowupMarker("dev-token", "r2:stop1", t0)); code != http.StatusForbidden {
		t.Fatalf("marker of another token: %d", code)
	}
	old := hostapi.FollowupMarker(testToken, "r3:stop1", t0)
	f.clk.Advance(hostapi.FollowupMarkerTTL + time.Minute)
	if code := accept(old); code != http.StatusForbidden {
		t.Fatalf("expired marker: %d", code)
	}
	if code := f.do(t, http.MethodPost, hostapi.PathFollowup, "wrong", hostapi.FollowupRequest{Marker: m}).Code; code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", code)
	}
}

func TestMarkerLedgerForgetsExpired(t *testing.T) {
	var l markerLedger
	now := t0
	for i := range maxUsedMarkers {
		if !l.accept(strconv.Itoa(i), now, now.Add(time.Minute)) {
			t.Fatalf("marker %d refused below the bound", i)
		}
	}
	if l.accept("one more", now, now.Add(time.Minute)) {
		t.Fatal("ledger grew past its bound")
	}
	later := now.Add(2 * time.Minute)
	if !l.accept("after expiry", later, later.Add(time.Minute)) || len(l.used) != 1 {
		t.Fatalf("expired markers kept: %d", len(l.used))
	}
}
