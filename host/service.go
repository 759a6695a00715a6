// Package host is the chime host service (docs/architecture.md): the state and time
// owner that the filter calls out to. It persists sessions, clock tasks and
// stopMessage state in Badger, keeps the NTP offset, applies directives,
// reserves due reminders for the filter to inject, executes server tools,
// runs the response path's followup chains (server tools, stopMessage,
// holds), and serves /healthz, /metrics and a read-only dashboard API.
// docs/host-api.md describes the HTTP API.
//
// Each feature lives in a package of its name: host/clock (the clock tool
// and reminders, docs/clock-tool.md), host/stopmessage (docs/continuation.md), host/route (the
// route pin, docs/directives.md), host/internal/resolve (the followup chain and its
// steps, docs/architecture.md, docs/continuation.md, docs/continuation.md#holds). This package wires them: prepare.go is the
// request path and hands each directive to its feature, tools.go
// dispatches server-tool calls, outcome.go commits or rolls back
// reservations, resolve.go orders the chain's steps.
package host

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/cron"
	"github.com/chimehq/chime/host/delivery"
	"github.com/chimehq/chime/host/internal/metrics"
	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/host/internal/touch"
	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/host/stopmessage"
	"github.com/chimehq/chime/host/timers"
	"github.com/chimehq/chime/host/ui"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/ntp"
	"github.com/chimehq/chime/storage"
)

// ToolExecutor runs one server-tool call for the requesting session and
// returns the tool's JSON result (docs/clock-tool.md). Failures are results with
// ok:false, never Go errors. ctx may carry clock.WithLocation for the
// request's time zone. The response path calls it in process; POST
// /v1/tools/execute exposes it over HTTP.
type ToolExecutor interface {
	Execute(ctx context.Context, sessionID, requestID, name string, args json.RawMessage) json.RawMessage
}

// Service is the host. Create it with New, serve it with Run (or Serve),
// and Close it when not running.
type Service struct {
	cfg      Config
	log      *slog.Logger
	store    *storage.Store
	tracker  *ntp.Tracker
	clock    timesource.Clock // host time: wall clock + NTP offset (tracker.Clock)
	engine   *clock.Engine
	timers   *timers.Manager
	cron     *cron.Manager
	events   *ui.Broker   // the dashboard's change stream (docs/dashboard.md)
	gens     *generations // the prepare generation (skip.go)
	stops    *stopmessage.Messages
	tools    *serverTools
	touches  *touch.Batcher
	metrics  *metrics.Metrics
	tokenSum [sha256.Size]byte
	handler  http.Handler
	resolver *resolve.Resolver
	delivery *delivery.Queue

	zones   sync.Map // IANA name → *time.Location
	markers markerLedger

	// The scheduler (docs/scheduler.md): wakes, heartbeats, templates.
	sched    *scheduler.Scheduler
	wake     wakeState
	wakeHTTP *http.Client

	prepareSlots   chan struct{} // admission control of prepare calls
	prepareWaiting atomic.Int64  // calls waiting for a slot
	shedLog        periodicLog
	lateLog        periodicLog // prepares whose directives the deadline undid
	// stageFault, when set, fails the prepare's transaction at the
	// directive it is given (tests: a storage failure part-way).
	stageFault func(index int) error

	// drain: every HTTP request holds it for reading; Close takes it for
	// writing, so the store closes only after the requests in flight end,
	// and later ones get 503 instead of storage errors.
	drain     sync.RWMutex
	closeOnce sync.Once
	closeErr  error
}

var _ ToolExecutor = (*Service)(nil)

// responseAllowance is how long a response may still take after its
// prepare: a task due within holds.max of the response's end can be held
// for, so prepare's mayContinue looks this much further ahead.
const responseAllowance = 2 * time.Minute

