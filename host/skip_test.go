package host

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
)

// pollPath is the filter's generation poll.
func pollPath(instance string, known int64) string {
	return hostapi.PathState + "?" + hostapi.QueryGeneration + "=" + strconv.FormatInt(known, 10) + "&" + hostapi.QueryInstance + "=" + instance
}

func (f *fixture) poll(t *testing.T, instance string, known int64) int64 {
	t.Helper()
	rec := f.do(t, http.MethodGet, pollPath(instance, known), testToken, nil)
	if rec.Code != http.StatusOK {
		t.Fatalf("poll: %d %s", rec.Code, rec.Body)
	}
	var st hostapi.StateResponse
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatal(err)
	}
	return st.Generation
}

func TestPollAnswersAtOnceWhenBehindAndHoldsWhenCurrent(t *testing.T) {
	f := newFixture(t)
	g := f.svc.gens.current()
	if got := f.poll(t, "a", 0); got != g {
		t.Fatalf("poll with an old generation = %d, want %d at once", got, g)
	}
	done := make(chan int64)
	go func() { done <- f.poll(t, "a", g) }()
	// The poll waits on the hold timer (and the bump).
	if err := f.clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-done:
		t.Fatalf("a current poll answered at once: %d", got)
	default:
	}
	f.svc.gens.bump()
	if got := <-done; got != g+1 {
		t.Fatalf("poll answered %d after the bump, want %d", got, g+1)
	}
	// Without a change, the hold ends the poll with the same generation.
	go func() { done <- f.poll(t, "a", g+1) }()
	if err := f.clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(hostapi.GenerationHold)
	if got := <-done; got != g+1 {
		t.Fatalf("held poll answered %d, want %d", got, g+1)
	}
}

// An API write answers only once every polling filter has reported the
// generation it caused: the client's next request is prepared against it.
func TestAPIWriteWaitsForTheFiltersToLearnIt(t *testing.T) {
	f := newFixture(t)
	g := f.svc.gens.current()
	f.svc.gens.note("w1", g) // two filter instances that polled
	f.svc.gens.note("w2", g)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.schedule(t, "s-api", "call back", t0.Add(10*time.Minute))
	}()
	// The call waits (on the lapse timer) once it moved the generation;
	// a poll from the old one learns it at once.
	if err := f.clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	if got := f.poll(t, "w1", g); got <= g {
		t.Fatalf("poll after the write = %d, want above %d", got, g)
	}
	select {
	case <-done:
		t.Fatal("the API call answered before any filter reported the new generation")
	default:
	}
	f.svc.gens.note("w1", f.svc.gens.current())
	select {
	case <-done:
		t.Fatal("the API call answered before w2 reported the new generation")
	default:
	}
	// w2 goes silent: once it can no longer trust the old generation the
	// call answers.
	if err := f.clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	f.clk.Advance(lapse)
	<-done
}

func TestLapseCoversTheFiltersTrust(t *testing.T) {
	// The filter trusts a generation for GenerationTrust after sending
	// the poll that confirmed it; the host receives that poll later, so
	// waiting lapse after the last receipt covers the trust.
	if lapse < hostapi.GenerationTrust {
		t.Fatalf("lapse %s < trust %s", lapse, hostapi.GenerationTrust)
	}
	if hostapi.GenerationTrust < hostapi.GenerationHold+hostapi.GenerationPollTimeout {
		t.Fatal("trust must span a held poll and the next one")
	}
}

func TestSettleReturnsWhenAllReport(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	g := newGenerations(clk, t0)
	g.note("a", g.current())
	g.bump()
	target := g.current()
	done := make(chan struct{})
	go func() { g.settle(context.Background(), target); close(done) }()
	if err := clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	g.note("a", target-1) // an older report does not settle it
	select {
	case <-done:
		t.Fatal("settled on an old report")
	default:
	}
	g.note("a", target)
	<-done
	// A silent instance is forgotten once it lapsed: nothing waits.
	clk.Advance(lapse)
	g.bump()
	g.settle(context.Background(), g.current())
}

