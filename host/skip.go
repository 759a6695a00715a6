package host

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

// Skipping prepare (docs/architecture.md#skipping-prepare, RATIONALE.md):
// the host's side. Every prepare answer carries the generation it was
// computed under and for how long the session stays quiet; the
// generation moves whenever anything a prepare answer depends on changes
// by another path, and a host API call that changes state answers only
// once the filters know the new generation (settle).

// generations is the host-wide prepare generation and the filter
// instances that poll it.
type generations struct {
	gen   atomic.Int64
	clock timesource.Clock // monotonic waits (Config.Clock)

	mu     sync.Mutex
	bumped chan struct{} // closed and replaced by bump
	polled chan struct{} // closed and replaced when an instance reports
	inst   map[string]*pollInstance
}

// pollInstance is one filter root context that polls the generation.
type pollInstance struct {
	reported int64     // the generation it said it knows in its latest poll
	seen     time.Time // when the host last received one of its polls
	polls    uint64    // how many of its polls the host received
}

// maxPollInstances bounds the registry: instance ids come from the
// (authenticated) filter, one per root context and worker.
const maxPollInstances = 4096

func newGenerations(c timesource.Clock, start time.Time) *generations {
	g := &generations{clock: c, bumped: make(chan struct{}), polled: make(chan struct{}), inst: map[string]*pollInstance{}}
	// A restarted host starts above anything it handed out before, so a
	// filter's entry of the old process never matches the new one.
	g.gen.Store(max(start.UnixNano(), 1))
	return g
}

// current is the generation now. Prepare reads it before the state its
// answer reflects: a change written after the read bumps past it.
func (g *generations) current() int64 { return g.gen.Load() }

// bump moves the generation: something a prepare answer depends on has
// changed (or may have). Outstanding polls are answered at once.
func (g *generations) bump() {
	g.mu.Lock()
	g.gen.Add(1)
	close(g.bumped)
	g.bumped = make(chan struct{})
	g.mu.Unlock()
}

// note records a poll of instance id reporting known, at now, and
// returns the poll's number for abandoned.
func (g *generations) note(id string, known int64) uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	in := g.inst[id]
	if in == nil {
		if len(g.inst) >= maxPollInstances {
			g.dropLapsed()
		}
		in = &pollInstance{}
		g.inst[id] = in
	}
	in.reported = max(in.reported, known)
	in.seen = g.clock.Now()
	in.polls++
	close(g.polled)
	g.polled = make(chan struct{})
	return in.polls
}

// abandoned forgets instance id when the poll numbered n, its latest, was
// given up by the filter's side before it was answered: the proxy failed
// the call (a timeout, a reset), and a filter drops its trust on a failed
// poll before the proxy lets go of the connection; or the VM went away (a
// configuration change, the local runtime's switch to compiled VMs), and
// will never skip again. Without this an API call would wait out the
// lapse for an instance that is gone. A later poll registers it again.
func (g *generations) abandoned(id string, n uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if in := g.inst[id]; in != nil && in.polls == n {
		delete(g.inst, id)
		close(g.polled) // a settle waiting for it looks again
		g.polled = make(chan struct{})
	}
}

// lapse is how long after the host last received a poll of an instance
// that instance may still trust an older generation: its trust runs
// hostapi.GenerationTrust from sending a poll, which precedes receipt.
const lapse = hostapi.GenerationTrust + hostapi.GenerationSettleSlack

// dropLapsed forgets instances that can no longer trust anything (mu held).
func (g *generations) dropLapsed() {
	now := g.clock.Now()
	for id, in := range g.inst {
		if now.Sub(in.seen) >= lapse {
			delete(g.inst, id)
		}
	}
}

// poll answers a filter's long poll: at once when known is not the
// current generation, otherwise when it moves, after
// hostapi.GenerationHold, or when ctx ends.
func (g *generations) poll(ctx context.Context, id string, known int64) int64 {
	n := g.note(id, known)
	g.mu.Lock()
	bumped := g.bumped
	g.mu.Unlock()
	if known == g.current() {
		t := g.clock.NewTimer(hostapi.GenerationHold)
		select {
		case <-bumped:
		case <-t.Chan():
		case <-ctx.Done():
			g.abandoned(id, n)
		}
		t.Stop()
	}
	return g.current()
}

// settle waits until no filter instance can skip a prepare on a
// generation older than target: each has reported target (or later) in
// a poll, or has not been heard from for long enough that it no longer
// trusts an older one. It gives up when ctx ends.
func (g *generations) settle(ctx context.Context, target int64) {
	for {
		g.mu.Lock()
		now := g.clock.Now()
		wait := time.Duration(-1)
		for id, in := range g.inst {
			if in.reported >= target {
				continue
			}
			left := lapse - now.Sub(in.seen)
			if left <= 0 {
				delete(g.inst, id)
				continue
			}
			if wait < 0 || left < wait {
				wait = left
			}
		}
		polled := g.polled
		g.mu.Unlock()
		if wait < 0 {
			return
		}
		t := g.clock.NewTimer(wait)
		select {
		case <-polled:
		case <-t.Chan():
		case <-ctx.Done():
			t.Stop()
			return
		}
		t.Stop()
	}
}

