package cron

import (
	"container/heap"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

// Sink is what a firing job does; the host wires its scheduler to it.
type Sink interface {
	// EnqueueEvent queues text as a system event of the session under
	// contextKey ("cron:<jobID>"; a newer event of the same key replaces an
	// older one). Target main calls it, then Wake.
	EnqueueEvent(ctx context.Context, sessionID, contextKey, text string) error
	// Wake asks the scheduler to run the session (reason "cron").
	Wake(sessionID, reason string)
	// RunIsolated runs the model in a session of its own,
	// "<session>:cron:<jobID>", from the session's template, and delivers the
	// reply. An error means the run failed: the job backs off.
	RunIsolated(ctx context.Context, sessionID, jobID, text string) error
}

// WakeReason is the reason a main job wakes its session with.
const WakeReason = "cron"

// ContextKey is the system-event key of a job's text.
func ContextKey(jobID string) string { return "cron:" + jobID }

// IsolatedSession is the session id an isolated job runs in.
func IsolatedSession(sessionID, jobID string) string { return sessionID + ":cron:" + jobID }

// Errors of the job operations.
var (
	ErrUnknown  = errors.New("no such job")
	ErrLimit    = errors.New("too many jobs")
	ErrBusy     = errors.New("the job is running")
	ErrState    = errors.New("not possible in the job's state")
	ErrDisabled = errors.New("cron jobs are off (cron.enabled: false in the host config)")
)

// Defaults.
const (
	DefaultRunTimeout = 10 * time.Minute
	maxErrorLen       = 500
)

// Outcomes of a run, as Config.Observe gets them.
const (
	OutcomeOK     = "ok"
	OutcomeFailed = "failed"
)

// Config wires a Manager. Store and Sink are required.
type Config struct {
	Store *storage.Store
	// Clock is host time (with the NTP offset); waits run on it too.
	Clock timesource.Clock
	Sink  Sink
	// MaxPerSession bounds the jobs of one session (DefaultMaxPerSession).
	MaxPerSession int
	// Disabled keeps the jobs stored and listed but never runs them, and
	// refuses new ones (cron.enabled: false).
	Disabled bool
	// RunTimeout bounds one run (DefaultRunTimeout).
	RunTimeout time.Duration
	// Observe, if set, sees every run: its outcome, and for a scheduled
	// run how late it started against its due time (negative = manual).
	Observe func(outcome string, late time.Duration)
	Logger  *slog.Logger
}

// Manager owns every cron job of the host. It is safe for concurrent use.
type Manager struct {
	cfg   Config
	log   *slog.Logger
	clock timesource.Clock

	mu     sync.Mutex // guards jobs, perSes, queue and each job's heap fields and running
	jobs   map[key]*job
	perSes map[string]int
	queue  jobHeap
	kick   chan struct{}
	runs   sync.WaitGroup // runs in flight
	// onArm, if set (tests), sees every wait the loop arms.
	onArm func(time.Duration)
}

type key struct{ session, id string }

// job is one job in memory. mu guards rec and sched and serializes its
// writes to the store; it is taken before Manager.mu.
type job struct {
	mu      sync.Mutex
	rec     storage.CronJob
	sched   Schedule
	deleted bool
	source  string // rec.Source, fixed at creation (read under Manager.mu)

	// guarded by Manager.mu
	running bool
	at      time.Time // due time while in the heap
	index   int       // -1 when not in the heap
}

// New checks cfg and fills its defaults. Call Restore (and Declare), then Run.
func New(cfg Config) (*Manager, error) {
	if cfg.Store == nil {
		return nil, errors.New("cron: Config.Store is required")
	}
	if cfg.Sink == nil {
		return nil, errors.New("cron: Config.Sink is required")
	}
	if cfg.MaxPerSession <= 0 {
		cfg.MaxPerSession = DefaultMaxPerSession
	}
	if cfg.RunTimeout <= 0 {
		cfg.RunTimeout = DefaultRunTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Manager{
		cfg: cfg, log: cfg.Logger, clock: timesource.OrReal(cfg.Clock),
		jobs: map[key]*job{}, perSes: map[string]int{}, kick: make(chan struct{}, 1),
	}, nil
}

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMs(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "j" + hex.EncodeToString(b[:])
}

// Restore loads every stored job. An enabled job whose next run passed
// while the host was down is due at once: it runs once, then follows its
// schedule from now on (a backlog is never replayed). Call it once, before
// Run; jobs already in memory are kept as they are.
func (m *Manager) Restore() (int, error) {
	now := m.clock.Now()
	var recs []storage.CronJob
	if err := m.cfg.Store.ScanCronJobs(func(j storage.CronJob) error {
		recs = append(recs, j)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("cron: %w", err)
	}
	n := 0
	for _, rec := range recs {
		sched, err := ParseSchedule(rec.Kind, rec.Schedule, rec.TZ)
		if err != nil {
			m.log.Warn("cron: a stored job no longer parses; it stays stored and disabled", "session", rec.SessionID, "job", rec.JobID, "err", err)
			rec.Enabled = false
		}
		j := &job{rec: rec, sched: sched, index: -1, source: rec.Source}
		if rec.Enabled && rec.NextRunAt == 0 {
			if next, ok := m.nextRun(j, now); ok {
				j.rec.NextRunAt = ms(next)
			}
		}
		m.mu.Lock()
		if _, loaded := m.jobs[key{rec.SessionID, rec.JobID}]; loaded {
			m.mu.Unlock()
			continue
		}
		m.jobs[key{rec.SessionID, rec.JobID}] = j
		m.perSes[rec.SessionID]++
		if j.rec.Enabled && j.rec.NextRunAt != 0 {
			j.at = fromMs(j.rec.NextRunAt)
			heap.Push(&m.queue, j)
		}
		m.mu.Unlock()
		n++
	}
	m.wake()
	return n, nil
}

// nextRun is the job's next scheduled run after now.
func (m *Manager) nextRun(j *job, now time.Time) (time.Time, bool) {
	return j.sched.Next(now, fromMs(j.rec.CreatedAt))
}

// wake tells the loop that the earliest due time may have moved.
func (m *Manager) wake() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Run is the one timer of every job: it sleeps until the earliest due job
// (at most timesource.MaxStep, then reads host time again, so long sleeps
// do not drift), starts what is due and loops until ctx ends. It then waits
// for the runs in flight.
func (m *Manager) Run(ctx context.Context) error {
	defer m.runs.Wait()
	if m.cfg.Disabled {
		return nil
	}
	for {
		select {
		case <-m.kick:
		default:
		}
		now := m.clock.Now()
		m.startDue(ctx, now)
		wait := timesource.MaxStep
		m.mu.Lock()
		if m.queue.Len() > 0 {
			wait = min(wait, m.queue[0].at.Sub(now))
		}
		m.mu.Unlock()
		if wait <= 0 {
			if ctx.Err() != nil {
				return nil
			}
			continue
		}
		if m.onArm != nil {
			m.onArm(wait)
		}
		t := m.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-m.kick:
			t.Stop()
		case <-t.Chan():
		}
	}
}

// startDue starts every job due at now, each in its own goroutine.
func (m *Manager) startDue(ctx context.Context, now time.Time) {
	m.mu.Lock()
	var due []*job
	var dueAt []time.Time
	for m.queue.Len() > 0 && !m.queue[0].at.After(now) {
		j := heap.Pop(&m.queue).(*job)
		j.running = true
		due = append(due, j)
		dueAt = append(dueAt, j.at)
	}
	m.runs.Add(len(due))
	m.mu.Unlock()
	for i, j := range due {
		go func() {
			defer m.runs.Done()
			m.run(ctx, j, dueAt[i], false)
		}()
	}
}

// Tick starts what is due now and waits until those runs ended (tests and
// tools that drive the manager without Run).
func (m *Manager) Tick(ctx context.Context) {
	m.startDue(ctx, m.clock.Now())
	m.runs.Wait()
}

// run delivers one run of j (running is set) and records its result.
func (m *Manager) run(ctx context.Context, j *job, due time.Time, manual bool) storage.CronJob {
	j.mu.Lock()
	rec := j.rec
	j.mu.Unlock()
	start := m.clock.Now()
	rctx, cancel := context.WithTimeout(ctx, m.cfg.RunTimeout)
	err := m.deliver(rctx, rec)
	cancel()
	if err != nil && ctx.Err() != nil {
		// The host is stopping: the run counts as not run. The job stays
		// due as stored and runs again at the next start.
		m.log.Debug("cron: run interrupted by shutdown", "session", rec.SessionID, "job", rec.JobID)
		m.mu.Lock()
		j.running = false
		m.mu.Unlock()
		return rec
	}
	outcome := OutcomeOK
	if err != nil {
		outcome = OutcomeFailed
	}
	if m.cfg.Observe != nil {
		late := time.Duration(-1)
		if !manual {
			late = start.Sub(due)
		}
		m.cfg.Observe(outcome, late)
	}
	return m.finish(j, start, err)
}

func (m *Manager) deliver(ctx context.Context, rec storage.CronJob) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("cron sink panicked: %v", r)
		}
	}()
	switch rec.Target {
	case TargetIsolated:
		return m.cfg.Sink.RunIsolated(ctx, rec.SessionID, rec.JobID, rec.Text)
	default:
		if err := m.cfg.Sink.EnqueueEvent(ctx, rec.SessionID, ContextKey(rec.JobID), rec.Text); err != nil {
			return err
		}
		m.cfg.Sink.Wake(rec.SessionID, WakeReason)
		return nil
	}
}