// TestSettleForgetsAnAbandonedPoll: an instance whose held poll the
// proxy gave up (its VM went away, or the call failed, which drops the
// filter's trust) is not waited for; one that polled again since is.
func TestSettleForgetsAnAbandonedPoll(t *testing.T) {
	clk := clockwork.NewFakeClockAt(t0)
	g := newGenerations(clk, t0)
	known := func(id string) bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.inst[id] != nil
	}

	// A held poll given up: the instance is forgotten, and a change
	// settles without waiting out the lapse for it.
	ctx, cancel := context.WithCancel(context.Background())
	returned := make(chan struct{})
	go func() { g.poll(ctx, "retired", g.current()); close(returned) }()
	if err := clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-returned
	if known("retired") {
		t.Fatal("an instance whose poll was given up is still waited for")
	}
	g.bump()
	g.settle(t.Context(), g.current()) // returns: nobody to wait for

	// A poll answered (not given up) keeps the instance.
	answered := make(chan struct{})
	go func() { g.poll(context.Background(), "live", g.current()); close(answered) }()
	if err := clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	g.bump()
	<-answered
	if !known("live") {
		t.Fatal("an answered poll's instance was forgotten")
	}

	// Only the latest poll's abandonment counts: one that polled since is
	// still waited for. A settle waiting for the instance ends when it is
	// forgotten.
	first := g.note("w", g.current())
	latest := g.note("w", g.current())
	g.note("live", g.current()+1)
	g.bump()
	done := make(chan struct{})
	go func() { g.settle(context.Background(), g.current()); close(done) }()
	if err := clk.BlockUntilContext(t.Context(), 1); err != nil {
		t.Fatal(err)
	}
	g.abandoned("w", first)
	if !known("w") {
		t.Fatal("an older poll's abandonment forgot an instance that polled since")
	}
	g.note("live", g.current())
	select {
	case <-done:
		t.Fatal("settled while w still trusts an older generation")
	default:
	}
	g.abandoned("w", latest)
	<-done
}

func TestQuietMs(t *testing.T) {
	f := newFixture(t)
	ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "r0"})
	if ans.Generation == 0 || ans.QuietMs != hostapi.MaxQuiet.Milliseconds() {
		t.Fatalf("no session: generation %d quietMs %d", ans.Generation, ans.QuietMs)
	}
	ans = f.prepare(t, hostapi.PrepareRequest{RequestID: "r1", SessionID: "s-q"})
	if ans.QuietMs != hostapi.MaxQuiet.Milliseconds() {
		t.Fatalf("empty session: quietMs %d", ans.QuietMs)
	}
	// A task due in 10 min: quiet until it nears (due window, then the
	// hold horizon before it).
	due := t0.Add(10 * time.Minute)
	f.schedule(t, "s-q", "later", due)
	ans = f.prepare(t, hostapi.PrepareRequest{RequestID: "r2", SessionID: "s-q"})
	horizon := f.svc.cfg.HoldMax + responseAllowance
	want := due.Add(-f.svc.cfg.DueWindow).Add(-horizon).Sub(t0).Milliseconds()
	if ans.QuietMs != min(want, hostapi.MaxQuiet.Milliseconds()) || ans.MayContinue {
		t.Fatalf("task in 10 min: quietMs %d (want %d), mayContinue %v", ans.QuietMs, want, ans.MayContinue)
	}
	f.clk.Advance(time.Duration(want) * time.Millisecond)
	ans = f.prepare(t, hostapi.PrepareRequest{RequestID: "r3", SessionID: "s-q"})
	if ans.QuietMs != 0 || !ans.MayContinue {
		t.Fatalf("task within the hold horizon: quietMs %d mayContinue %v", ans.QuietMs, ans.MayContinue)
	}
	// A stopMessage: every request is prepared.
	ans = f.prepare(t, hostapi.PrepareRequest{RequestID: "r4", SessionID: "s-stop",
		Directives: []hostapi.HostDirective{{Kind: hostapi.DirectiveStopMessage, Text: "go on", MaxRepeats: 2}}})
	if ans.QuietMs != 0 {
		t.Fatalf("stopMessage: quietMs %d", ans.QuietMs)
	}
	ans = f.prepare(t, hostapi.PrepareRequest{RequestID: "r5", SessionID: "s-stop"})
	if ans.QuietMs != 0 {
		t.Fatalf("stopMessage, next request: quietMs %d", ans.QuietMs)
	}
}

