// Package resolve is the host side of the response path (docs/architecture.md, docs/continuation.md, docs/continuation.md#holds):
// given a finished upstream turn, it runs the followup chain — asks its
// steps in priority order how the turn continues, sends each followup back
// through the proxy listener, and loops until the chain ends or a loop
// guard stops it. It also cancels chains whose client went away.
//
// Each way a turn can continue is a Step: server tools (step_tools.go) and
// clock holds (step_hold.go) are here, stopMessage's step is in
// host/stopmessage. The loop and its guards are in chain.go.
package resolve

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/llm"
)

// Reasons a chain ends (hostapi.ResolveResponse.Reason), named here for
// the chain code.
const (
	ReasonDone          = hostapi.ReasonDone
	ReasonClientTools   = hostapi.ReasonClientTools
	ReasonMaxHops       = hostapi.ReasonMaxHops
	ReasonMaxDuration   = hostapi.ReasonMaxDuration
	ReasonRepeated      = hostapi.ReasonRepeated
	ReasonCancelled     = hostapi.ReasonCancelled
	ReasonRejected      = hostapi.ReasonRejected
	ReasonUpstreamError = hostapi.ReasonUpstreamError
	ReasonError         = hostapi.ReasonError
)

// FailureNote is the text appended to the last good turn when a followup
// fails (docs/failures.md: never a silent truncation); %s is the provider's status
// and a short reason.
const FailureNote = "[chime: the continuation failed: %s]"

// Failure codes (followup_failures_total's code label) besides an HTTP status.
const (
	FailureNoAnswer = "none"   // no HTTP answer (connection error, timeout)
	FailureUnsent   = "unsent" // the followup could not be built
)

// Defaults of docs/continuation.md.
const (
	DefaultMaxHops          = 8
	DefaultMaxDuration      = 15 * time.Minute
	DefaultRepeatLimit      = 3
	DefaultCancelMemory     = 5 * time.Minute
	DefaultFollowupTimeout  = 10 * time.Minute
	DefaultMaxResponseBytes = 32 << 20
)

// ErrBadRequest wraps every rejection of a ResolveRequest.
var ErrBadRequest = errors.New("resolve: bad request")

var (
	errCancelled   = errors.New("chain cancelled")
	errMaxDuration = errors.New("chain exceeded its maximum duration")
)

// Observer counts what chains do.
type Observer interface {
	Followup(kind string)
	// FollowupFailed counts a followup that failed: code is its HTTP status,
	// FailureNoAnswer or FailureUnsent (docs/failures.md).
	FollowupFailed(kind, code string)
	Chain(reason string)
}

// Config wires a Resolver. Token and Steps are required.
type Config struct {
	Token string // signs hostapi.HeaderFollowup
	// Steps are the ways a turn can continue, in docs/continuation.md's priority
	// order: server tools, then stopMessage, then a hold.
	Steps    []Step
	Observer Observer
	// Clock is host time with the NTP offset (ntp.Tracker.Clock); holds and
	// the MaxDuration guard wait on it. Default the real clock.
	Clock timesource.Clock
	// Location resolves the request's IANA zone for tool calls; nil = none.
	Location    func(name string) *time.Location
	MaxHops     int
	MaxDuration time.Duration
	RepeatLimit int
	// DefaultReentry is the proxy listener (host:port) for requests that
	// name none (the filter could not read its listener address).
	DefaultReentry string
	// CancelMemory is how long a cancelled request id is remembered, so a
	// cancel that overtakes its resolve still stops it.
	CancelMemory time.Duration
	// Client sends followups; default: FollowupTimeout, no redirects, no
	// transparent compression.
	Client           *http.Client
	FollowupTimeout  time.Duration
	MaxResponseBytes int64
	// Finished, when set, is told how each chain that was not cancelled
	// ended: the last request sent and the turn that answered it (the
	// original ones when no followup was sent). The host keeps them as
	// the session's wake template.
	Finished func(req *hostapi.ResolveRequest, body []byte, last *llm.Turn)
	Logger   *slog.Logger
}

// Resolver runs followup chains. It is safe for concurrent use.
type Resolver struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex
	active    map[string][]*handle
	sessions  map[string]int       // session id → chains running
	cancelled map[string]time.Time // request id → forget after
	nextPrune time.Time
}

type handle struct{ cancel context.CancelCauseFunc }