// finish records a run that started at start and ended with err, decides
// the next run, writes the job through and puts it back in the heap.
func (m *Manager) finish(j *job, start time.Time, runErr error) storage.CronJob {
	j.mu.Lock()
	defer j.mu.Unlock()
	now := m.clock.Now()
	r := &j.rec
	r.LastRunAt = ms(start)
	r.Runs++
	if runErr == nil {
		r.LastStatus, r.LastError, r.ConsecutiveFailures = StatusOK, "", 0
	} else {
		r.LastStatus, r.ConsecutiveFailures = StatusFailed, r.ConsecutiveFailures+1
		r.LastError = truncate(runErr.Error(), maxErrorLen)
	}
	var next time.Time
	if r.Enabled {
		switch {
		case runErr != nil:
			next = now.Add(Backoff(r.ConsecutiveFailures))
			if r.Kind != KindAt {
				if n, ok := m.nextRun(j, now); ok && n.After(next) {
					next = n
				}
			}
		case r.Kind == KindAt:
			r.Enabled = false // one-shot: done
		default:
			n, ok := m.nextRun(j, now)
			if !ok {
				r.Enabled = false
			}
			next = n
		}
	}
	r.NextRunAt = ms(next)
	if runErr != nil {
		m.log.Warn("cron: job run failed", "session", r.SessionID, "job", r.JobID, "failures", r.ConsecutiveFailures, "retryAt", next, "err", runErr)
	} else {
		m.log.Debug("cron: job ran", "session", r.SessionID, "job", r.JobID, "next", next)
	}
	if !j.deleted {
		if err := m.cfg.Store.PutCronJob(*r); err != nil {
			m.log.Warn("cron: writing a job's run failed", "session", r.SessionID, "job", r.JobID, "err", err)
		}
	}
	m.mu.Lock()
	j.running = false
	if !j.deleted && r.Enabled && !next.IsZero() {
		j.at = next
		heap.Push(&m.queue, j)
	}
	m.mu.Unlock()
	m.wake()
	return *r
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }

