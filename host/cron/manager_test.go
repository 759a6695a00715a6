package cron

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

var t0 = time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC)

// call is one thing the sink was asked to do.
type call struct {
	op, session, key, text string
	at                     time.Time
}

// fakeSink records calls; fail, when set, makes runs fail.
type fakeSink struct {
	clock timesource.Clock
	mu    sync.Mutex
	fail  error
	calls chan call
}

func (s *fakeSink) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fail
}

func (s *fakeSink) setFail(err error) {
	s.mu.Lock()
	s.fail = err
	s.mu.Unlock()
}

func (s *fakeSink) EnqueueEvent(_ context.Context, sid, ck, text string) error {
	if err := s.err(); err != nil {
		return err
	}
	s.calls <- call{op: "event", session: sid, key: ck, text: text, at: s.clock.Now()}
	return nil
}

func (s *fakeSink) Wake(sid, reason string) {
	s.calls <- call{op: "wake", session: sid, key: reason, at: s.clock.Now()}
}

func (s *fakeSink) RunIsolated(_ context.Context, sid, jid, text string) error {
	s.calls <- call{op: "isolated", session: IsolatedSession(sid, jid), key: jid, text: text, at: s.clock.Now()}
	return s.err()
}

type fixture struct {
	m     *Manager
	store *storage.Store
	clock *clockwork.FakeClock
	sink  *fakeSink
	obs   chan time.Duration
}

