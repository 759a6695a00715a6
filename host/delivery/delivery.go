// Package delivery is the host's outbound delivery queue and its connectors
// (docs/delivery.md). Anything that has text for a session's user (a wake
// reply, a background timer's notice, a due reminder for a client that is
// away) enqueues an Item; the queue persists it in Badger before Enqueue
// returns, then sends it to the connector of the session's last
// interaction (session injection, the SSE event stream, or a webhook) and
// acknowledges it. Failed sends are retried at 5s, 25s, 2m and 10m; after
// five attempts the entry is `failed`, kept and retryable by hand.
package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/storage"
)

// Item is one piece of text for a session's user (a wake reply, a timer
// notice…).
type Item struct {
	Session string    // session id
	RunID   string    // unique per produced text, e.g. "wake:<sid>:<n>"; idempotency key = RunID + ":" + connector
	Reason  string    // why it exists: "interval", "cron", "task", "timer", "manual", ...
	Text    string    // what the user reads
	At      time.Time // when produced (host clock)
	// NotVia names a connector the item must not take: a session whose
	// client only speaks MCP never sends a proxied request for the
	// session connector to inject into.
	NotVia string
}

// Connector names, also the values of Touch's channel.
const (
	Session = "session"
	Webhook = "webhook"
	SSE     = "sse"
)

// Connectors are every connector name, in the default fallback order.
var Connectors = []string{Session, SSE, Webhook}

// States of an entry (storage.Delivery*).
const (
	StateQueued    = storage.DeliveryQueued
	StateDelivered = storage.DeliveryDelivered
	StateFailed    = storage.DeliveryFailed
	StateUnknown   = storage.DeliveryUnknown
)

// Defaults of docs/delivery.md.
const (
	MaxAttempts           = 5
	DefaultRecoveryBudget = 60 * time.Second
	DefaultWorkers        = 4
	DefaultWebhookTimeout = 10 * time.Second
	DefaultHeartbeat      = 15 * time.Second
	DefaultEventLogMax    = 1000
	DefaultEventLogAge    = 7 * 24 * time.Hour
	// DefaultDeliveredRetention keeps delivered entries listable a week.
	DefaultDeliveredRetention = 7 * 24 * time.Hour
	// MaxTextBytes bounds one item's text.
	MaxTextBytes = 256 << 10
	// maxRunIDBytes bounds a run id (it is part of the idempotency key).
	maxRunIDBytes = 512
)

// DefaultBackoff is the wait before attempts 2..5.
var DefaultBackoff = []time.Duration{5 * time.Second, 25 * time.Second, 2 * time.Minute, 10 * time.Minute}

// DefaultConnectors is the routing order without configuration: session
// injection, then the event stream.
var DefaultConnectors = []string{Session, SSE}

// Errors of Enqueue, Retry and the API.
var (
	ErrBadItem     = errors.New("delivery: bad item")
	ErrUnknownID   = errors.New("delivery: no such delivery")
	ErrNotRetrying = errors.New("delivery: only failed or unknown deliveries can be retried")
	ErrClosed      = errors.New("delivery: queue closed")
	// ErrOutcomeUnknown marks a send whose result cannot be known: the
	// request went out and no answer came back. The entry becomes
	// `unknown` and is retried with the same idempotency key.
	ErrOutcomeUnknown = errors.New("outcome unknown: the request was sent but no answer came back")
)

// Injector stores text that the session's next request injects
// (clock.Engine.AddNotice): reservation and commit are its business. id is
// stable for one delivery, so a resend stores one notice.
type Injector interface {
	Inject(ctx context.Context, sessionID, id, text string, at time.Time) error
}

// WebhookConfig is where the webhook connector posts.
type WebhookConfig struct {
	URL     string
	Secret  string        // HMAC-SHA256 key of the signature header; "" = unsigned
	Timeout time.Duration // per attempt; 0 = DefaultWebhookTimeout
}

// SessionConfig overrides the global routing for one session.
type SessionConfig struct {
	Connectors []string       // nil = the global list
	Webhook    *WebhookConfig // nil = the global webhook
}

