package host

import (
	"bytes"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/hostapi"
)

// TestCloseDrainsRequests: Close waits for the requests in flight before
// closing the store, and a prepare arriving during or after shutdown gets
// 503, never a "store is closed" warning (docs/failures.md).
func TestCloseDrainsRequests(t *testing.T) {
	var logs bytes.Buffer
	svc, err := New(Config{DataDir: t.TempDir(), Token: testToken, Clock: clockwork.NewFakeClockAt(t0)},
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{svc: svc}
	svc.drain.RLock() // a request in flight
	closed := make(chan error, 1)
	go func() { closed <- svc.Close() }()
	// Wait until Close waits for the drain lock: a waiting writer makes
	// TryRLock fail.
	for svc.drain.TryRLock() {
		svc.drain.RUnlock()
		runtime.Gosched()
	}
	// Close cannot finish while the request is in flight: the store stays
	// open for it.
	select {
	case err := <-closed:
		t.Fatalf("Close returned with a request in flight: %v", err)
	default:
	}
	if _, err := svc.store.ListSessions(); err != nil {
		t.Fatalf("store closed under a request in flight: %v", err)
	}
	svc.drain.RUnlock()
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	rec := f.do(t, http.MethodPost, hostapi.PathPrepare, testToken, hostapi.PrepareRequest{RequestID: "late", SessionID: "s",
		Directives: []hostapi.HostDirective{{Kind: hostapi.DirectiveStopMessage, Text: "go", MaxRepeats: 1}}})
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("prepare after Close: %d %s, want 503", rec.Code, rec.Body)
	}
	if strings.Contains(logs.String(), "closed") || strings.Contains(logs.String(), "level=WARN") {
		t.Fatalf("shutdown logged storage failures:\n%s", logs.String())
	}
}