func TestGenerationMovesOnlyWithPrepareState(t *testing.T) {
	f := newFixture(t)
	g := f.svc.gens.current()
	// Requests without directives, their touches, NTP: nothing moves it.
	for i := range 3 {
		f.prepare(t, hostapi.PrepareRequest{RequestID: "p" + strconv.Itoa(i), SessionID: "s-g"})
	}
	if err := f.svc.touches.Flush(); err != nil {
		t.Fatal(err)
	}
	if rec := f.do(t, http.MethodPost, hostapi.PathTouch, testToken, hostapi.TouchRequest{Sessions: []hostapi.SessionTouch{{SessionID: "s-g", AtMs: t0.UnixMilli()}}}); rec.Code != http.StatusNoContent {
		t.Fatalf("touch: %d %s", rec.Code, rec.Body)
	}
	if err := f.svc.touches.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := f.svc.gens.current(); got != g {
		t.Fatalf("generation moved without a change: %d → %d", g, got)
	}
	// A task written by any path moves it.
	if err := f.svc.store.Update(func(tx *storage.Tx) error {
		return tx.PutTask(storage.ClockTask{TaskID: "t1", SessionID: "s-g", DueAt: t0.Add(time.Hour).UnixMilli(), Task: "x"})
	}); err != nil {
		t.Fatal(err)
	}
	if got := f.svc.gens.current(); got == g {
		t.Fatal("a task write left the generation")
	}
	// So does a route change, but not a session record with the same route.
	g = f.svc.gens.current()
	if err := f.svc.store.Update(func(tx *storage.Tx) error {
		return tx.PutSession(storage.Session{ID: "s-g", Route: "fast"})
	}); err != nil {
		t.Fatal(err)
	}
	if f.svc.gens.current() == g {
		t.Fatal("a route change left the generation")
	}
	g = f.svc.gens.current()
	if err := f.svc.store.Update(func(tx *storage.Tx) error {
		return tx.PutSession(storage.Session{ID: "s-g", Route: "fast", LastSeenAt: 5})
	}); err != nil {
		t.Fatal(err)
	}
	if f.svc.gens.current() != g {
		t.Fatal("a session touch moved the generation")
	}
}

func TestTouchRecordsActivity(t *testing.T) {
	f := newFixture(t)
	at := t0.Add(-time.Second).UnixMilli()
	rec := f.do(t, http.MethodPost, hostapi.PathTouch, testToken, hostapi.TouchRequest{Sessions: []hostapi.SessionTouch{{SessionID: "s-t", AtMs: at}}})
	if rec.Code != http.StatusNoContent {
		t.Fatalf("touch: %d %s", rec.Code, rec.Body)
	}
	if got, ok := f.svc.touches.Get("s-t"); !ok || got != at {
		t.Fatalf("touch = %d %v, want %d", got, ok, at)
	}
	if rec := f.do(t, http.MethodPost, hostapi.PathTouch, "", hostapi.TouchRequest{}); rec.Code != http.StatusUnauthorized {
		t.Fatalf("touch without the token: %d", rec.Code)
	}
}

// BenchmarkPrepareQuietSession is the prepare of a session with nothing
// to do, through the HTTP handler: what every request paid before
// skipping, and what a quiet session's occasional prepare costs now.
func BenchmarkPrepareQuietSession(b *testing.B) {
	f := newFixture(b)
	body, _ := json.Marshal(hostapi.PrepareRequest{RequestID: "r", Protocol: "chat", SessionID: "s-quiet", Timezone: "UTC"})
	b.ReportAllocs()
	for b.Loop() {
		req := newRequest(http.MethodPost, hostapi.PathPrepare, body)
		req.Header.Set("Authorization", "Bearer "+testToken)
		rec := serve(f.svc, req)
		if rec.Code != http.StatusOK {
			b.Fatal(rec.Code)
		}
	}
}