// Config configures a Queue. Zero fields take the defaults above.
type Config struct {
	Store    *storage.Store
	Clock    timesource.Clock // host time; every wait is on it
	Logger   *slog.Logger
	Injector Injector // the session connector; nil leaves it unavailable

	// Connectors is the global routing order (DefaultConnectors when nil);
	// the first is the fallback when the last interaction is not in it.
	Connectors []string
	Webhook    WebhookConfig
	Sessions   map[string]SessionConfig

	Workers            int
	Backoff            []time.Duration
	RecoveryBudget     time.Duration
	Heartbeat          time.Duration
	EventLogMax        int
	EventLogAge        time.Duration
	DeliveredRetention time.Duration
	// HTTPClient sends webhooks; nil builds one that follows no redirect.
	HTTPClient *http.Client
	// Observe is told every attempt's outcome (delivered, retry, unknown,
	// failed) by connector, for metrics.
	Observe func(connector, outcome string)
}

func (c Config) withDefaults() Config {
	c.Clock = timesource.OrReal(c.Clock)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.Connectors) == 0 {
		c.Connectors = DefaultConnectors
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if len(c.Backoff) == 0 {
		c.Backoff = DefaultBackoff
	}
	if c.RecoveryBudget <= 0 {
		c.RecoveryBudget = DefaultRecoveryBudget
	}
	if c.Heartbeat <= 0 {
		c.Heartbeat = DefaultHeartbeat
	}
	if c.EventLogMax <= 0 {
		c.EventLogMax = DefaultEventLogMax
	}
	if c.EventLogAge <= 0 {
		c.EventLogAge = DefaultEventLogAge
	}
	if c.DeliveredRetention <= 0 {
		c.DeliveredRetention = DefaultDeliveredRetention
	}
	if c.Webhook.Timeout <= 0 {
		c.Webhook.Timeout = DefaultWebhookTimeout
	}
	if c.Observe == nil {
		c.Observe = func(string, string) {}
	}
	return c
}

// entry is the in-memory view of one pending delivery.
type entry struct {
	sid, id  string
	seq      uint64
	nextAt   time.Time
	deferred bool // recovered but not sent within the recovery budget
	inflight bool
}

// Queue is the delivery queue. Create it with New, run it with Run.
type Queue struct {
	cfg   Config
	store *storage.Store
	clock timesource.Clock
	log   *slog.Logger

	connectors map[string]connector
	hub        hub

	// Enqueues are group-committed (persist): one writer at a time takes
	// the sequence numbers, for every entry waiting, in one transaction.
	batchMu  sync.Mutex
	batch    []*enqueueReq
	flushing bool
	mu       sync.Mutex
	pending  map[string]*entry // by delivery id
	last     map[string]string // session → last channel (memory of storage.Session.LastChannel)
	wake     chan struct{}
	// kicks counts signals; handled is the count the dispatcher's last
	// look saw, and parked says it then armed its wait (tests: settled).
	kicks, handled uint64
	parked         bool

	closeOnce sync.Once
	closed    chan struct{}
}

// New builds the queue; it sends nothing until Run.
func New(cfg Config) (*Queue, error) {
	if cfg.Store == nil {
		return nil, errors.New("delivery: no store")
	}
	cfg = cfg.withDefaults()
	for _, name := range cfg.Connectors {
		if !slices.Contains(Connectors, name) {
			return nil, fmt.Errorf("delivery: unknown connector %q", name)
		}
	}
	q := &Queue{
		cfg: cfg, store: cfg.Store, clock: cfg.Clock, log: cfg.Logger,
		pending: map[string]*entry{}, last: map[string]string{},
		wake: make(chan struct{}, 1), closed: make(chan struct{}),
	}
	q.hub.subs = map[string]map[*subscriber]struct{}{}
	client := &http.Client{}
	if cfg.HTTPClient != nil {
		*client = *cfg.HTTPClient // a copy: the caller's client keeps its redirect policy
	}
	client.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	q.connectors = map[string]connector{
		Session: &sessionConnector{inj: cfg.Injector},
		SSE:     &sseConnector{q: q},
		Webhook: &webhookConnector{q: q, client: client},
	}
	return q, nil
}

// Close ends the event streams; Run ends with its context.
func (q *Queue) Close() { q.closeOnce.Do(func() { close(q.closed) }) }

// DeliveryID is the id of the entry for one run of one session: a resent
// item (same session and run id) is the same entry.
func DeliveryID(sessionID, runID string) string {
	sum := sha256.Sum256([]byte(sessionID + "\x00" + runID))
	return "d_" + hex.EncodeToString(sum[:16])
}

// Key is the idempotency key of a run sent to a connector.
func Key(runID, connector string) string { return runID + ":" + connector }