// timerChanged is the timers' change callback: the dashboard's stream,
// and the generation, since a timer's notice time is read from memory.
func (s *Service) timerChanged(sid string) {
	s.events.Publish(sid)
	s.gens.bump()
}

// bumpAndSettle is what a change with a caller waiting does before it
// answers: the next request of any session is prepared against it.
func (s *Service) bumpAndSettle(ctx context.Context) {
	s.gens.bump()
	s.gens.settle(ctx, s.gens.current())
}

// serveState is GET /v1/filter/state: the tick's NTP view, and with
// hostapi.QueryInstance the generation long poll.
func (s *Service) serveState(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st := s.State()
	if id := q.Get(hostapi.QueryInstance); id != "" {
		if len(id) > 64 {
			writeError(w, http.StatusBadRequest, hostapi.QueryInstance+" longer than 64 bytes")
			return
		}
		known, err := strconv.ParseInt(q.Get(hostapi.QueryGeneration), 10, 64)
		if err != nil && q.Get(hostapi.QueryGeneration) != "" {
			writeError(w, http.StatusBadRequest, hostapi.QueryGeneration+" must be an integer")
			return
		}
		st.Generation = s.gens.poll(r.Context(), id, known)
		st.NowMs, st.NTP = s.now().UnixMilli(), s.ntpInfo()
	} else {
		st.Generation = s.gens.current()
	}
	writeJSON(w, http.StatusOK, st)
}

// handleTouch is POST /v1/filter/touch: requests that skipped prepare
// count as the session's activity, as a prepare would have.
func (s *Service) handleTouch(w http.ResponseWriter, r *http.Request) {
	var req hostapi.TouchRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if len(req.Sessions) > hostapi.MaxTouchSessions {
		writeError(w, http.StatusBadRequest, "more than "+strconv.Itoa(hostapi.MaxTouchSessions)+" sessions")
		return
	}
	now := s.now().UnixMilli()
	for _, t := range req.Sessions {
		if t.SessionID == "" {
			continue
		}
		at := min(t.AtMs, now) // never ahead of the host
		s.touches.Touch(t.SessionID, at)
		s.touchDelivery(hostapi.PrepareRequest{SessionID: t.SessionID})
		s.events.Publish(t.SessionID)
	}
	w.WriteHeader(http.StatusNoContent)
}

// quietFor is PrepareResponse.QuietMs: how long from now a prepare of sid
// would answer the same, nothing reserved and mayContinue false, unless
// the generation moves. ok is false when the answer is not a normal one
// (the deadline passed, the session could not be read).
func (s *Service) quietFor(sid string, now time.Time, tasks []storage.ClockTask, ans *hostapi.PrepareResponse, ok bool) time.Duration {
	if !ok || ans.Reserved || ans.MayContinue || ans.Reminders != "" {
		return 0
	}
	until := now.Add(hostapi.MaxQuiet)
	if sid == "" {
		return hostapi.MaxQuiet
	}
	// A task comes due (or near enough for a hold to want it).
	if at := s.engine.QuietUntil(tasks, now); !at.IsZero() && at.Before(until) {
		until = at
	}
	// A background timer's notice nears (noticeWithin turns mayContinue on).
	if at, ok := s.timers.NextNotice(sid); ok {
		if t := at.Add(-(s.cfg.HoldMax + responseAllowance)); t.Before(until) {
			until = t
		}
	}
	return max(until.Sub(now), 0)
}

// settling wraps the handlers of the host API that can change what a
// prepare answers (every method but GET and HEAD outside the filter's own
// endpoints): before the answer goes out, the generation moves and the
// filters learn it, so the client's next request is prepared against the
// change (docs/architecture.md#skipping-prepare).
func (s *Service) settling(pattern string, h http.Handler) http.Handler {
	method, path, _ := strings.Cut(pattern, " ")
	if path == "" {
		method, path = "", pattern // a pattern without a method (MCP)
	}
	switch {
	case method == http.MethodGet || method == http.MethodHead,
		strings.HasPrefix(path, "/v1/filter/"),
		path == "/", path == "/{$}",
		path == PathMCP: // mcpTool settles after the call itself
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet || r.Method == http.MethodHead {
			h.ServeHTTP(w, r)
			return
		}
		sw := &settleWriter{ResponseWriter: w, settle: func() { s.bumpAndSettle(r.Context()) }}
		h.ServeHTTP(sw, r)
		sw.before()
	})
}

// settleWriter runs settle once, before the first byte of the answer.
type settleWriter struct {
	http.ResponseWriter
	settle func()
	done   bool
}

func (w *settleWriter) before() {
	if !w.done {
		w.done = true
		w.settle()
	}
}

func (w *settleWriter) WriteHeader(code int) {
	w.before()
	w.ResponseWriter.WriteHeader(code)
}

func (w *settleWriter) Write(b []byte) (int, error) {
	w.before()
	return w.ResponseWriter.Write(b)
}

func (w *settleWriter) Flush() {
	w.before()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *settleWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
