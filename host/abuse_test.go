package host

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// abuseDirectives is the worst mix one request can carry: n clock
// directives (rejected once the session is at its task cap) and n
// stopMessage directives, every one distinct.
func abuseDirectives(tag string, n int) []hostapi.HostDirective {
	ds := make([]hostapi.HostDirective, 0, 2*n)
	for i := range n {
		ds = append(ds,
			hostapi.HostDirective{Kind: hostapi.DirectiveClock, Clock: &llm.ClockItem{DueAt: "2026-02-03T09:00:00Z", Task: fmt.Sprintf("%s task %d", tag, i)}},
			hostapi.HostDirective{Kind: hostapi.DirectiveStopMessage, Text: fmt.Sprintf("%s go on %d", tag, i), MaxRepeats: 1})
	}
	return ds
}

// fillSession schedules the session's task cap.
func fillSession(t testing.TB, f *fixture, sid string) {
	t.Helper()
	for i := range 200 / MaxDirectivesPerRequest * 2 {
		var ds []hostapi.HostDirective
		for j := range MaxDirectivesPerRequest {
			ds = append(ds, hostapi.HostDirective{Kind: hostapi.DirectiveClock, Clock: &llm.ClockItem{DueAt: "2026-02-03T09:00:00Z", Task: fmt.Sprintf("fill %d-%d", i, j)}})
		}
		f.svc.Prepare(bg, hostapi.PrepareRequest{RequestID: fmt.Sprintf("fill-%d", i), SessionID: sid, Directives: ds})
	}
	if ts, err := f.svc.store.ListTasks(sid); err != nil || len(ts) != 200 {
		t.Fatalf("session not at the task cap: %d tasks, %v", len(ts), err)
	}
}

// TestPrepareCapsDirectives: a request's directives past
// MaxDirectivesPerRequest are ignored and counted (docs/failures.md).
func TestPrepareCapsDirectives(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	var ds []hostapi.HostDirective
	for i := range 1000 {
		ds = append(ds, hostapi.HostDirective{Kind: hostapi.DirectiveClock, Clock: &llm.ClockItem{DueAt: "2026-02-03T09:00:00Z", Task: fmt.Sprintf("t%d", i)}})
	}
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: "s", Directives: ds})
	if ts, _ := f.svc.store.ListTasks("s"); len(ts) != MaxDirectivesPerRequest {
		t.Fatalf("%d tasks from 1000 directives, want the cap %d", len(ts), MaxDirectivesPerRequest)
	}
	if got := scrape(t, f)["chime_directives_ignored_total"]; got != 1000-MaxDirectivesPerRequest {
		t.Fatalf("chime_directives_ignored_total = %v, want %d", got, 1000-MaxDirectivesPerRequest)
	}
}

// TestPrepareAbuseHeapStaysFlat runs the abuse loop of issue 16: a session
// at its task cap, then requests of 1 000 clock and 1 000 stopMessage
// directives each. The host's heap after GC must stay flat.
func TestPrepareAbuseHeapStaysFlat(t *testing.T) {
	f := newFixture(t)
	const sid = "abuse"
	fillSession(t, f, sid)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	loop := func(from, n int) {
		for i := from; i < from+n; i++ {
			f.prepare(t, hostapi.PrepareRequest{RequestID: fmt.Sprintf("a%d", i), SessionID: sid, Directives: abuseDirectives(fmt.Sprint(i), 1000)})
		}
	}
	// Warm up: caches and Badger's memtable, whose 64 MB arena may be
	// allocated a little later (a flush swaps it): the baseline is the
	// larger of two readings.
	loop(0, 20)
	before := heap()
	loop(1000, 20)
	before = max(before, heap())
	loop(20, 100)
	after := heap()
	t.Logf("heap before %d KB, after %d KB (%.2f×)", before>>10, after>>10, float64(after)/float64(before))
	if float64(after) > 1.2*float64(before)+float64(2<<20) {
		t.Fatalf("heap grew from %d KB to %d KB over 100 abusive requests", before>>10, after>>10)
	}
	if ts, _ := f.svc.store.ListTasks(sid); len(ts) != 200 {
		t.Fatalf("%d tasks, want the cap 200", len(ts))
	}
}