// CheckItem reports what is wrong with an item, naming the field.
func CheckItem(it Item) error {
	switch {
	case it.Session == "":
		return fmt.Errorf("%w: session is empty", ErrBadItem)
	case it.RunID == "":
		return fmt.Errorf("%w: runId is empty", ErrBadItem)
	case len(it.RunID) > maxRunIDBytes:
		return fmt.Errorf("%w: runId longer than %d bytes", ErrBadItem, maxRunIDBytes)
	case it.Text == "":
		return fmt.Errorf("%w: text is empty", ErrBadItem)
	case len(it.Text) > MaxTextBytes:
		return fmt.Errorf("%w: text longer than %d bytes", ErrBadItem, MaxTextBytes)
	}
	return nil
}

// Enqueue persists it (synchronously) before it returns, then the queue
// sends it. The connector is chosen now, by Route. An item whose session
// and run id are already queued is left alone (nil).
func (q *Queue) Enqueue(ctx context.Context, it Item) error {
	if err := CheckItem(it); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	now := q.clock.Now()
	if it.At.IsZero() {
		it.At = now
	}
	conn := q.Route(it.Session)
	if conn == it.NotVia {
		conn = ""
		for _, c := range q.connectorsFor(it.Session) {
			if c != it.NotVia {
				conn = c
				break
			}
		}
		if conn == "" {
			return fmt.Errorf("delivery: no connector for session %q besides %s", it.Session, it.NotVia)
		}
	}
	d := storage.Delivery{
		ID: DeliveryID(it.Session, it.RunID), SessionID: it.Session, RunID: it.RunID, Reason: it.Reason,
		Text: it.Text, At: it.At.UnixMilli(), Connector: conn, Key: Key(it.RunID, conn),
		State: StateQueued, NextAt: now.UnixMilli(), EnqueuedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli(),
	}
	dup, err := q.persist(&d)
	if err != nil {
		return fmt.Errorf("delivery: persisting: %w", err)
	}
	if dup {
		q.log.Debug("delivery already queued", "session", d.SessionID, "run", d.RunID)
		return nil
	}
	q.log.Info("delivery queued", "session", d.SessionID, "run", d.RunID, "connector", conn, "id", d.ID)
	q.mu.Lock()
	q.pending[d.ID] = &entry{sid: d.SessionID, id: d.ID, seq: d.Seq, nextAt: now}
	q.mu.Unlock()
	q.kick()
	return nil
}

// enqueueReq is one entry waiting for its group commit.
type enqueueReq struct {
	d    *storage.Delivery
	dup  bool
	err  error
	done chan struct{}
}

// maxEnqueueBatch bounds one group commit, well below Badger's limits.
const maxEnqueueBatch = 256

// persist writes d with the next sequence number, unless an entry of its
// id exists (dup). Concurrent callers share one transaction and one
// fsync: the first becomes the writer and commits what has gathered
// meanwhile, in arrival order, so sequence numbers stay in enqueue order
// and a write that returned nil is on disk.
func (q *Queue) persist(d *storage.Delivery) (dup bool, err error) {
	r := &enqueueReq{d: d, done: make(chan struct{})}
	q.batchMu.Lock()
	q.batch = append(q.batch, r)
	if q.flushing {
		q.batchMu.Unlock()
		<-r.done
		return r.dup, r.err
	}
	q.flushing = true
	for len(q.batch) > 0 {
		n := min(len(q.batch), maxEnqueueBatch)
		batch := q.batch[:n:n]
		q.batch = q.batch[n:]
		q.batchMu.Unlock()
		q.commitBatch(batch)
		q.batchMu.Lock()
	}
	q.flushing = false
	q.batchMu.Unlock()
	<-r.done
	return r.dup, r.err
}

func (q *Queue) commitBatch(batch []*enqueueReq) {
	err := q.store.Update(func(tx *storage.Tx) error {
		for _, r := range batch {
			r.dup = false
			_, ok, err := tx.Delivery(r.d.SessionID, r.d.ID)
			if err != nil {
				return err
			}
			if ok {
				r.dup = true
				continue
			}
			if r.d.Seq, err = tx.NextDeliverySeq(); err != nil {
				return err
			}
			if err := tx.PutDelivery(*r.d); err != nil {
				return err
			}
		}
		return nil
	})
	for _, r := range batch {
		r.err = err
		close(r.done)
	}
}

