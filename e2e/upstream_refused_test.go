package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Issue 17, defect 6: `chime up --upstream 'https://]'` used to start with
// the endpoint "]:443" and answer every request with 503. It must refuse
// to start, naming the URL and what is wrong with it.
func TestUpRefusesAnInvalidUpstream(t *testing.T) {
	d := newDemo(t)
	cmd := exec.Command(chimeBin(t), "up", "-c", d.config, "--host-addr", d.hostURL[len("http://"):],
		"--upstream", "https://]", "--cache-dir", filepath.Join(t.TempDir(), "cache"))
	cmd.Dir = repoRoot()
	cmd.Env = append(append(cmd.Environ(), "CHIME_NTP=off", "CHIME_HOST_TOKEN="+hostToken), d.env()...)
	done := make(chan struct{})
	var out []byte
	var err error
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("chime up kept running with an invalid upstream:\n%s", out)
	}
	if err == nil {
		t.Fatalf("chime up exited 0 with an invalid upstream:\n%s", out)
	}
	if s := string(out); !strings.Contains(s, "https://]") || !strings.Contains(s, "neither an IP address nor a DNS name") {
		t.Fatalf("the error does not name the URL and the reason:\n%s", s)
	}
}
