package proxy

import (
	"io"
	"net/http"
	"sync"
)

// bodyQueue carries request body bytes from the stream goroutine to the
// upstream transport without blocking the stream goroutine.
type bodyQueue struct {
	mu         sync.Mutex
	cond       *sync.Cond
	buf        []byte
	closed     bool
	err        error
	limit      int
	onDrain    func()
	trailerDst http.Header
	trailers   http.Header
}

func newBodyQueue(limit int, onDrain func()) *bodyQueue {
	q := &bodyQueue{limit: limit, onDrain: onDrain}
	q.cond = sync.NewCond(&q.mu)
	return q
}

// write queues b. The queue takes b over: the caller must not change its
// bytes afterwards. So a body a filter buffered whole is queued without a
// copy; its capacity is clipped so later writes never append into memory
// the caller may still hold.
func (q *bodyQueue) write(b []byte) {
	q.mu.Lock()
	if len(q.buf) == 0 {
		q.buf = b[:len(b):len(b)]
	} else {
		q.buf = append(q.buf, b...)
	}
	q.mu.Unlock()
	q.cond.Broadcast()
}

func (q *bodyQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.cond.Broadcast()
}

func (q *bodyQueue) abort(err error) {
	q.mu.Lock()
	if q.err == nil {
		q.err = err
	}
	q.mu.Unlock()
	q.cond.Broadcast()
}

// setTrailers records request trailers; the transport sends them after the
// body's EOF, so they are copied in before close.
func (q *bodyQueue) setTrailers(t http.Header) {
	q.mu.Lock()
	q.trailers = t
	q.mu.Unlock()
}

func (q *bodyQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.buf)
}

// drain takes everything queued (used when the body is complete before
// the request is sent).
func (q *bodyQueue) drain() []byte {
	q.mu.Lock()
	defer q.mu.Unlock()
	b := q.buf
	q.buf = nil
	return b
}

func (q *bodyQueue) Read(p []byte) (int, error) {
	q.mu.Lock()
	for len(q.buf) == 0 && !q.closed && q.err == nil {
		q.cond.Wait()
	}
	if q.err != nil {
		q.mu.Unlock()
		return 0, q.err
	}
	if len(q.buf) == 0 {
		if q.trailerDst != nil {
			for k, v := range q.trailers {
				q.trailerDst[k] = v
			}
		}
		q.mu.Unlock()
		return 0, io.EOF
	}
	wasOver := len(q.buf) > q.limit
	n := copy(p, q.buf)
	q.buf = q.buf[n:]
	nowUnder := len(q.buf) <= q.limit
	q.mu.Unlock()
	if wasOver && nowUnder {
		q.onDrain()
	}
	return n, nil
}
