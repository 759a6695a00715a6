package delivery

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/chimehq/chime/host/clock"
	"io"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chimehq/chime/storage"
)

// connector sends one entry. nil means delivered; an error wrapping
// ErrOutcomeUnknown means the result cannot be known.
type connector interface {
	send(ctx context.Context, d storage.Delivery) error
}

// Payload is the JSON body of a webhook and the data of an SSE event.
type Payload struct {
	Session string `json:"session"`
	RunID   string `json:"runId"`
	Reason  string `json:"reason"`
	Text    string `json:"text"`
	At      string `json:"at"` // RFC 3339 with milliseconds, UTC
}

// PayloadOf is what a connector sends for d.
func PayloadOf(d storage.Delivery) Payload {
	return Payload{Session: d.SessionID, RunID: d.RunID, Reason: d.Reason, Text: d.Text, At: formatAt(d.At)}
}

func formatAt(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// --- session: inject into the session's next request ---

// AwayText is the user text the session connector injects.
func AwayText(text string) string { return "[while you were away: " + text + "]" }

// NoticeID is the notice id of a delivery (1..64 of [A-Za-z0-9._-]),
// derived from its idempotency key, so a resend stores one notice.
func NoticeID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return clock.AwayPrefix + hex.EncodeToString(sum[:16]) // never taken by a wake
}

type sessionConnector struct{ inj Injector }

func (c *sessionConnector) send(ctx context.Context, d storage.Delivery) error {
	if c.inj == nil {
		return errors.New("session injection is not available on this host")
	}
	return c.inj.Inject(ctx, d.SessionID, NoticeID(d.Key), AwayText(d.Text), time.UnixMilli(d.At))
}

// --- webhook ---

// Webhook headers (docs/delivery.md#webhook).
const (
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderSignature is "sha256=" + hex(HMAC-SHA256(secret, body)), sent
	// when a secret is configured.
	HeaderSignature = "X-Chime-Signature-256"
)

// Sign is the HeaderSignature value of body.
func Sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// VerifySignature checks a HeaderSignature value in constant time (for
// receivers written in Go, and the tests).
func VerifySignature(secret string, body []byte, header string) bool {
	return hmac.Equal([]byte(header), []byte(Sign(secret, body)))
}

var errTimeout = errors.New("timed out")

type webhookConnector struct {
	q      *Queue
	client *http.Client
}

func (c *webhookConnector) send(ctx context.Context, d storage.Delivery) error {
	wh := c.q.webhookFor(d.SessionID)
	if wh.URL == "" {
		return errors.New("no webhook URL is configured for this session")
	}
	body, err := json.Marshal(PayloadOf(d))
	if err != nil {
		return err
	}
	// The timeout runs on the injected clock.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := c.q.clock.AfterFunc(wh.Timeout, func() { cancel(errTimeout) })
	defer timer.Stop()

	var wrote atomic.Bool
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				wrote.Store(true)
			}
		},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, wh.URL, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("webhook URL: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "chime-delivery")
	req.Header.Set(HeaderIdempotencyKey, d.Key)
	if wh.Secret != "" {
		req.Header.Set(HeaderSignature, Sign(wh.Secret, body))
	}
	resp, err := c.client.Do(req)
	if err != nil {
		why := err
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			why = ue.Err // without the URL, which may carry a secret in its query
		}
		if errors.Is(context.Cause(ctx), errTimeout) {
			why = fmt.Errorf("no answer within %s", wh.Timeout)
		}
		if wrote.Load() {
			return fmt.Errorf("%w (%v)", ErrOutcomeUnknown, why)
		}
		return fmt.Errorf("webhook not sent: %v", why)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("webhook answered %d (redirect to %q); redirects are not followed: configure the final URL", resp.StatusCode, resp.Header.Get("Location"))
	}
	return fmt.Errorf("webhook answered %d %s", resp.StatusCode, strings.TrimSpace(http.StatusText(resp.StatusCode)))
}

// --- sse: the session's event log and its subscribers ---

type sseConnector struct{ q *Queue }

func (c *sseConnector) send(_ context.Context, d storage.Delivery) error {
	q := c.q
	now := q.clock.Now()
	ev := storage.SessionEvent{ID: d.Seq, SessionID: d.SessionID, RunID: d.RunID, Reason: d.Reason, Text: d.Text, At: d.At, LoggedAt: now.UnixMilli()}
	if err := q.store.Update(func(tx *storage.Tx) error {
		return tx.AppendEvent(ev, q.cfg.EventLogMax, now.Add(-q.cfg.EventLogAge).UnixMilli())
	}); err != nil {
		return fmt.Errorf("event log: %w", err)
	}
	q.hub.notify(d.SessionID)
	return nil
}