// Create adds a job from spec (a FieldError when the spec is bad,
// ErrLimit past MaxPerSession).
func (m *Manager) Create(spec Spec) (storage.CronJob, error) {
	return m.create(spec, "", "")
}

func (m *Manager) create(spec Spec, id, source string) (storage.CronJob, error) {
	if m.cfg.Disabled {
		return storage.CronJob{}, ErrDisabled
	}
	sp, sched, err := Normalize(spec)
	if err != nil {
		return storage.CronJob{}, err
	}
	now := m.clock.Now()
	if id == "" {
		id = newID()
	}
	rec := storage.CronJob{
		JobID: id, SessionID: sp.Session, Name: sp.Name, Kind: sp.Kind, Schedule: sp.Schedule, TZ: sp.TZ,
		Text: sp.Text, Target: sp.Target, Enabled: true, Source: source, CreatedAt: ms(now),
	}
	j := &job{rec: rec, sched: sched, index: -1, source: source}
	next, ok := m.nextRun(j, now)
	if !ok {
		if sched.Kind == KindAt {
			return storage.CronJob{}, bad("schedule", "%s has passed; an at time must be in the future", sched.At().Format(time.RFC3339))
		}
		return storage.CronJob{}, bad("schedule", "%q never matches a date", sp.Schedule)
	}
	j.rec.NextRunAt = ms(next)
	k := key{sp.Session, id}
	m.mu.Lock()
	if _, dup := m.jobs[k]; dup {
		m.mu.Unlock()
		return storage.CronJob{}, fmt.Errorf("cron: job %s exists", id)
	}
	if m.perSes[sp.Session] >= m.cfg.MaxPerSession {
		m.mu.Unlock()
		return storage.CronJob{}, fmt.Errorf("%w: session %q has %d jobs, the most cron.maxPerSession allows", ErrLimit, sp.Session, m.cfg.MaxPerSession)
	}
	m.jobs[k] = j // reserve the slot before the write
	m.perSes[sp.Session]++
	m.mu.Unlock()
	if err := m.cfg.Store.PutCronJob(j.rec); err != nil {
		m.mu.Lock()
		delete(m.jobs, k)
		m.dropSession(sp.Session)
		m.mu.Unlock()
		return storage.CronJob{}, fmt.Errorf("cron: %w", err)
	}
	m.mu.Lock()
	j.at = next
	heap.Push(&m.queue, j)
	m.mu.Unlock()
	m.wake()
	return j.rec, nil
}

