package route

import (
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
)

var t0 = time.Date(2026, 2, 2, 21, 0, 0, 0, time.UTC)

func TestCheck(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"fast", "a", "eu-west.1_b", strings.Repeat("r", MaxLen), "~!@#"} {
		if err := Check(ok); err != nil {
			t.Errorf("Check(%q): %v", ok, err)
		}
	}
	for _, bad := range []string{"", "has space", "tab\t", "new\nline", "é", "\x7f", strings.Repeat("r", MaxLen+1)} {
		if err := Check(bad); err == nil {
			t.Errorf("Check(%q) accepted", bad)
		}
	}
}

func TestApplyDirective(t *testing.T) {
	t.Parallel()
	st, err := storage.Open("", storage.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const sid = "sess-route"
	if r, err := Pinned(st, sid); r != "" || err != nil {
		t.Fatalf("no record: %q %v", r, err)
	}
	// Pinning creates the session record.
	if err := ApplyDirective(st, sid, hostapi.HostDirective{Kind: hostapi.DirectiveRoute, Route: "fast"}, t0); err != nil {
		t.Fatal(err)
	}
	sess, ok, _ := st.GetSession(sid)
	if want := (storage.Session{ID: sid, CreatedAt: t0.UnixMilli(), LastSeenAt: t0.UnixMilli(), Route: "fast"}); !ok || sess != want {
		t.Fatalf("record %+v, want %+v", sess, want)
	}
	// An invalid name or kind fails and keeps the pin.
	for _, d := range []hostapi.HostDirective{
		{Kind: hostapi.DirectiveRoute, Route: "has space"},
		{Kind: hostapi.DirectiveRoute},
		{Kind: hostapi.DirectiveClockClear},
	} {
		if err := ApplyDirective(st, sid, d, t0); err == nil {
			t.Errorf("%+v applied", d)
		}
	}
	if err := ApplyDirective(st, "", hostapi.HostDirective{Kind: hostapi.DirectiveRoute, Route: "x"}, t0); err != ErrNoSession {
		t.Errorf("without a session: %v", err)
	}
	if r, _ := Pinned(st, sid); r != "fast" {
		t.Fatalf("pin after invalid directives: %q", r)
	}
	// Unpinning keeps the record and never moves lastSeenAt back.
	if err := ApplyDirective(st, sid, hostapi.HostDirective{Kind: hostapi.DirectiveRouteClear}, t0.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	sess, ok, _ = st.GetSession(sid)
	if !ok || sess.Route != "" || sess.LastSeenAt != t0.UnixMilli() || sess.CreatedAt != t0.UnixMilli() {
		t.Fatalf("after route:clear: %+v %v", sess, ok)
	}
}