// kick wakes the dispatcher: something changed.
func (q *Queue) kick() {
	q.mu.Lock()
	q.kicks++
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// maxLastKept bounds the in-memory cache of last interactions.
const maxLastKept = 100_000

// Touch records the session's last interaction: Session when a request
// went through the proxy, SSE when an event stream opened. It writes only
// when the channel changes.
func (q *Queue) Touch(sessionID, channel string) {
	if sessionID == "" || (channel != Session && channel != SSE) {
		return
	}
	q.mu.Lock()
	prev, known := q.last[sessionID]
	if !known && len(q.last) >= maxLastKept {
		clear(q.last) // a cache of the stored LastChannel: bounded against made-up session ids
	}
	q.last[sessionID] = channel
	q.mu.Unlock()
	if known && prev == channel {
		return
	}
	if !known {
		if s, ok, err := q.store.GetSession(sessionID); err == nil && ok && s.LastChannel == channel {
			return
		}
	}
	if err := q.store.TouchSession(sessionID, channel, q.clock.Now().UnixMilli()); err != nil {
		q.log.Warn("recording the last interaction failed", "session", sessionID, "channel", channel, "err", err)
	}
}

// LastChannel is the session's last interaction ("" when none is known).
func (q *Queue) LastChannel(sessionID string) string {
	q.mu.Lock()
	c, ok := q.last[sessionID]
	q.mu.Unlock()
	if ok {
		return c
	}
	s, ok, err := q.store.GetSession(sessionID)
	if err != nil || !ok {
		return ""
	}
	if s.LastChannel != "" {
		q.mu.Lock()
		if _, set := q.last[sessionID]; !set {
			q.last[sessionID] = s.LastChannel
		}
		q.mu.Unlock()
	}
	return s.LastChannel
}

// connectorsFor is the routing order of a session.
func (q *Queue) connectorsFor(sessionID string) []string {
	if sc, ok := q.cfg.Sessions[sessionID]; ok && len(sc.Connectors) > 0 {
		return sc.Connectors
	}
	return q.cfg.Connectors
}

// webhookFor is the webhook of a session.
func (q *Queue) webhookFor(sessionID string) WebhookConfig {
	if sc, ok := q.cfg.Sessions[sessionID]; ok && sc.Webhook != nil {
		w := *sc.Webhook
		if w.Timeout <= 0 {
			w.Timeout = q.cfg.Webhook.Timeout
		}
		return w
	}
	return q.cfg.Webhook
}

// Route is the connector a new item of the session goes to: the channel of
// its last interaction when the session's connectors include it, else the
// first of them.
func (q *Queue) Route(sessionID string) string {
	list := q.connectorsFor(sessionID)
	if last := q.LastChannel(sessionID); last != "" && slices.Contains(list, last) {
		return last
	}
	return list[0]
}

// Depth is how many entries wait to be sent (queued or unknown).
func (q *Queue) Depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// List reads a session's entries in enqueue order; state "" is every state.
func (q *Queue) List(sessionID, state string) ([]storage.Delivery, error) {
	ds, err := q.store.ListDeliveries(sessionID)
	if err != nil || state == "" {
		return ds, err
	}
	out := ds[:0]
	for _, d := range ds {
		if d.State == state {
			out = append(out, d)
		}
	}
	return out, nil
}

// Retry queues a failed or unknown entry again for five fresh attempts,
// with the same idempotency key.
func (q *Queue) Retry(sessionID, id string) (storage.Delivery, error) {
	q.mu.Lock()
	if e, ok := q.pending[id]; ok && e.inflight {
		q.mu.Unlock()
		return storage.Delivery{}, fmt.Errorf("%w: it is being sent now", ErrNotRetrying)
	}
	q.mu.Unlock()
	now := q.clock.Now()
	var d storage.Delivery
	err := q.store.Update(func(tx *storage.Tx) error {
		var ok bool
		var err error
		d, ok, err = tx.Delivery(sessionID, id)
		switch {
		case err != nil:
			return err
		case !ok || d.SessionID != sessionID:
			return ErrUnknownID
		case d.State != StateFailed && d.State != StateUnknown:
			return fmt.Errorf("%w: it is %s", ErrNotRetrying, d.State)
		}
		d.State, d.Attempts, d.NextAt, d.UpdatedAt = StateQueued, 0, now.UnixMilli(), now.UnixMilli()
		return tx.PutDelivery(d)
	})
	if err != nil {
		return storage.Delivery{}, err
	}
	q.log.Info("delivery retried by hand", "session", sessionID, "id", id)
	q.mu.Lock()
	q.pending[id] = &entry{sid: sessionID, id: id, seq: d.Seq, nextAt: now}
	q.mu.Unlock()
	q.kick()
	return d, nil
}

// Run recovers the pending entries (in enqueue order, within the recovery
// budget; the rest are deferred behind new entries, not dropped) and sends
// until ctx ends.
func (q *Queue) Run(ctx context.Context) error {
	recovered, err := q.store.PendingDeliveries()
	if err != nil {
		q.log.Warn("reading the delivery queue failed; pending deliveries wait for the next start", "err", err)
	}
	start := q.clock.Now()
	q.mu.Lock()
	for _, d := range recovered {
		if _, ok := q.pending[d.ID]; ok {
			continue
		}
		next := time.UnixMilli(d.NextAt)
		q.pending[d.ID] = &entry{sid: d.SessionID, id: d.ID, seq: d.Seq, nextAt: next}
	}
	q.mu.Unlock()
	if len(recovered) > 0 {
		q.log.Info("delivery queue recovered", "pending", len(recovered))
	}
	budget := q.clock.AfterFunc(q.cfg.RecoveryBudget, func() { q.deferRecovered(recovered) })
	defer budget.Stop()

	// An entry is picked only when a worker is free, so the pick sees
	// the latest order (a deferral, a new entry).
	slots := make(chan struct{}, q.cfg.Workers)
	var wg sync.WaitGroup
	defer wg.Wait()

	prune := q.clock.NewTicker(time.Hour)
	defer prune.Stop()
	q.prune(start)
	for {
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		e, wait := q.next()
		if e != nil {
			wg.Go(func() {
				defer func() { <-slots }()
				q.attempt(ctx, e)
			})
			continue
		}
		<-slots
		wait = min(wait, timesource.MaxStep)
		t := q.clock.NewTimer(wait)
		q.mu.Lock()
		q.parked = true
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-q.wake:
		case <-t.Chan():
		case <-prune.Chan():
			q.prune(q.clock.Now())
		}
		t.Stop()
	}
}

