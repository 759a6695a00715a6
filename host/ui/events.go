package ui

import (
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/chimehq/chime/internal/timesource"
)

// The change stream (GET /api/events, text/event-stream) tells open pages
// which session changed; the page then fetches that session again. An
// event carries the session id only, never text. It stays cheap: one
// small buffer per subscriber, a bounded number of subscribers, and a
// subscriber that falls behind is dropped (its browser reconnects and
// refetches everything).

// Stream defaults.
const (
	// DefaultMaxSubscribers bounds the open streams.
	DefaultMaxSubscribers = 64
	// subscriberBuffer is how many notices wait for one slow reader
	// before it is dropped.
	subscriberBuffer = 64
	// keepAlive is how often an idle stream gets a comment, so proxies
	// and the browser see it is alive.
	keepAlive = 25 * time.Second
)

// AllSessions is the session id of a notice that may concern any session
// (e.g. reminders committed for a request).
const AllSessions = "*"

// Broker fans change notices out to the open streams. The zero value is
// not ready; use NewBroker. It is safe for concurrent use.
type Broker struct {
	clock timesource.Clock
	max   int

	mu      sync.Mutex
	subs    map[*subscriber]struct{}
	dropped int
}

type subscriber struct {
	ch   chan string
	gone chan struct{} // closed when the broker dropped it
}

// NewBroker makes a broker of at most maxSubs streams (0: the default)
// whose keep-alives run on clock (nil: real time).
func NewBroker(clock timesource.Clock, maxSubs int) *Broker {
	if maxSubs <= 0 {
		maxSubs = DefaultMaxSubscribers
	}
	return &Broker{clock: timesource.OrReal(clock), max: maxSubs, subs: map[*subscriber]struct{}{}}
}

// Publish tells every stream that session changed. It never blocks: a
// stream whose buffer is full is dropped.
func (b *Broker) Publish(session string) {
	if b == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for s := range b.subs {
		select {
		case s.ch <- session:
		default:
			delete(b.subs, s)
			close(s.gone)
			b.dropped++
		}
	}
}

// Subscribers reports the open streams and how many were dropped for
// falling behind (tests, metrics).
func (b *Broker) Subscribers() (open, dropped int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.subs), b.dropped
}

func (b *Broker) subscribe() *subscriber {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.subs) >= b.max {
		return nil
	}
	s := &subscriber{ch: make(chan string, subscriberBuffer), gone: make(chan struct{})}
	b.subs[s] = struct{}{}
	return s
}

func (b *Broker) unsubscribe(s *subscriber) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.subs, s)
}

// ServeHTTP streams notices until the client leaves, the host shuts down
// (the request's context ends) or the stream is dropped. Events:
//
//	event: ready    data: {}                   once, at the start
//	event: change   data: {"session":"<id>"}   "*" for any session
func (b *Broker) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	s := b.subscribe()
	if s == nil {
		w.Header().Set("Retry-After", "30")
		http.Error(w, `{"error":"too many open dashboard streams; close some pages"}`, http.StatusServiceUnavailable)
		return
	}
	defer b.unsubscribe(s)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write([]byte("retry: 2000\nevent: ready\ndata: {}\n\n")); err != nil || rc.Flush() != nil {
		return
	}
	tick := b.clock.NewTicker(keepAlive)
	defer tick.Stop()
	batch := map[string]struct{}{}
	for {
		var msg []byte
		select {
		case <-r.Context().Done():
			return
		case <-s.gone:
			return
		case <-tick.Chan():
			msg = []byte(": keep-alive\n\n")
		case id := <-s.ch:
			// Coalesce what is queued: one event per session.
			clear(batch)
			batch[id] = struct{}{}
		drain:
			for {
				select {
				case id := <-s.ch:
					batch[id] = struct{}{}
				default:
					break drain
				}
			}
			for id := range batch {
				data, _ := json.Marshal(struct {
					Session string `json:"session"`
				}{id})
				msg = append(msg, "event: change\ndata: "...)
				msg = append(msg, data...)
				msg = append(msg, "\n\n"...)
			}
		}
		if _, err := w.Write(msg); err != nil || rc.Flush() != nil {
			return
		}
	}
}