// dropSession lowers a session's count; m.mu is held.
func (m *Manager) dropSession(sid string) {
	if m.perSes[sid]--; m.perSes[sid] <= 0 {
		delete(m.perSes, sid)
	}
}

func (m *Manager) get(sessionID, id string) (*job, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	j, ok := m.jobs[key{sessionID, id}]
	if !ok {
		return nil, fmt.Errorf("%w: %q in session %q", ErrUnknown, id, sessionID)
	}
	return j, nil
}

// Get returns one job.
func (m *Manager) Get(sessionID, id string) (storage.CronJob, error) {
	j, err := m.get(sessionID, id)
	if err != nil {
		return storage.CronJob{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.rec, nil
}

// List returns a session's jobs, oldest first.
func (m *Manager) List(sessionID string) []storage.CronJob {
	return m.list(func(k key) bool { return k.session == sessionID })
}

// ListAll returns every job of every session, oldest first.
func (m *Manager) ListAll() []storage.CronJob {
	return m.list(func(key) bool { return true })
}

func (m *Manager) list(keep func(key) bool) []storage.CronJob {
	m.mu.Lock()
	var js []*job
	for k, j := range m.jobs {
		if keep(k) {
			js = append(js, j)
		}
	}
	m.mu.Unlock()
	out := make([]storage.CronJob, 0, len(js))
	for _, j := range js {
		j.mu.Lock()
		out = append(out, j.rec)
		j.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b storage.CronJob) int {
		if a.CreatedAt != b.CreatedAt {
			return int(a.CreatedAt - b.CreatedAt)
		}
		return strings.Compare(a.JobID, b.JobID)
	})
	return out
}

// HasJobs reports whether the session has a job (enabled or not).
func (m *Manager) HasJobs(sessionID string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.perSes[sessionID] > 0
}

// Live is how many jobs are enabled.
func (m *Manager) Live() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.queue.Len()
	for _, j := range m.jobs {
		if j.running {
			n++
		}
	}
	return n
}