// deferRecovered moves the recovered entries not yet attempted behind the
// new ones: the recovery budget is spent.
func (q *Queue) deferRecovered(recovered []storage.Delivery) {
	q.mu.Lock()
	n := 0
	for _, d := range recovered {
		if e, ok := q.pending[d.ID]; ok && !e.inflight && e.seq == d.Seq && time.UnixMilli(d.NextAt).Equal(e.nextAt) {
			e.deferred = true
			n++
		}
	}
	q.mu.Unlock()
	if n > 0 {
		q.log.Info("delivery recovery budget spent; the rest is deferred behind new deliveries", "deferred", n, "budget", q.cfg.RecoveryBudget)
	}
}

// next picks the due entry to send (not deferred before deferred, then in
// enqueue order) and marks it in flight, or says how long until one is due.
func (q *Queue) next() (*entry, time.Duration) {
	now := q.clock.Now()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.handled, q.parked = q.kicks, false
	var best *entry
	wait := time.Duration(1<<63 - 1)
	for _, e := range q.pending {
		if e.inflight {
			continue
		}
		if d := e.nextAt.Sub(now); d > 0 {
			wait = min(wait, d)
			continue
		}
		if best == nil || (best.deferred && !e.deferred) || (best.deferred == e.deferred && e.seq < best.seq) {
			best = e
		}
	}
	if best != nil {
		best.inflight = true
	}
	return best, wait
}

func (q *Queue) release(e *entry) { // an attempt that does not count
	q.mu.Lock()
	e.inflight = false
	q.mu.Unlock()
}