// New checks cfg and fills its defaults.
func New(cfg Config) (*Resolver, error) {
	if cfg.Token == "" || len(cfg.Steps) == 0 || slices.Contains(cfg.Steps, nil) {
		return nil, errors.New("resolve: Config needs a Token and Steps")
	}
	cfg.Clock = timesource.OrReal(cfg.Clock)
	if cfg.Location == nil {
		cfg.Location = func(string) *time.Location { return nil }
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	setDefault(&cfg.MaxDuration, DefaultMaxDuration)
	setDefault(&cfg.CancelMemory, DefaultCancelMemory)
	setDefault(&cfg.FollowupTimeout, DefaultFollowupTimeout)
	if cfg.MaxHops <= 0 {
		cfg.MaxHops = DefaultMaxHops
	}
	if cfg.RepeatLimit <= 0 {
		cfg.RepeatLimit = DefaultRepeatLimit
	}
	if cfg.MaxResponseBytes <= 0 {
		cfg.MaxResponseBytes = DefaultMaxResponseBytes
	}
	if cfg.Client == nil {
		cfg.Client = newClient(cfg.FollowupTimeout)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Resolver{cfg: cfg, log: cfg.Logger, active: map[string][]*handle{}, sessions: map[string]int{}, cancelled: map[string]time.Time{}}, nil
}

func setDefault(d *time.Duration, def time.Duration) {
	if *d <= 0 {
		*d = def
	}
}

func newClient(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
			// The client's accept-encoding is dropped: bodies must be plain JSON.
			DisableCompression: true,
		},
		// A redirect from the proxy listener is an upstream error, not a
		// place to resend credentials to.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

type nopObserver struct{}

func (nopObserver) Followup(string)               {}
func (nopObserver) FollowupFailed(string, string) {}
func (nopObserver) Chain(string)                  {}

// ParseProtocol maps llm.Protocol.String() back to the protocol.
func ParseProtocol(s string) llm.Protocol {
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		if p.String() == s {
			return p
		}
	}
	return llm.Unknown
}

func validate(req *hostapi.ResolveRequest, defaultReentry string) (llm.Protocol, error) {
	p := ParseProtocol(req.Protocol)
	if req.Reentry == "" {
		req.Reentry = defaultReentry
	}
	switch {
	case req.RequestID == "":
		return p, fmt.Errorf("%w: requestId is required", ErrBadRequest)
	case p == llm.Unknown:
		return p, fmt.Errorf("%w: protocol %q is not chat, responses or messages", ErrBadRequest, req.Protocol)
	case !strings.HasPrefix(req.Path, "/"):
		return p, fmt.Errorf("%w: path %q must start with /", ErrBadRequest, req.Path)
	case req.Reentry == "" || strings.ContainsAny(req.Reentry, "/?# "):
		return p, fmt.Errorf("%w: reentry %q must be the proxy listener's host:port (and the host has no default)", ErrBadRequest, req.Reentry)
	case req.Turn == nil:
		return p, fmt.Errorf("%w: turn is required", ErrBadRequest)
	}
	if err := req.Turn.CheckItems(); err != nil {
		return p, fmt.Errorf("%w: turn: %v", ErrBadRequest, err)
	}
	if _, err := llm.ParseRequest(p, req.Request); err != nil {
		return p, fmt.Errorf("%w: request: %v", ErrBadRequest, err)
	}
	return p, nil
}

// Resolve runs the followup chain of one finished turn (docs/architecture.md response
// path) and answers once it ends. ctx is the filter's callout: when it ends
// the chain is cancelled, as by Cancel. The error wraps ErrBadRequest for
// invalid input; a chain never fails, it ends with a Reason.
func (r *Resolver) Resolve(ctx context.Context, req hostapi.ResolveRequest) (hostapi.ResolveResponse, error) {
	p, err := validate(&req, r.cfg.DefaultReentry)
	if err != nil {
		return hostapi.ResolveResponse{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	// docs/continuation.md: at most MaxDuration per chain, timed on the injected clock.
	guard := r.cfg.Clock.AfterFunc(r.cfg.MaxDuration, func() { cancel(errMaxDuration) })
	defer guard.Stop()
	h := &handle{cancel: cancel}
	if !r.register(req.RequestID, h) {
		r.cfg.Observer.Chain(ReasonCancelled)
		r.log.Info("resolve after cancel: nothing done", "request", req.RequestID)
		return hostapi.ResolveResponse{Reason: ReasonCancelled}, nil
	}
	defer r.unregister(req.RequestID, h)
	r.busy(req.SessionID, 1)
	defer r.busy(req.SessionID, -1)

	if loc := r.cfg.Location(req.Timezone); loc != nil {
		ctx = clock.WithLocation(ctx, loc)
	}
	c := &chain{
		r: r, req: &req, proto: p, ctx: ctx, body: req.Request, turn: req.Turn,
		seen:       map[[32]byte]int{},
		compaction: llm.IsCompaction(p, req.Request),
	}
	reason := c.run()
	resp := c.answer(reason)
	if r.cfg.Finished != nil && reason != ReasonCancelled {
		r.cfg.Finished(&req, c.body, c.turn)
	}
	r.cfg.Observer.Chain(reason)
	r.log.Info("resolve finished", "request", req.RequestID, "session", req.SessionID,
		"reason", reason, "hops", c.hops, "continued", resp.Continued)
	return resp, nil
}

// Cancel stops the chain of requestID — its hold, its in-flight followup —
// and remembers the id for CancelMemory so a resolve arriving later does
// nothing. An unknown id is fine.
func (r *Resolver) Cancel(requestID string) {
	if requestID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock.Now()
	r.pruneLocked(now)
	r.cancelled[requestID] = now.Add(r.cfg.CancelMemory)
	for _, h := range r.active[requestID] {
		h.cancel(errCancelled)
	}
}

// maxRemembered bounds the cancelled-id memory.
const maxRemembered = 100_000

// pruneLocked drops expired ids at most once a second, and arbitrary ones
// when the memory is full, so Cancel stays O(1) amortized.
func (r *Resolver) pruneLocked(now time.Time) {
	full := len(r.cancelled) >= maxRemembered
	if !full && (len(r.cancelled) < 1024 || now.Before(r.nextPrune)) {
		return
	}
	r.nextPrune = now.Add(time.Second)
	for id, until := range r.cancelled {
		if now.After(until) {
			delete(r.cancelled, id)
		}
	}
	if len(r.cancelled) < maxRemembered {
		return
	}
	for id := range r.cancelled {
		if len(r.cancelled) < maxRemembered*3/4 {
			break
		}
		delete(r.cancelled, id)
	}
}

// register adds a running chain unless its id was cancelled already.
func (r *Resolver) register(id string, h *handle) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if until, ok := r.cancelled[id]; ok && r.cfg.Clock.Now().Before(until) {
		return false
	}
	r.active[id] = append(r.active[id], h)
	return true
}

// Busy reports whether a chain of the session is running: its client is
// being answered (a hold, a tool round, a stopMessage continuation).
func (r *Resolver) Busy(sessionID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sessions[sessionID] > 0
}

func (r *Resolver) busy(sessionID string, d int) {
	if sessionID == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sessions[sessionID] += d; r.sessions[sessionID] <= 0 {
		delete(r.sessions, sessionID)
	}
}

func (r *Resolver) unregister(id string, h *handle) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hs := r.active[id]
	for i, x := range hs {
		if x == h {
			hs = append(hs[:i], hs[i+1:]...)
			break
		}
	}
	if len(hs) == 0 {
		delete(r.active, id)
	} else {
		r.active[id] = hs
	}
}

// Active reports how many chains are running (tests, shutdown).
func (r *Resolver) Active() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, hs := range r.active {
		n += len(hs)
	}
	return n
}

// pairKey identifies one request/response pair of a chain for the
// repetition guard (docs/continuation.md): what the hop added (the previous turn, the
// tool outputs or user text) and what came back, ignoring call ids and
// usage, which differ on every call even when the model loops.
func pairKey(prev *llm.Turn, results []llm.ToolResult, userText string, next *llm.Turn) [32]byte {
	h := sha256.New()
	field := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	turn := func(t *llm.Turn) {
		field(t.Text)
		field(string(t.Finish.Reason))
		for _, c := range t.ToolCalls {
			field(c.Name)
			field(c.Arguments)
		}
		field("|")
	}
	turn(prev)
	for _, res := range results {
		field(res.Name)
		field(res.Output)
	}
	field(userText)
	turn(next)
	var k [32]byte
	h.Sum(k[:0])
	return k
}
