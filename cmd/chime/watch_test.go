package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/host/delivery"
)

// syncBuffer is an output both the command and the test touch.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serveHost runs a host on addr ("" = any port) until the returned stop.
func serveHost(t *testing.T, dir, addr string) (svc *host.Service, url string, stop func()) {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	svc, err := host.New(host.Config{DataDir: dir, Token: "tok"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = svc.Serve(ctx, ln); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	t.Cleanup(stop)
	return svc, "http://" + ln.Addr().String(), stop
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond) // poll: the watch runs in its own goroutine
	}
}

// TestWatchCommand: chime watch prints deliveries and runs --exec, exits
// with a clear error on 401, and after a host restart reconnects with
// Last-Event-ID: it gets what it missed, once.
func TestWatchCommand(t *testing.T) {
	fake := clockwork.NewFakeClock()
	watchClock = fake
	t.Cleanup(func() { watchClock = clockwork.NewRealClock() })

	dir := t.TempDir()
	svc, url, stop := serveHost(t, dir, "")

	if out, err := run(t, "watch", "--session", "s1", "--host", url, "--token", "wrong"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("wrong token: %q %v", out, err)
	}
	if _, err := run(t, "watch", "--host", url, "--token", "tok"); err == nil || !strings.Contains(err.Error(), "--session") {
		t.Fatalf("without --session: %v", err)
	}

	execOut := filepath.Join(t.TempDir(), "exec.txt")
	state := filepath.Join(t.TempDir(), "watch.state")
	ctx, cancel := context.WithCancel(context.Background())
	root := newRootCommand()
	var out, errw syncBuffer
	root.SetOut(&out)
	root.SetErr(&errw)
	root.SetArgs([]string{"watch", "--session", "s1", "--host", url, "--token", "tok", "--state", state,
		"--exec", "cat >> " + execOut + "; echo \" $CHIME_RUN_ID\" >> " + execOut})
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	waitUntil(t, "the subscription", func() bool { return svc.DeliveryQueue().Subscribers("s1") == 1 })

	deliver := func(svc *host.Service, run, text string) {
		t.Helper()
		if err := svc.Deliver(context.Background(), delivery.Item{Session: "s1", RunID: run, Reason: "cron", Text: text}); err != nil {
			t.Fatal(err)
		}
	}
	deliver(svc, "wake:s1:1", "standup in 5 minutes")
	waitUntil(t, "the first delivery printed", func() bool { return strings.Contains(out.String(), "standup in 5 minutes") })
	waitUntil(t, "--exec", func() bool {
		b, _ := os.ReadFile(execOut)
		return strings.Contains(string(b), "standup in 5 minutes wake:s1:1")
	})

	// The host restarts on the same address; a delivery lands meanwhile.
	addr := strings.TrimPrefix(url, "http://")
	stop()
	if err := fake.BlockUntilContext(ctx, 1); err != nil { // chime watch waits to reconnect
		t.Fatal(err)
	}
	svc, _, _ = serveHost(t, dir, addr)
	deliver(svc, "wake:s1:2", "deploy finished")
	waitUntil(t, "the missed delivery logged", func() bool {
		ds, _ := svc.DeliveryQueue().List("s1", delivery.StateDelivered)
		return len(ds) == 2
	})
	fake.Advance(time.Second)
	waitUntil(t, "the missed delivery printed", func() bool { return strings.Contains(out.String(), "deploy finished") })
	if n := strings.Count(out.String(), "standup in 5 minutes"); n != 1 {
		t.Fatalf("first delivery printed %d times after the reconnect:\n%s", n, out.String())
	}
	if !strings.Contains(errw.String(), "reconnecting") {
		t.Fatalf("no reconnect notice: %q", errw.String())
	}
	// --state keeps the id once --exec is done with the event.
	waitUntil(t, "the state file", func() bool {
		b, _ := os.ReadFile(state)
		return strings.TrimSpace(string(b)) == "2"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("watch after cancel: %v", err)
	}
	// A restarted watch with --state starts after the last event it saw.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	root = newRootCommand()
	var out2 syncBuffer
	root.SetOut(&out2)
	root.SetErr(&out2)
	root.SetArgs([]string{"watch", "--session", "s1", "--host", url, "--token", "tok", "--state", state})
	go func() { done <- root.ExecuteContext(ctx2) }()
	waitUntil(t, "the second subscription", func() bool { return svc.DeliveryQueue().Subscribers("s1") == 1 })
	deliver(svc, "wake:s1:3", "third")
	waitUntil(t, "the third delivery", func() bool { return strings.Contains(out2.String(), "third") })
	if strings.Contains(out2.String(), "deploy finished") || strings.Contains(out2.String(), "standup") {
		t.Fatalf("restarted watch replayed old events:\n%s", out2.String())
	}
	cancel2()
	<-done
}

func TestReadEvents(t *testing.T) {
	in := ": chime events\nretry: 2000\n\nid: 1\nevent: delivery\ndata: {\"text\":\"a\"}\n\n: heartbeat\n\nid: 2\r\ndata: x\r\ndata: y\r\n\r\ndata\n\n"
	type ev struct{ id, data string }
	var got []ev
	if err := readEvents(strings.NewReader(in), func(id, data string) error { got = append(got, ev{id, data}); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []ev{{"1", `{"text":"a"}`}, {"2", "x\ny"}, {"", ""}}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("event %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// FuzzReadEvents: any stream parses without panicking; ids and data never
// carry a line break other than data's joins.
func FuzzReadEvents(f *testing.F) {
	for _, s := range []string{"id: 1\ndata: x\n\n", ": c\n\n", "data\n\n", "id:\ndata:\n\n", "data: a\ndata: b\n\n\n", "\r\n\r\n", "id: 9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_ = readEvents(strings.NewReader(s), func(id, data string) error {
			if strings.ContainsAny(id, "\n") {
				t.Fatalf("id with a newline: %q", id)
			}
			return nil
		})
	})
}