func newStore(t *testing.T) *storage.Store {
	t.Helper()
	st, err := storage.Open("", storage.Options{InMemory: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

func newFixture(t *testing.T, mod ...func(*Config)) *fixture {
	t.Helper()
	return newFixtureOn(t, newStore(t), clockwork.NewFakeClockAt(t0), mod...)
}

// newFixtureOn builds a manager over st, as a restarted host would, and
// restores the stored jobs.
func newFixtureOn(t *testing.T, st *storage.Store, clk *clockwork.FakeClock, mod ...func(*Config)) *fixture {
	t.Helper()
	f := &fixture{store: st, clock: clk, sink: &fakeSink{clock: clk, calls: make(chan call, 100000)}, obs: make(chan time.Duration, 100000)}
	cfg := Config{
		Store: st, Clock: clk, Sink: f.sink, Logger: slog.New(slog.DiscardHandler),
		Observe: func(_ string, late time.Duration) { f.obs <- late },
	}
	for _, fn := range mod {
		fn(&cfg)
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Restore(); err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

func (f *fixture) create(t *testing.T, sp Spec) storage.CronJob {
	t.Helper()
	if sp.Session == "" {
		sp.Session = "s1"
	}
	if sp.Text == "" {
		sp.Text = "check the build"
	}
	j, err := f.m.Create(sp)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// drain returns the calls made so far.
func (f *fixture) drain() []call {
	var out []call
	for {
		select {
		case c := <-f.sink.calls:
			out = append(out, c)
		default:
			return out
		}
	}
}

// advanceTick moves the clock by d and runs what is due.
func (f *fixture) advanceTick(d time.Duration) []call {
	f.clock.Advance(d)
	f.m.Tick(context.Background())
	return f.drain()
}

func (f *fixture) job(t *testing.T, id string) storage.CronJob {
	t.Helper()
	j, err := f.m.Get("s1", id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func TestMainTargetEnqueuesAndWakes(t *testing.T) {
	f := newFixture(t)
	j := f.create(t, Spec{Schedule: "10s", Text: "look at the queue"})
	if got := f.advanceTick(9 * time.Second); len(got) != 0 {
		t.Fatalf("ran early: %+v", got)
	}
	got := f.advanceTick(time.Second)
	if len(got) != 2 || got[0].op != "event" || got[0].key != "cron:"+j.JobID || got[0].text != "look at the queue" || got[0].session != "s1" ||
		got[1].op != "wake" || got[1].key != "cron" || got[1].session != "s1" {
		t.Fatalf("calls %+v", got)
	}
	r := f.job(t, j.JobID)
	if r.LastStatus != StatusOK || r.LastRunAt != t0.Add(10*time.Second).UnixMilli() || r.NextRunAt != t0.Add(20*time.Second).UnixMilli() || r.Runs != 1 {
		t.Fatalf("after the run: %+v", r)
	}
}

func TestIsolatedTargetRunsItsOwnSession(t *testing.T) {
	f := newFixture(t)
	j := f.create(t, Spec{Schedule: "1m", Target: TargetIsolated, Text: "summarize"})
	got := f.advanceTick(time.Minute)
	if len(got) != 1 || got[0].op != "isolated" || got[0].session != "s1:cron:"+j.JobID || got[0].text != "summarize" {
		t.Fatalf("calls %+v", got)
	}
}

func TestAtRunsOnceThenDisabled(t *testing.T) {
	f := newFixture(t)
	j := f.create(t, Spec{Schedule: t0.Add(90 * time.Minute).Format(time.RFC3339)})
	if j.Kind != KindAt || !j.Enabled {
		t.Fatalf("created %+v", j)
	}
	if got := f.advanceTick(89 * time.Minute); len(got) != 0 {
		t.Fatalf("early: %+v", got)
	}
	if got := f.advanceTick(time.Minute); len(got) != 2 {
		t.Fatalf("at: %+v", got)
	}
	r := f.job(t, j.JobID)
	if r.Enabled || r.NextRunAt != 0 || r.LastStatus != StatusOK {
		t.Fatalf("after its run: %+v", r)
	}
	if got := f.advanceTick(48 * time.Hour); len(got) != 0 {
		t.Fatalf("ran again: %+v", got)
	}
	if _, err := f.m.Resume("s1", j.JobID); !errors.Is(err, ErrState) {
		t.Fatalf("resume of a spent at job: %v", err)
	}
	// An at time in the past is refused at creation, naming the field.
	_, err := f.m.Create(Spec{Session: "s1", Text: "x", Schedule: t0.Add(-time.Minute).Format(time.RFC3339)})
	var fe *FieldError
	if !errors.As(err, &fe) || fe.Field != "schedule" {
		t.Fatalf("past at: %v", err)
	}
}

func TestBackoffOnFailureAndReset(t *testing.T) {
	f := newFixture(t)
	j := f.create(t, Spec{Schedule: "5s"})
	f.sink.setFail(errors.New("queue full"))
	now := t0.Add(5 * time.Second)
	f.advanceTick(5 * time.Second)
	for i, want := range []time.Duration{30 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, time.Hour} {
		r := f.job(t, j.JobID)
		if r.ConsecutiveFailures != i+1 || r.LastStatus != StatusFailed || r.LastError != "queue full" {
			t.Fatalf("failure %d: %+v", i+1, r)
		}
		if got := time.UnixMilli(r.NextRunAt).Sub(now); got != want {
			t.Fatalf("failure %d: retry after %s, want %s", i+1, got, want)
		}
		// Nothing before the retry is due.
		f.advanceTick(want - time.Second)
		if r2 := f.job(t, j.JobID); r2.ConsecutiveFailures != i+1 {
			t.Fatalf("retried before the backoff ended: %+v", r2)
		}
		if i == 5 {
			f.sink.setFail(nil)
		}
		f.advanceTick(time.Second)
		now = now.Add(want)
	}
	r := f.job(t, j.JobID)
	if r.ConsecutiveFailures != 0 || r.LastStatus != StatusOK || r.LastError != "" {
		t.Fatalf("success does not reset: %+v", r)
	}
	if got := time.UnixMilli(r.NextRunAt).Sub(now); got <= 0 || got > 5*time.Second {
		t.Fatalf("after the reset the job is back on its 5s grid, next in %s", got)
	}
}

func TestOverdueAtStartupRunsOnceThenResumes(t *testing.T) {
	st := newStore(t)
	clk := clockwork.NewFakeClockAt(t0)
	f := newFixtureOn(t, st, clk)
	every := f.create(t, Spec{Schedule: "1m", Text: "every"})
	daily := f.create(t, Spec{Kind: KindCron, Schedule: "0 10 * * *", TZ: "Europe/Paris", Text: "daily"})
	at := f.create(t, Spec{Schedule: t0.Add(time.Hour).Format(time.RFC3339), Text: "once"})
	paused := f.create(t, Spec{Schedule: "1m", Text: "paused"})
	if _, err := f.m.Pause("s1", paused.JobID); err != nil {
		t.Fatal(err)
	}

	// The host is down for three days: 4320 minutes, 3 daily runs, the at time.
	clk.Advance(72*time.Hour + 30*time.Second)
	g := newFixtureOn(t, st, clk)
	g.m.Tick(context.Background())
	got := map[string]int{}
	for _, c := range g.drain() {
		if c.op == "event" {
			got[c.text]++
		}
	}
	if got["every"] != 1 || got["daily"] != 1 || got["once"] != 1 || got["paused"] != 0 || len(got) != 3 {
		t.Fatalf("overdue runs at startup: %v (want each once, paused none)", got)
	}
	now := clk.Now()
	if r, _ := g.m.Get("s1", every.JobID); !time.UnixMilli(r.NextRunAt).Equal(now.Add(30 * time.Second)) {
		t.Fatalf("every: next %s, want the next grid point %s", time.UnixMilli(r.NextRunAt).UTC(), now.Add(30*time.Second))
	}
	if r, _ := g.m.Get("s1", daily.JobID); !time.UnixMilli(r.NextRunAt).Equal(utc("2026-11-27T09:00:00Z")) {
		t.Fatalf("daily: next %s", time.UnixMilli(r.NextRunAt).UTC())
	}
	if r, _ := g.m.Get("s1", at.JobID); r.Enabled {
		t.Fatalf("at ran and stays enabled: %+v", r)
	}
	// No replay: nothing more is due now.
	g.m.Tick(context.Background())
	if c := g.drain(); len(c) != 0 {
		t.Fatalf("replayed: %+v", c)
	}
	// The schedule goes on.
	if c := g.advanceTick(30 * time.Second); len(c) != 2 || c[0].text != "every" {
		t.Fatalf("next minute: %+v", c)
	}
}

// armLoop runs the manager's loop and reports every wait it arms.
func armLoop(t *testing.T, f *fixture) (arms chan time.Duration, stop func()) {
	t.Helper()
	arms = make(chan time.Duration, 1000)
	f.m.onArm = func(d time.Duration) { arms <- d }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.m.Run(ctx); close(done) }()
	return arms, func() { cancel(); <-done }
}

func nextArm(t *testing.T, arms chan time.Duration) time.Duration {
	t.Helper()
	select {
	case d := <-arms:
		return d
	case <-time.After(10 * time.Second): // a hang guard, not timing
		t.Fatal("the loop armed no wait")
		return 0
	}
}

func nextCall(t *testing.T, f *fixture) call {
	t.Helper()
	select {
	case c := <-f.sink.calls:
		return c
	case <-time.After(10 * time.Second): // a hang guard, not timing
		t.Fatal("no run")
		return call{}
	}
}

func TestLoopRearmsWithin60sAndFiresOnTime(t *testing.T) {
	f := newFixture(t)
	arms, stop := armLoop(t, f)
	defer stop()
	if d := nextArm(t, arms); d != timesource.MaxStep {
		t.Fatalf("idle loop armed %s", d)
	}
	j := f.create(t, Spec{Schedule: "2h30m10s"})
	// The loop wakes at most every 60 s until the job is due.
	elapsed := time.Duration(0)
	for elapsed < 2*time.Hour+30*time.Minute+10*time.Second {
		d := nextArm(t, arms)
		if d <= 0 || d > 60*time.Second {
			t.Fatalf("armed %s", d)
		}
		if len(f.sink.calls) != 0 {
			t.Fatalf("ran %s early", 2*time.Hour+30*time.Minute+10*time.Second-elapsed)
		}
		if err := f.clock.BlockUntilContext(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		f.clock.Advance(d)
		elapsed += d
	}
	c := nextCall(t, f)
	if c.key != "cron:"+j.JobID || !c.at.Equal(t0.Add(2*time.Hour+30*time.Minute+10*time.Second)) {
		t.Fatalf("ran %+v", c)
	}
	if late := <-f.obs; late != 0 {
		t.Fatalf("late by %s on a fake clock", late)
	}
}

func TestLoopFollowsHostTimeSteps(t *testing.T) {
	// Host time = fake clock + an NTP offset that steps while the loop sleeps.
	clk := clockwork.NewFakeClockAt(t0)
	var mu sync.Mutex
	offset := time.Duration(0)
	host := timesource.WithOffset(clk, func() time.Duration { mu.Lock(); defer mu.Unlock(); return offset })
	f := newFixtureOn(t, newStore(t), clk, func(c *Config) { c.Clock = host })
	f.sink.clock = host
	arms, stop := armLoop(t, f)
	defer stop()
	nextArm(t, arms)
	f.create(t, Spec{Schedule: "1h"})
	if d := nextArm(t, arms); d != 60*time.Second {
		t.Fatalf("armed %s", d)
	}
	// The host clock steps 59 minutes ahead: the job is due in a minute of
	// host time, and the loop sees it at its next re-arm.
	mu.Lock()
	offset = 59*time.Minute + 30*time.Second
	mu.Unlock()
	if err := clk.BlockUntilContext(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
	clk.Advance(60 * time.Second)
	c := nextCall(t, f)
	if !c.at.Equal(t0.Add(time.Hour + 30*time.Second)) {
		t.Fatalf("ran at %s", c.at)
	}
}

func TestPersistedAcrossReopen(t *testing.T) {
	dir := t.TempDir()
	open := func() *storage.Store {
		st, err := storage.Open(dir, storage.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	clk := clockwork.NewFakeClockAt(t0)
	st := open()
	f := newFixtureOn(t, st, clk)
	a := f.create(t, Spec{Name: "standup", Kind: KindCron, Schedule: "0 9 * * 1-5", TZ: "America/New_York", Target: TargetIsolated, Text: "standup notes"})
	clk.Advance(time.Second) // list order is creation order
	b := f.create(t, Spec{Schedule: "30s", Text: "poll"})
	f.advanceTick(30 * time.Second)
	if _, err := f.m.Pause("s1", a.JobID); err != nil {
		t.Fatal(err)
	}
	before := f.m.List("s1")
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	st = open()
	defer st.Close()
	g := newFixtureOn(t, st, clk)
	after := g.m.List("s1")
	if len(after) != 2 || after[0] != before[0] || after[1] != before[1] {
		t.Fatalf("after reopen\n got %+v\nwant %+v", after, before)
	}
	if after[1].JobID != b.JobID || after[1].Runs != 1 || after[0].Enabled || after[0].Name != "standup" {
		t.Fatalf("state lost: %+v", after)
	}
	if err := g.m.Delete("s1", b.JobID); err != nil {
		t.Fatal(err)
	}
	if js, _ := st.ListCronJobs("s1"); len(js) != 1 {
		t.Fatalf("delete not written through: %+v", js)
	}
}

func TestLimitPerSession(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxPerSession = 2 })
	f.create(t, Spec{Schedule: "1m"})
	j := f.create(t, Spec{Schedule: "1m"})
	if _, err := f.m.Create(Spec{Session: "s1", Schedule: "1m", Text: "x"}); !errors.Is(err, ErrLimit) {
		t.Fatalf("third job: %v", err)
	}
	f.create(t, Spec{Session: "s2", Schedule: "1m"}) // another session has its own limit
	if err := f.m.Delete("s1", j.JobID); err != nil {
		t.Fatal(err)
	}
	f.create(t, Spec{Schedule: "1m"})
}

func TestPauseResumeRunNowDelete(t *testing.T) {
	f := newFixture(t)
	j := f.create(t, Spec{Schedule: "10m"})
	if _, err := f.m.Pause("s1", j.JobID); err != nil {
		t.Fatal(err)
	}
	if got := f.advanceTick(time.Hour); len(got) != 0 {
		t.Fatalf("paused job ran: %+v", got)
	}
	if f.m.Live() != 0 {
		t.Fatalf("live %d", f.m.Live())
	}
	r, err := f.m.Resume("s1", j.JobID)
	if err != nil {
		t.Fatal(err)
	}
	// Resumed on its grid after now; the missed runs are not replayed.
	if next := time.UnixMilli(r.NextRunAt); !next.Equal(t0.Add(70 * time.Minute)) {
		t.Fatalf("resumed next %s", next.UTC())
	}
	r, err = f.m.RunNow(context.Background(), "s1", j.JobID)
	if err != nil || r.Runs != 1 || r.LastStatus != StatusOK || len(f.drain()) != 2 {
		t.Fatalf("run now: %+v %v", r, err)
	}
	if <-f.obs != -1 {
		t.Fatal("a manual run has no lateness")
	}
	if err := f.m.Delete("s1", j.JobID); err != nil {
		t.Fatal(err)
	}
	if got := f.advanceTick(time.Hour); len(got) != 0 {
		t.Fatalf("deleted job ran: %+v", got)
	}
	for _, err := range []error{
		f.m.Delete("s1", j.JobID),
		func() error { _, err := f.m.RunNow(context.Background(), "s1", j.JobID); return err }(),
		func() error { _, err := f.m.Pause("s1", "nope"); return err }(),
	} {
		if !errors.Is(err, ErrUnknown) {
			t.Fatalf("unknown job: %v", err)
		}
	}
}

func TestDisabledRefusesAndNeverRuns(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Disabled = true })
	if _, err := f.m.Create(Spec{Session: "s1", Schedule: "1m", Text: "x"}); !errors.Is(err, ErrDisabled) {
		t.Fatalf("create: %v", err)
	}
	if err := f.m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestDeclaredJobsReconcile(t *testing.T) {
	st := newStore(t)
	clk := clockwork.NewFakeClockAt(t0)
	f := newFixtureOn(t, st, clk)
	decl := []Declared{
		{Path: "cron.jobs[0]", Spec: Spec{Session: "ops", Schedule: "1h", Text: "report"}},
		{Path: "cron.jobs[1]", Spec: Spec{Session: "ops", Kind: KindCron, Schedule: "0 8 * * *", TZ: "Europe/Paris", Text: "morning"}},
	}
	if err := f.m.Declare(decl); err != nil {
		t.Fatal(err)
	}
	js := f.m.List("ops")
	if len(js) != 2 || js[0].Source != "config" {
		t.Fatalf("declared: %+v", js)
	}
	f.advanceTick(time.Hour)
	// Restart with the same file: same jobs, state kept.
	g := newFixtureOn(t, st, clk)
	if err := g.m.Declare(decl); err != nil {
		t.Fatal(err)
	}
	js2 := g.m.List("ops")
	if len(js2) != 2 || js2[0].JobID != js[0].JobID || js2[0].Runs != 1 {
		t.Fatalf("after restart: %+v", js2)
	}
	// A bad declaration names its path and field; a dropped one is deleted.
	err := g.m.Declare([]Declared{decl[1], {Path: "cron.jobs[1]", Spec: Spec{Session: "ops", Schedule: "1x", Text: "r"}}})
	if err == nil || err.Error() != `cron.jobs[1].schedule: "1x" is neither an ISO 8601 time, a duration nor five crontab fields` {
		t.Fatalf("bad declaration: %v", err)
	}
	if js3 := g.m.List("ops"); len(js3) != 1 || js3[0].Text != "morning" {
		t.Fatalf("reconciled: %+v", js3)
	}
}

// blockingSink holds isolated runs until their context ends.
type blockingSink struct {
	fakeSink
	started chan struct{}
}

func (s *blockingSink) RunIsolated(ctx context.Context, _, _, _ string) error {
	s.started <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}

func TestShutdownDuringARunLeavesItDue(t *testing.T) {
	st := newStore(t)
	clk := clockwork.NewFakeClockAt(t0)
	sink := &blockingSink{started: make(chan struct{}, 1)}
	f := newFixtureOn(t, st, clk, func(c *Config) { c.Sink = sink })
	j := f.create(t, Spec{Schedule: "1m", Target: TargetIsolated})
	clk.Advance(time.Minute)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.m.Run(ctx); close(done) }()
	select {
	case <-sink.started:
	case <-time.After(10 * time.Second): // a hang guard
		t.Fatal("the run did not start")
	}
	cancel()
	<-done // Run waits for the run in flight
	stored, ok, err := st.GetCronJob("s1", j.JobID)
	if err != nil || !ok || stored.Runs != 0 || stored.ConsecutiveFailures != 0 || stored.NextRunAt != t0.Add(time.Minute).UnixMilli() {
		t.Fatalf("after an interrupted run: %+v %v %v", stored, ok, err)
	}
	// The next start runs it.
	g := newFixtureOn(t, st, clk)
	g.m.Tick(context.Background())
	if c := g.drain(); len(c) != 1 || c[0].op != "isolated" {
		t.Fatalf("at the next start: %+v", c)
	}
}

// TestConcurrentChangesKeepTheHeapSound: API changes racing with runs
// never put a job in the heap twice or lose an enabled one.
func TestConcurrentChangesKeepTheHeapSound(t *testing.T) {
	f := newFixture(t)
	var ids []string
	for range 20 {
		ids = append(ids, f.create(t, Spec{Schedule: "1s"}).JobID)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = f.m.Run(ctx); close(done) }()
	go func() { // drain the sink
		for {
			select {
			case <-f.sink.calls:
			case <-done:
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			for i := range 200 {
				id := ids[(i*7+w)%len(ids)]
				switch i % 4 {
				case 0:
					_, _ = f.m.Pause("s1", id)
				case 1:
					_, _ = f.m.Resume("s1", id)
				case 2:
					_, _ = f.m.RunNow(context.Background(), "s1", id)
				case 3:
					f.clock.Advance(time.Second)
				}
			}
		})
	}
	wg.Wait()
	cancel()
	<-done
	for _, id := range ids { // leave every job enabled
		_, _ = f.m.Resume("s1", id)
	}
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	seen := map[*job]bool{}
	for i, j := range f.m.queue {
		if seen[j] || j.index != i {
			t.Fatalf("heap entry %d: duplicate %v, index %d", i, seen[j], j.index)
		}
		seen[j] = true
	}
	for _, j := range f.m.jobs {
		if j.rec.Enabled != seen[j] {
			t.Fatalf("job %s enabled %v but queued %v", j.rec.JobID, j.rec.Enabled, seen[j])
		}
	}
}

// TestManagerAcrossDST drives the manager with a fake clock in 5-minute
// steps across both transitions: each daily job runs once a day.
func TestManagerAcrossDST(t *testing.T) {
	cases := []struct {
		zone, expr, from string
		days             time.Duration
		want             []string
	}{
		{"America/New_York", "30 1 * * *", "2026-10-31T12:00:00Z", 2,
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
		{"America/New_York", "30 2 * * *", "2026-03-07T12:00:00Z", 2,
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
		{"Europe/Paris", "30 2 * * *", "2026-03-28T12:00:00Z", 2,
			[]string{"2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
		{"Europe/Paris", "30 2 * * *", "2026-10-24T12:00:00Z", 2,
			[]string{"2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
	}
	for _, c := range cases {
		t.Run(c.zone+" "+c.from, func(t *testing.T) {
			f := newFixtureOn(t, newStore(t), clockwork.NewFakeClockAt(utc(c.from)))
			f.create(t, Spec{Kind: KindCron, Schedule: c.expr, TZ: c.zone})
			var got []time.Time
			for range int(c.days * 24 * 12) {
				for _, call := range f.advanceTick(5 * time.Minute) {
					if call.op == "event" {
						got = append(got, call.at)
					}
				}
			}
			wantFires(t, got, c.want...)
		})
	}
}
