package delivery

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The event stream (docs/delivery.md#sse): GET /v1/sessions/{id}/events
// serves a session's event log as text/event-stream. Each event is
//
//	id: <n>
//	event: delivery
//	data: {"session":…,"runId":…,"reason":…,"text":…,"at":…}
//
// A client that reconnects with Last-Event-ID: <n> gets every event
// after n that the log still holds; comment lines (": heartbeat") keep
// idle connections open through proxies.

// EventName is the SSE event type of a delivery.
const EventName = "delivery"

// replayBatch bounds one read of the log while catching up.
const replayBatch = 100

// writeTimeout bounds one write to a subscriber: one that stops reading
// is dropped instead of holding the stream (a network deadline, so on the
// real clock).
const writeTimeout = 30 * time.Second

type subscriber struct{ notify chan struct{} }

type hub struct {
	mu   sync.Mutex
	subs map[string]map[*subscriber]struct{}
}

func (h *hub) add(sid string) *subscriber {
	s := &subscriber{notify: make(chan struct{}, 1)}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.subs[sid] == nil {
		h.subs[sid] = map[*subscriber]struct{}{}
	}
	h.subs[sid][s] = struct{}{}
	return s
}

func (h *hub) remove(sid string, s *subscriber) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs[sid], s)
	if len(h.subs[sid]) == 0 {
		delete(h.subs, sid)
	}
}

func (h *hub) notify(sid string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[sid] {
		select {
		case s.notify <- struct{}{}:
		default:
		}
	}
}

// Subscribers is how many event streams of the session are open.
func (q *Queue) Subscribers(sid string) int {
	q.hub.mu.Lock()
	defer q.hub.mu.Unlock()
	return len(q.hub.subs[sid])
}

// ErrLastEventID is returned for a Last-Event-ID this host cannot have sent.
var ErrLastEventID = errors.New("bad Last-Event-ID")

// ParseLastEventID reads a Last-Event-ID header: "" (start from the
// oldest event kept) or the decimal id of an event.
func ParseLastEventID(v string) (uint64, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, nil
	}
	if len(v) > 20 || strings.TrimLeft(v, "0123456789") != "" {
		return 0, fmt.Errorf("%w %q: want the decimal id of an event this host sent", ErrLastEventID, clip(v))
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w %q: larger than any event id", ErrLastEventID, clip(v))
	}
	return n, nil
}

func clip(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// ServeEvents streams the session's event log to w; the caller has
// authenticated the request. It records the subscription as the session's
// last interaction, and returns when the client goes, the request's
// context ends or the queue closes.
func (q *Queue) ServeEvents(w http.ResponseWriter, r *http.Request, sessionID string) {
	last, err := ParseLastEventID(r.Header.Get("Last-Event-ID"))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc := http.NewResponseController(w)
	sub := q.hub.add(sessionID)
	defer q.hub.remove(sessionID, sub)
	q.Touch(sessionID, SSE)

	beat := q.clock.NewTicker(q.cfg.Heartbeat) // armed before the client hears from us
	defer beat.Stop()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	w.WriteHeader(http.StatusOK)
	if _, err := fmt.Fprint(w, ": chime events\nretry: 2000\n\n"); err != nil {
		return
	}
	if rc.Flush() != nil {
		return
	}
	for {
		evs, err := q.store.EventsAfter(sessionID, last, replayBatch)
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if err != nil {
			q.log.Warn("reading the event log failed", "session", sessionID, "err", err)
		}
		for _, ev := range evs {
			data, _ := json.Marshal(Payload{Session: ev.SessionID, RunID: ev.RunID, Reason: ev.Reason, Text: ev.Text, At: formatAt(ev.At)})
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", ev.ID, EventName, data); err != nil {
				return
			}
			last = ev.ID
		}
		if len(evs) > 0 {
			if rc.Flush() != nil {
				return
			}
			if len(evs) == replayBatch {
				continue
			}
		}
		select {
		case <-r.Context().Done():
			return
		case <-q.closed:
			return
		case <-sub.notify:
		case <-beat.Chan():
			_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := fmt.Fprint(w, ": heartbeat\n\n"); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
	}
}
