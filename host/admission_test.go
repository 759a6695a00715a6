package host

import (
	"context"
	"testing"
	"time"
)

// TestPrepareQueueLeavesWhenTheCallerGoes: a call waiting for a slot
// waits while its caller does, and no longer: once the filter gave up
// (its timeout closed the call) the call leaves the queue at once,
// before PrepareQueueWait, and is shed.
func TestPrepareQueueLeavesWhenTheCallerGoes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.MaxConcurrentPrepares = 1 })
	if f.svc.cfg.PrepareQueueWait != DefaultPrepareQueueWait {
		t.Fatalf("PrepareQueueWait = %v, want the default %v", f.svc.cfg.PrepareQueueWait, DefaultPrepareQueueWait)
	}
	f.svc.prepareSlots <- struct{}{} // one prepare in flight
	ctx, cancel := context.WithCancel(context.Background())
	admitted := make(chan bool, 1)
	go func() { admitted <- f.svc.admitPrepare(ctx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if err := f.clk.BlockUntilContext(wctx, 1); err != nil { // queued, on its timer
		t.Fatal(err)
	}
	if n := f.svc.prepareWaiting.Load(); n != 1 {
		t.Fatalf("%d calls waiting, want 1", n)
	}
	cancel()
	if <-admitted {
		t.Fatal("a call whose caller left was admitted")
	}
	if n := f.svc.prepareWaiting.Load(); n != 0 {
		t.Fatalf("%d calls still waiting after the caller left", n)
	}
}
