package delivery_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/host/delivery"
)

// crashEnv makes the test binary a host process that enqueues deliveries
// and drains them to a webhook until it is SIGKILLed (TestCrashRecovery).
// Its value is "<data dir>|<webhook url>|<first index>|<count>".
const crashEnv = "CHIME_DELIVERY_CRASH_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(crashEnv); v != "" {
		os.Exit(crashChild(v))
	}
	os.Exit(m.Run())
}

func crashRunID(i int) string { return fmt.Sprintf("run-%04d", i) }

// crashChild runs a host on dir, enqueues items first..count-1 (printing
// "E <i>" once each is persisted) and serves until killed.
func crashChild(v string) int {
	parts := strings.Split(v, "|")
	if len(parts) != 4 {
		fmt.Fprintln(os.Stderr, "bad", crashEnv)
		return 2
	}
	first, _ := strconv.Atoi(parts[2])
	count, _ := strconv.Atoi(parts[3])
	svc, err := host.New(host.Config{
		DataDir: parts[0], Token: "tok", Addr: "127.0.0.1:0",
		Delivery: host.DeliveryConfig{Connectors: []string{delivery.Webhook}, Webhook: delivery.WebhookConfig{URL: parts[1], Timeout: 5 * time.Second}},
	}, slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintln(os.Stderr, "new:", err)
		return 3
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 4
	}
	go func() { _ = svc.Serve(context.Background(), ln) }()
	out := bufio.NewWriter(os.Stdout)
	for i := first; i < count; i++ {
		err := svc.Deliver(context.Background(), delivery.Item{
			Session: fmt.Sprintf("crash-%d", i%7), RunID: crashRunID(i), Reason: "task", Text: "item " + strconv.Itoa(i),
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "deliver:", err)
			return 5
		}
		fmt.Fprintf(out, "E %d\n", i)
		_ = out.Flush()
	}
	select {} // drain until killed
}

// TestCrashRecovery enqueues 1000 deliveries to a webhook and SIGKILLs the
// host at random moments while they are enqueued and drained (12 times);
// a last host finishes. Every entry arrives at least once, a run only
// ever with its one idempotency key, none lost.
func TestCrashRecovery(t *testing.T) {
	const total, kills = 1000, 12
	var mu sync.Mutex
	byKey := map[string]int{}
	hits := 0
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		key := r.Header.Get(delivery.HeaderIdempotencyKey)
		mu.Lock()
		byKey[key]++
		hits++
		mu.Unlock()
		time.Sleep(30 * time.Millisecond) // a receiver that takes a moment, so kills land mid-drain
		w.WriteHeader(http.StatusOK)
	}))
	defer recv.Close()
	unique := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(byKey)
	}
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return hits
	}

	dir := t.TempDir()
	acked := 0 // items whose Deliver returned: all of them must arrive
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	var live atomic.Int64 // acked, as the child reports it
	run := func(kill func()) {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%d|%d", crashEnv, dir, recv.URL, acked, total))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		live.Store(int64(acked))
		done := make(chan struct{})
		go func() {
			defer close(done)
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if n, err := strconv.Atoi(strings.TrimPrefix(sc.Text(), "E ")); err == nil {
					live.Store(int64(n + 1))
				}
			}
		}()
		kill()
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
		err = cmd.Wait()
		acked = int(live.Load())
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("child did not die by SIGKILL: %v", err)
		}
	}
	randomMoment := func() { time.Sleep(time.Duration(100+rng.IntN(400)) * time.Millisecond) }
	for k := range kills {
		switch {
		case k < 2: // while enqueueing
			run(randomMoment)
		case k == 2: // the rest is enqueued, then a crash while draining
			run(func() {
				waitFor(t, "every enqueue", func() bool { return live.Load() == total })
				randomMoment()
			})
		default: // while draining
			run(randomMoment)
		}
		t.Logf("kill %d: %d acknowledged, %d received (%d distinct)", k+1, acked, received(), unique())
	}
	// The last host runs until everything arrived.
	run(func() {
		deadline := time.Now().Add(2 * time.Minute)
		for unique() < total && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	})
	if acked != total {
		t.Fatalf("only %d of %d enqueues acknowledged", acked, total)
	}
	mu.Lock()
	defer mu.Unlock()
	dups := 0
	for i := range total {
		key := delivery.Key(crashRunID(i), delivery.Webhook)
		n := byKey[key]
		if n == 0 {
			t.Errorf("%s never arrived", key)
		}
		dups += max(n-1, 0)
	}
	if len(byKey) != total {
		t.Errorf("%d distinct keys at the receiver, want %d (a run sent under another key)", len(byKey), total)
	}
	t.Logf("%d deliveries received for %d entries: %d duplicates, each with its entry's key", hits, total, dups)
}