// New opens the store in cfg.DataDir and wires the service. It starts
// nothing: no NTP sync, no sweep, no listener.
func New(cfg Config, logger *slog.Logger) (*Service, error) {
	cfg = cfg.withDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	if cfg.Token == "" {
		// The development token is public: fine where only this machine
		// can connect, a key for everyone elsewhere (docs/failures.md).
		if !loopbackAddr(cfg.Addr) {
			return nil, fmt.Errorf("host: listening on %s (beyond loopback) needs a secret: set CHIME_HOST_TOKEN (and the same token in the filter's plugin configuration); the development token is only accepted on a loopback address", cfg.Addr)
		}
		cfg.Token = DevToken
		logger.Debug("CHIME_HOST_TOKEN is not set; using the development token on a loopback listener")
	}
	store, err := storage.Open(cfg.DataDir, storage.Options{Logger: logger, MinFree: cfg.MinFreeBytes, FreeSpace: cfg.FreeSpace})
	if err != nil {
		return nil, fmt.Errorf("host: %w", err)
	}
	tracker, err := ntp.New(cfg.NTP, store, ntp.WithClock(cfg.Clock), ntp.WithLogger(logger))
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("host: %w", err)
	}
	hostClock := tracker.Clock()
	engine, err := clock.New(clock.Config{
		Store: store, Clock: hostClock, NTP: tracker.Snapshot,
		DueWindow: cfg.DueWindow, Retention: cfg.Retention, Logger: logger,
		PendingHorizon: cfg.HoldMax + responseAllowance,
		OwnedByProcess: ownedByProcess,
	})
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("host: %w", err)
	}
	s := &Service{
		cfg: cfg, log: logger, store: store, tracker: tracker, clock: hostClock, engine: engine,
		stops:    stopmessage.New(store),
		touches:  touch.New(store, logger),
		metrics:  metrics.New(tracker.Snapshot),
		tokenSum: sha256.Sum256([]byte(cfg.Token)),
		events:   ui.NewBroker(cfg.Clock, 0),
		gens:     newGenerations(cfg.Clock, cfg.Clock.Now()),

		prepareSlots: make(chan struct{}, cfg.MaxConcurrentPrepares),
	}
	store.SetPrepareChangeHook(s.gens.bump) // skip.go
	s.timers, err = timers.New(timers.Config{
		Store: store, Clock: hostClock, Mono: cfg.Clock,
		MaxWait: cfg.TimerMaxWait, MaxPerSession: cfg.TimerMaxPerSession, Retention: cfg.TimerRetention,
		Notify:  s.timerNotice,
		Fired:   func(late time.Duration) { s.metrics.TimerLateness.Observe(late.Seconds()) },
		Changed: s.timerChanged,
		Logger:  logger,
	})
	if err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("host: %w", err)
	}
	s.metrics.RegisterGaugeFunc("chime_timers_live", "Timers running, waited on, paused or in the background.",
		func() float64 { return float64(s.timers.Live()) })
	if err := s.newCron(); err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("host: %w", err)
	}
	s.metrics.RegisterStorage(func() metrics.StorageState {
		sp := store.Space()
		return metrics.StorageState{FreeBytes: sp.Free, MinFreeBytes: sp.MinFree, Writable: !sp.Low}
	})
	s.metrics.RegisterReservationTTL(func() float64 { return engine.ReservationTTL().Seconds() })
	s.wake = newWakeState()
	s.wakeHTTP = &http.Client{
		Timeout:       cfg.FollowupTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport:     &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16},
	}
	s.sched = scheduler.New(scheduler.Config{
		Runner: wakeRunner{s}, Clock: hostClock, MaxConcurrent: cfg.Wake.MaxConcurrentRuns,
		Observe: func(_ scheduler.Reason, late time.Duration) { s.metrics.WakeLateness.Observe(late.Seconds()) },
		Logger:  logger,
	})
	if s.delivery, err = s.newDeliveryQueue(); err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("host: %w", err)
	}
	s.tools = s.newServerTools()
	if s.resolver, err = s.newResolver(); err != nil {
		_ = store.Close()
		return nil, fmt.Errorf("host: %w", err)
	}
	s.handler = s.draining(s.routes())
	return s, nil
}

// Handler is the host's HTTP API (docs/host-api.md).
func (s *Service) Handler() http.Handler { return s.handler }

// Run listens on Config.Addr and serves until ctx ends; see Serve. The
// store is closed when Run returns, whatever the reason.
func (s *Service) Run(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		_ = s.Close()
		return fmt.Errorf("host: listen: %w", err)
	}
	return s.Serve(ctx, ln)
}