// Delete removes a job. A run under way finishes but is not recorded.
func (m *Manager) Delete(sessionID, id string) error {
	j, err := m.get(sessionID, id)
	if err != nil {
		return err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.deleted {
		return fmt.Errorf("%w: %q in session %q", ErrUnknown, id, sessionID)
	}
	if _, err := m.cfg.Store.DeleteCronJob(sessionID, id); err != nil {
		return fmt.Errorf("cron: %w", err)
	}
	j.deleted = true
	m.mu.Lock()
	delete(m.jobs, key{sessionID, id})
	m.dropSession(sessionID)
	m.unqueue(j)
	m.mu.Unlock()
	m.wake()
	return nil
}

// unqueue takes j out of the heap if it is there; m.mu is held.
func (m *Manager) unqueue(j *job) {
	if j.index >= 0 {
		heap.Remove(&m.queue, j.index)
	}
}

// Pause disables a job: it keeps its state but does not run until Resume.
func (m *Manager) Pause(sessionID, id string) (storage.CronJob, error) {
	return m.change(sessionID, id, func(j *job, now time.Time) (time.Time, error) {
		j.rec.Enabled = false
		j.rec.NextRunAt = 0
		return time.Time{}, nil
	})
}

// Resume enables a job again; its next run is the schedule's next after
// now (missed runs are not replayed). An at job whose time has passed
// cannot resume (ErrState).
func (m *Manager) Resume(sessionID, id string) (storage.CronJob, error) {
	if m.cfg.Disabled {
		return storage.CronJob{}, ErrDisabled
	}
	return m.change(sessionID, id, func(j *job, now time.Time) (time.Time, error) {
		next, ok := m.nextRun(j, now)
		if !ok {
			return time.Time{}, fmt.Errorf("%w: the job has no run left (an at time that has passed); create a new one", ErrState)
		}
		j.rec.Enabled = true
		j.rec.ConsecutiveFailures = 0
		j.rec.NextRunAt = ms(next)
		return next, nil
	})
}

// change applies fn to a job that is not running, writes it through and
// re-queues it at the time fn returns (zero: not queued).
func (m *Manager) change(sessionID, id string, fn func(*job, time.Time) (time.Time, error)) (storage.CronJob, error) {
	j, err := m.get(sessionID, id)
	if err != nil {
		return storage.CronJob{}, err
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	m.mu.Lock()
	running := j.running
	m.mu.Unlock()
	if running {
		return storage.CronJob{}, ErrBusy
	}
	prev := j.rec
	next, err := fn(j, m.clock.Now())
	if err != nil {
		j.rec = prev
		return storage.CronJob{}, err
	}
	if err := m.cfg.Store.PutCronJob(j.rec); err != nil {
		j.rec = prev
		return storage.CronJob{}, fmt.Errorf("cron: %w", err)
	}
	m.mu.Lock()
	m.unqueue(j)
	// A run that started meanwhile re-queues the job itself when it ends,
	// from the state written here.
	if !next.IsZero() && !j.deleted && !j.running {
		j.at = next
		heap.Push(&m.queue, j)
	}
	m.mu.Unlock()
	m.wake()
	return j.rec, nil
}

// RunNow runs a job at once, whatever its schedule or state, and returns
// it as recorded after the run. The schedule goes on from now; an at job
// is done afterwards. ErrBusy when it is running already.
func (m *Manager) RunNow(ctx context.Context, sessionID, id string) (storage.CronJob, error) {
	if m.cfg.Disabled {
		return storage.CronJob{}, ErrDisabled
	}
	j, err := m.get(sessionID, id)
	if err != nil {
		return storage.CronJob{}, err
	}
	m.mu.Lock()
	if j.running || j.deleted {
		m.mu.Unlock()
		if j.deleted {
			return storage.CronJob{}, fmt.Errorf("%w: %q in session %q", ErrUnknown, id, sessionID)
		}
		return storage.CronJob{}, ErrBusy
	}
	m.unqueue(j)
	j.running = true
	m.runs.Add(1)
	m.mu.Unlock()
	defer m.runs.Done()
	return m.run(context.WithoutCancel(ctx), j, m.clock.Now(), true), nil
}

// Declared is a job of the host config file.
type Declared struct {
	Spec
	// Path names it in errors, e.g. "cron.jobs[2]".
	Path string
}

// DeclaredID is the stable id of a declared job: the same declaration
// keeps its job (and its state) across restarts.
func DeclaredID(sp Spec) string {
	h := sha256.New()
	for _, s := range []string{sp.Session, sp.Name, sp.Kind, sp.Schedule, sp.TZ, sp.Target, sp.Text} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return "cfg-" + hex.EncodeToString(h.Sum(nil)[:10])
}

// Declare reconciles the jobs of the host config file with the store: a
// declared job that is not stored yet is created, one that is keeps its
// state, and a stored config job no longer declared is deleted. Call it
// after Restore. Problems with single jobs are returned together; the
// others are applied.
func (m *Manager) Declare(decls []Declared) error {
	want := map[key]bool{}
	var errs []error
	for _, d := range decls {
		sp, _, err := Normalize(d.Spec)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.%w", d.Path, err))
			continue
		}
		id := DeclaredID(sp)
		want[key{sp.Session, id}] = true
		if _, err := m.get(sp.Session, id); err == nil {
			continue
		}
		if _, err := m.create(sp, id, "config"); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.Path, err))
		}
	}
	m.mu.Lock()
	var stale []key
	for k, j := range m.jobs {
		if !want[k] && j.source == "config" {
			stale = append(stale, k)
		}
	}
	m.mu.Unlock()
	for _, k := range stale {
		if err := m.Delete(k.session, k.id); err != nil && !errors.Is(err, ErrUnknown) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// jobHeap orders jobs by due time.
type jobHeap []*job

func (h jobHeap) Len() int           { return len(h) }
func (h jobHeap) Less(i, k int) bool { return h[i].at.Before(h[k].at) }
func (h jobHeap) Swap(i, k int) {
	h[i], h[k] = h[k], h[i]
	h[i].index = i
	h[k].index = k
}
func (h *jobHeap) Push(x any) {
	j := x.(*job)
	j.index = len(*h)
	*h = append(*h, j)
}
func (h *jobHeap) Pop() any {
	old := *h
	n := len(old)
	j := old[n-1]
	old[n-1] = nil
	j.index = -1
	*h = old[:n-1]
	return j
}