// TestPrepareShedsWhenBusy: past MaxConcurrentPrepares a prepare is
// answered 503 at once and counted, so the filter fails open early
// (docs/failures.md).
func TestPrepareShedsWhenBusy(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.MaxConcurrentPrepares = 1; c.PrepareQueueWait = -1 })
	f.svc.prepareSlots <- struct{}{} // one prepare in flight
	rec := f.do(t, http.MethodPost, hostapi.PathPrepare, testToken, hostapi.PrepareRequest{RequestID: "r", SessionID: "s"})
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("busy host: %d %s, want 503", rec.Code, rec.Body)
	}
	<-f.svc.prepareSlots
	if rec := f.do(t, http.MethodPost, hostapi.PathPrepare, testToken, hostapi.PrepareRequest{RequestID: "r", SessionID: "s"}); rec.Code != http.StatusOK {
		t.Fatalf("idle host: %d", rec.Code)
	}
	if got := scrape(t, f)["chime_prepare_shed_total"]; got != 1 {
		t.Fatalf("chime_prepare_shed_total = %v", got)
	}
}

// TestPrepareBodyLimit: a prepare body over its limit gets 413 with a
// clear message; nothing is applied.
func TestPrepareBodyLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	big := hostapi.PrepareRequest{RequestID: "r", SessionID: "s", Directives: []hostapi.HostDirective{
		{Kind: hostapi.DirectiveStopMessage, Text: strings.Repeat("x", maxPrepareBody), MaxRepeats: 1}}}
	rec := f.do(t, http.MethodPost, hostapi.PathPrepare, testToken, big)
	if rec.Code != http.StatusRequestEntityTooLarge || !strings.Contains(rec.Body.String(), "prepare body over 256 KiB") {
		t.Fatalf("oversized prepare: %d %s", rec.Code, rec.Body)
	}
	if f.svc.stops.Active("s") {
		t.Fatal("an oversized prepare applied its directive")
	}
}

// BenchmarkAbuseDirectives is issue 16's abuse benchmark: b.N requests of
// the worst directive mix (1 000 clock directives over a full session's
// task cap and 1 000 stopMessage directives each) against one host. It
// prints the heap after GC before (after a warm-up) and after, and their
// ratio (goal ≤ 1.2×).
func BenchmarkAbuseDirectives(b *testing.B) {
	f := newFixture(b)
	const sid = "abuse"
	fillSession(b, f, sid)
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse
	}
	reqs := make([][]hostapi.HostDirective, 16) // built up front: the host's heap is measured, not ours
	for i := range reqs {
		reqs[i] = abuseDirectives(fmt.Sprint("b", i), 1000)
	}
	// Warm up first: Badger's memtables and caches fill to their fixed
	// sizes (tens of MB) in the first requests; growth after that is a leak.
	for i := range 20 {
		f.svc.Prepare(bg, hostapi.PrepareRequest{RequestID: fmt.Sprint("w", i), SessionID: sid, Directives: reqs[i%len(reqs)]})
	}
	before := heap()
	b.ResetTimer()
	for i := range b.N {
		f.svc.Prepare(bg, hostapi.PrepareRequest{RequestID: fmt.Sprint("b", i), SessionID: sid, Directives: reqs[i%len(reqs)]})
	}
	b.StopTimer()
	after := heap()
	ratio := float64(after) / float64(before)
	fmt.Printf("\nabuse: %d requests of 2 000 directives: heap %d KB before, %d KB after, %.2f×\n", b.N, before>>10, after>>10, ratio)
	b.ReportMetric(ratio, "heap-ratio")
}

// TestPrepareWaitsForASlot: past MaxConcurrentPrepares a call waits up to
// PrepareQueueWait for a slot: it is served when one frees in time, and
// shed with 503 once the wait is over.
func TestPrepareWaitsForASlot(t *testing.T) {
	t.Parallel()
	f := newFixture(t, func(c *Config) { c.MaxConcurrentPrepares = 1; c.PrepareQueueWait = 50 * time.Millisecond })
	f.svc.prepareSlots <- struct{}{} // one prepare in flight
	codes := make(chan int, 1)
	send := func() {
		go func() {
			codes <- f.do(t, http.MethodPost, hostapi.PathPrepare, testToken, hostapi.PrepareRequest{RequestID: "r", SessionID: "s"}).Code
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := f.clk.BlockUntilContext(ctx, 1); err != nil { // the call waits on its timer
			t.Fatal(err)
		}
	}
	send()
	<-f.svc.prepareSlots // the prepare in flight ends within the wait
	if code := <-codes; code != http.StatusOK {
		t.Fatalf("a slot freed within the wait: %d, want 200", code)
	}
	f.svc.prepareSlots <- struct{}{}
	send()
	f.clk.Advance(50 * time.Millisecond)
	if code := <-codes; code != http.StatusServiceUnavailable {
		t.Fatalf("no slot within the wait: %d, want 503", code)
	}
	<-f.svc.prepareSlots
	if got := scrape(t, f)["chime_prepare_shed_total"]; got != 1 {
		t.Fatalf("chime_prepare_shed_total = %v, want 1", got)
	}
}