// attempt sends one entry once and records the outcome.
func (q *Queue) attempt(ctx context.Context, e *entry) {
	defer q.kick() // the dispatcher looks again
	d, ok, err := q.store.GetDelivery(e.sid, e.id)
	if err != nil {
		q.log.Warn("reading a delivery failed; retrying later", "id", e.id, "err", err)
		q.mu.Lock()
		e.inflight, e.nextAt = false, q.clock.Now().Add(q.cfg.Backoff[0])
		q.mu.Unlock()
		return
	}
	if !ok || !d.Pending() {
		q.mu.Lock()
		delete(q.pending, e.id)
		q.mu.Unlock()
		return
	}
	conn, ok := q.connectors[d.Connector]
	if !ok {
		err = fmt.Errorf("connector %q is not known", d.Connector)
	} else {
		err = conn.send(ctx, d)
	}
	if ctx.Err() != nil && err != nil {
		// Shutting down: this attempt does not count.
		q.release(e)
		return
	}
	now := q.clock.Now()
	d.Attempts++
	d.UpdatedAt = now.UnixMilli()
	outcome := StateDelivered
	switch {
	case err == nil:
		d.State, d.DeliveredAt, d.NextAt, d.LastError = StateDelivered, now.UnixMilli(), 0, ""
	case d.Attempts >= MaxAttempts:
		d.State, d.NextAt, d.LastError = StateFailed, 0, err.Error()
		outcome = StateFailed
	default:
		d.State = StateQueued
		outcome = "retry"
		if errors.Is(err, ErrOutcomeUnknown) {
			d.State, outcome = StateUnknown, StateUnknown
		}
		d.NextAt = now.Add(q.cfg.Backoff[min(d.Attempts-1, len(q.cfg.Backoff)-1)]).UnixMilli()
		d.LastError = err.Error()
	}
	q.cfg.Observe(d.Connector, outcome)
	if werr := q.store.Update(func(tx *storage.Tx) error { return tx.PutDelivery(d) }); werr != nil {
		// Not acknowledged: it is sent again, with the same key.
		q.log.Warn("recording a delivery outcome failed; it will be sent again", "id", d.ID, "err", werr)
		q.mu.Lock()
		e.inflight, e.nextAt = false, now.Add(q.cfg.Backoff[0])
		q.mu.Unlock()
		return
	}
	switch outcome {
	case StateDelivered:
		q.log.Info("delivered", "session", d.SessionID, "run", d.RunID, "connector", d.Connector, "attempts", d.Attempts)
	case StateFailed:
		q.log.Warn("delivery failed; kept for a retry by hand", "session", d.SessionID, "run", d.RunID, "connector", d.Connector, "attempts", d.Attempts, "err", err)
	default:
		q.log.Info("delivery attempt failed; retrying", "session", d.SessionID, "run", d.RunID, "connector", d.Connector,
			"attempt", d.Attempts, "state", d.State, "next", time.UnixMilli(d.NextAt).UTC(), "err", err)
	}
	q.mu.Lock()
	if d.Pending() {
		e.inflight, e.nextAt, e.deferred = false, time.UnixMilli(d.NextAt), false
	} else {
		delete(q.pending, e.id)
	}
	q.mu.Unlock()
}

// prune drops delivered entries older than the retention.
func (q *Queue) prune(now time.Time) {
	cut := now.Add(-q.cfg.DeliveredRetention).UnixMilli()
	var old []storage.Delivery
	if err := q.store.ScanDeliveries(func(d storage.Delivery) error {
		if d.State == StateDelivered && d.DeliveredAt < cut {
			old = append(old, d)
		}
		return nil
	}); err != nil {
		q.log.Warn("pruning delivered entries failed", "err", err)
		return
	}
	for start := 0; start < len(old); start += 500 {
		part := old[start:min(start+500, len(old))]
		if err := q.store.Update(func(tx *storage.Tx) error {
			for _, d := range part {
				if err := tx.DeleteDelivery(d); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			q.log.Warn("pruning delivered entries failed", "err", err)
			return
		}
	}
}

// TouchIn is Touch inside the caller's transaction (prepare's group
// commit): it stages the record's update in tx when the channel changed
// and returns what to run once tx committed (nil when nothing), which
// remembers the channel. It may run more than once for one commit.
func (q *Queue) TouchIn(tx *storage.Tx, sessionID, channel string, nowMs int64) (func(), error) {
	if sessionID == "" || (channel != Session && channel != SSE) {
		return nil, nil
	}
	q.mu.Lock()
	prev, known := q.last[sessionID]
	q.mu.Unlock()
	if known && prev == channel {
		return nil, nil
	}
	sess, ok, err := tx.Session(sessionID)
	if err != nil {
		return nil, err
	}
	if !ok || sess.LastChannel != channel {
		if !ok {
			sess = storage.Session{ID: sessionID, CreatedAt: nowMs}
		}
		sess.LastSeenAt, sess.LastChannel = nowMs, channel
		if err := tx.PutSession(sess); err != nil {
			return nil, err
		}
	}
	return func() {
		q.mu.Lock()
		if _, known := q.last[sessionID]; !known && len(q.last) >= maxLastKept {
			clear(q.last) // bounded against made-up session ids, as in Touch
		}
		q.last[sessionID] = channel
		q.mu.Unlock()
	}, nil
}
