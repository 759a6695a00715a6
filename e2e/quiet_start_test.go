package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestDefaultStartIsQuiet: a default local `chime up` (development token on
// loopback, no reachable NTP server, two workers) prints no warning the
// user can do nothing about, one NTP info line, and one "filter started"
// line, not one per worker.
func TestDefaultStartIsQuiet(t *testing.T) {
	d := newDemo(t)
	// The last value of a variable wins: unset the token, turn NTP on with
	// a loopback server that does not answer.
	p := startChime(t, append(d.env(), "CHIME_HOST_TOKEN=", "CHIME_NTP=on", "CHIME_NTP_SERVERS=127.0.0.1:9"),
		[]string{d.hostURL + "/healthz", d.mockURL + "/__mock/requests", d.adminURL + "/ready"},
		"up", "-c", d.config, "--host-addr", d.hostURL[len("http://"):], "--mock-addr", d.mockURL[len("http://"):],
		"--concurrency", "2", "--cache-dir", t.TempDir())
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.logs.String(), "ntp: no server answered") {
		if time.Now().After(deadline) {
			t.Fatalf("no NTP line:\n%s", p.logs.String())
		}
		time.Sleep(50 * time.Millisecond) // poll: a separate process's first NTP sync
	}
	out := p.logs.String()
	if n := strings.Count(out, "filter started"); n != 1 {
		t.Errorf("%d filter-started lines, want 1:\n%s", n, out)
	}
	if strings.Contains(out, "level=WARN") || strings.Contains(out, "level=ERROR") {
		t.Errorf("warnings on a default local start:\n%s", out)
	}
	if n := strings.Count(out, "ntp:"); n != 1 {
		t.Errorf("%d NTP lines, want 1:\n%s", n, out)
	}
}