// Serve starts the NTP tracker, the clock sweep (startup scan, then every
// 60 s; docs/clock-tool.md) and the session-touch writer, and serves HTTP on ln until
// ctx ends. It then stops them, closes the store and returns.
func (s *Service) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.tracker.Start(ctx)
	// Timers come back before the first request can call a timer tool.
	if n, done, err := s.timers.Restore(ctx); err != nil {
		s.log.Warn("restoring timers failed; those not restored stay stored", "err", err)
	} else if n > 0 {
		s.log.Info("timers restored", "count", n, "completed while down", done)
	}
	s.restoreWakes(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { _ = s.sched.Run(ctx) })
	wg.Go(func() { _ = s.engine.Run(ctx) })
	wg.Go(func() { _ = s.timers.Run(ctx) })
	s.restoreCron()
	wg.Go(func() { _ = s.cron.Run(ctx) })
	wg.Go(func() { _ = s.delivery.Run(ctx) })
	ticker := s.clock.NewTicker(s.cfg.TouchSync)
	defer ticker.Stop()
	wg.Go(func() { s.touches.Run(ctx, ticker.Chan()) })
	runTicker := s.clock.NewTicker(s.cfg.TouchSync)
	defer runTicker.Stop()
	wg.Go(func() { s.runRecorder(ctx, runTicker.Chan()) })

	srv := &http.Server{
		Handler:           s.handler,
		ReadHeaderTimeout: 10 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	s.log.Info("host listening", "addr", ln.Addr().String(), "data", s.cfg.DataDir)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	shutdownCtx, stop := context.WithTimeout(context.Background(), 5*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	cancel()
	wg.Wait()
	if errors.Is(serveErr, http.ErrServerClosed) {
		serveErr = nil
	}
	return errors.Join(serveErr, s.Close())
}

// Close writes pending session touches and closes the store. It is safe to
// call more than once.
func (s *Service) Close() error {
	s.closeOnce.Do(func() {
		s.delivery.Close() // ends the event streams, which hold the drain lock
		s.drain.Lock()     // never released: the service is closed
		if err := s.touches.Flush(); err != nil {
			s.log.Warn("host: final session touch flush failed", "err", err)
		}
		if err := s.flushRuns(); err != nil {
			s.log.Warn("host: final wake run flush failed", "err", err)
		}
		s.closeErr = s.store.Close()
	})
	return s.closeErr
}

// draining lets requests through while the service is open and answers
// 503 once Close has begun (docs/failures.md: prepare during shutdown must not
// reach a closed store).
func (s *Service) draining(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.drain.TryRLock() {
			writeError(w, http.StatusServiceUnavailable, "host is shutting down")
			return
		}
		defer s.drain.RUnlock()
		h.ServeHTTP(w, r)
	})
}

// now is host time with the NTP offset (docs/time.md#time-tag).
func (s *Service) now() time.Time { return s.clock.Now() }

func (s *Service) ntpInfo() hostapi.NTPInfo {
	st := s.tracker.Snapshot()
	info := hostapi.NTPInfo{Status: string(st.Status), OffsetMs: st.OffsetMs, Server: st.Server}
	if !st.UpdatedAt.IsZero() {
		info.UpdatedAt = st.UpdatedAt.UnixMilli()
	}
	return info
}

// State answers the filter's tick (GET /v1/filter/state).
func (s *Service) State() hostapi.StateResponse {
	return hostapi.StateResponse{NowMs: s.now().UnixMilli(), NTP: s.ntpInfo()}
}

// location resolves an IANA zone name, cached; nil when unknown or empty.
func (s *Service) location(name string) *time.Location {
	if name == "" {
		return nil
	}
	if v, ok := s.zones.Load(name); ok {
		return v.(*time.Location)
	}
	loc, err := llm.LoadTimezone(name) // the filter's loader: same zones on both sides
	if err != nil {
		s.log.Debug("host: unknown time zone ignored", "tz", name)
		return nil
	}
	s.zones.Store(name, loc)
	return loc
}

// loopbackAddr reports whether a listen address (host:port) only accepts
// connections from this machine.
func loopbackAddr(addr string) bool {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
