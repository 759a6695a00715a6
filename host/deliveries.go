package host

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/delivery"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/storage"
)

// The delivery queue and its connectors (docs/delivery.md) are package
// host/delivery; this file wires them: the session connector injects
// through the clock engine's notices, prepare records a proxied request as
// the session's last interaction, and the HTTP endpoints below.

// PathSessionEvents is the SSE event stream of a session (docs/delivery.md#sse).
const PathSessionEvents = "/v1/sessions/{id}/events"

// DeliveryConfig is the delivery: section of the host config file
// (docs/configuration.md#delivery).
type DeliveryConfig struct {
	// Connectors is the routing order; the first is the fallback when the
	// session's last interaction is not among them. Default session, sse.
	Connectors []string
	// Webhook is the global webhook.
	Webhook delivery.WebhookConfig
	// Sessions override the routing of single sessions.
	Sessions []DeliverySession
	// HTTPClient sends webhooks (tests); nil = a default client.
	HTTPClient *http.Client
}

// DeliverySession is one session's routing.
type DeliverySession struct {
	ID         string
	Connectors []string
	Webhook    *delivery.WebhookConfig
}

// engineInjector is the session connector's way in: a clock notice that
// the session's next request injects, with reservation and commit.
type engineInjector struct{ e *clock.Engine }

func (i engineInjector) Inject(ctx context.Context, sid, id, text string, at time.Time) error {
	return i.e.AddNotice(ctx, sid, id, text, at)
}

func (s *Service) newDeliveryQueue() (*delivery.Queue, error) {
	dc := s.cfg.Delivery
	sessions := map[string]delivery.SessionConfig{}
	for _, ds := range dc.Sessions {
		sessions[ds.ID] = delivery.SessionConfig{Connectors: ds.Connectors, Webhook: ds.Webhook}
	}
	var counter func(connector, outcome string)
	var q *delivery.Queue
	c := s.metrics.RegisterDelivery(func() float64 {
		if q == nil {
			return 0
		}
		return float64(q.Depth())
	})
	counter = func(connector, outcome string) { c.WithLabelValues(connector, outcome).Inc() }
	for _, conn := range delivery.Connectors {
		for _, o := range []string{delivery.StateDelivered, "retry", delivery.StateUnknown, delivery.StateFailed} {
			c.WithLabelValues(conn, o)
		}
	}
	var err error
	q, err = delivery.New(delivery.Config{
		Store: s.store, Clock: s.clock, Logger: s.log, Injector: engineInjector{s.engine},
		Connectors: dc.Connectors, Webhook: dc.Webhook, Sessions: sessions,
		HTTPClient: dc.HTTPClient, Observe: counter,
	})
	return q, err
}

// Deliver queues text for a session's user (a wake reply, a notice): it
// is persisted before Deliver returns, then sent to the connector of the
// session's last interaction (docs/delivery.md).
func (s *Service) Deliver(ctx context.Context, it delivery.Item) error {
	return s.delivery.Enqueue(ctx, it)
}

// deliverAway also sends a notice to the user when the session's
// deliveries do not go to session injection (the user is watching an
// event stream, or a webhook is configured first): the notice itself still
// reaches the model with the session's next request.
func (s *Service) deliverAway(ctx context.Context, sid, runID, reason, text string, at time.Time) {
	if s.delivery.Route(sid) == delivery.Session {
		return
	}
	if err := s.delivery.Enqueue(ctx, delivery.Item{Session: sid, RunID: runID, Reason: reason, Text: text, At: at}); err != nil {
		s.log.Warn("queueing a notice for delivery failed; it still reaches the next request", "session", sid, "run", runID, "err", err)
	}
}

// DeliveryQueue is the service's queue (the scheduler, tests).
func (s *Service) DeliveryQueue() *delivery.Queue { return s.delivery }

// touchDelivery records a proxied request as the session's last
// interaction. A wake's own request (request id wake:…) is not the user.
func (s *Service) touchDelivery(req hostapi.PrepareRequest) {
	if req.SessionID == "" || strings.HasPrefix(req.RequestID, "wake:") {
		return
	}
	s.delivery.Touch(req.SessionID, delivery.Session)
}

func (s *Service) handleSessionEvents(w http.ResponseWriter, r *http.Request) {
	s.delivery.ServeEvents(w, r, r.PathValue("id"))
}

// DeliveryView is one entry of GET /api/sessions/{id}/deliveries; times
// are Unix ms, 0 = unset.
type DeliveryView struct {
	ID          string `json:"id"`
	RunID       string `json:"runId"`
	Reason      string `json:"reason"`
	Connector   string `json:"connector"`
	Key         string `json:"idempotencyKey"`
	State       string `json:"state"`
	Attempts    int    `json:"attempts"`
	At          int64  `json:"at"`
	EnqueuedAt  int64  `json:"enqueuedAt"`
	UpdatedAt   int64  `json:"updatedAt"`
	NextAt      int64  `json:"nextAt"`
	DeliveredAt int64  `json:"deliveredAt"`
	LastError   string `json:"lastError,omitempty"`
	Text        string `json:"text,omitempty"` // only with ?include=text
}

func deliveryView(d storage.Delivery, includeText bool) DeliveryView {
	v := DeliveryView{
		ID: d.ID, RunID: d.RunID, Reason: d.Reason, Connector: d.Connector, Key: d.Key, State: d.State, Attempts: d.Attempts,
		At: d.At, EnqueuedAt: d.EnqueuedAt, UpdatedAt: d.UpdatedAt, NextAt: d.NextAt, DeliveredAt: d.DeliveredAt, LastError: d.LastError,
	}
	if includeText {
		v.Text = d.Text
	}
	return v
}

// ParseDeliveryState checks the ?state= filter: "" or one of the states.
func ParseDeliveryState(v string) (string, error) {
	switch v {
	case "", delivery.StateQueued, delivery.StateDelivered, delivery.StateFailed, delivery.StateUnknown:
		return v, nil
	}
	return "", errors.New("state must be queued, delivered, failed or unknown")
}

func (s *Service) handleDeliveries(w http.ResponseWriter, r *http.Request, includeText bool) {
	state, err := ParseDeliveryState(r.URL.Query().Get("state"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ds, err := s.delivery.List(r.PathValue("id"), state)
	if err != nil {
		if errors.Is(err, storage.ErrEmptyID) {
			writeError(w, http.StatusBadRequest, "empty session id")
			return
		}
		writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
		return
	}
	out := make([]DeliveryView, 0, len(ds))
	for _, d := range ds {
		out = append(out, deliveryView(d, includeText))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Service) handleDeliveryRetry(w http.ResponseWriter, r *http.Request) {
	sid, did := r.PathValue("id"), r.PathValue("did")
	d, err := s.delivery.Retry(sid, did)
	switch {
	case errors.Is(err, delivery.ErrUnknownID), errors.Is(err, storage.ErrEmptyID):
		writeError(w, http.StatusNotFound, "no delivery "+did+" in session "+sid)
	case errors.Is(err, delivery.ErrNotRetrying):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeError(w, http.StatusInternalServerError, "storage failure: "+err.Error())
	default:
		writeJSON(w, http.StatusOK, deliveryView(d, true))
	}
}
