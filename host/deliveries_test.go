package host

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/chimehq/chime/host/delivery"
	"github.com/chimehq/chime/storage"
)

// failEntry marks a queued entry failed, as five failed attempts would.
func failEntry(t testing.TB, fx *fixture, sid, run string) string {
	t.Helper()
	id := delivery.DeliveryID(sid, run)
	err := fx.svc.store.Update(func(tx *storage.Tx) error {
		d, ok, err := tx.Delivery(sid, id)
		if err != nil || !ok {
			t.Fatalf("entry %s: %v %v", id, ok, err)
		}
		d.State, d.Attempts, d.LastError = storage.DeliveryFailed, delivery.MaxAttempts, "webhook answered 500"
		return tx.PutDelivery(d)
	})
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestDeliveriesAPI(t *testing.T) {
	fx := newFixture(t)
	ctx := context.Background()
	for _, run := range []string{"wake:s1:1", "wake:s1:2"} {
		if err := fx.svc.Deliver(ctx, delivery.Item{Session: "s1", RunID: run, Reason: "interval", Text: "private " + run}); err != nil {
			t.Fatal(err)
		}
	}
	failed := failEntry(t, fx, "s1", "wake:s1:2")

	list := func(query, token string) ([]DeliveryView, int) {
		rec := fx.do(t, http.MethodGet, "/api/sessions/s1/deliveries"+query, token, nil)
		var out []DeliveryView
		if rec.Code == http.StatusOK {
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatal(err)
			}
		}
		return out, rec.Code
	}
	all, code := list("", "")
	if code != http.StatusOK || len(all) != 2 || all[0].Text != "" || all[0].RunID != "wake:s1:1" || all[0].Key != "wake:s1:1:session" {
		t.Fatalf("list without the token: %d %+v", code, all)
	}
	if _, code := list("?include=text", ""); code != http.StatusUnauthorized {
		t.Fatalf("text without the token: %d", code)
	}
	withText, _ := list("?include=text", testToken)
	if withText[1].Text != "private wake:s1:2" {
		t.Fatalf("text with the token: %+v", withText)
	}
	f, _ := list("?state=failed", "")
	if len(f) != 1 || f[0].ID != failed || f[0].LastError == "" {
		t.Fatalf("failed list: %+v", f)
	}
	if q, _ := list("?state=queued", ""); len(q) != 1 || q[0].State != delivery.StateQueued {
		t.Fatalf("queued list: %+v", q)
	}
	if _, code := list("?state=lost", ""); code != http.StatusBadRequest {
		t.Fatalf("bad state: %d", code)
	}

	retry := func(id, token string) int {
		return fx.do(t, http.MethodPost, "/api/sessions/s1/deliveries/"+id+"/retry", token, nil).Code
	}
	if c := retry(failed, ""); c != http.StatusUnauthorized {
		t.Fatalf("retry without the token: %d", c)
	}
	if c := retry("d_nope", testToken); c != http.StatusNotFound {
		t.Fatalf("retry of an unknown id: %d", c)
	}
	if c := retry(failed, testToken); c != http.StatusOK {
		t.Fatalf("retry: %d", c)
	}
	if c := retry(failed, testToken); c != http.StatusConflict {
		t.Fatalf("retry of a queued entry: %d", c)
	}
	if q, _ := list("?state=queued", ""); len(q) != 2 || q[1].Attempts != 0 {
		t.Fatalf("after the retry: %+v", q)
	}
	// Another session's id does not reach this one's entry.
	if c := fx.do(t, http.MethodPost, "/api/sessions/s2/deliveries/"+failed+"/retry", testToken, nil).Code; c != http.StatusNotFound {
		t.Fatalf("retry through another session: %d", c)
	}
	// The queue's depth and outcome counters are exported.
	m := fx.do(t, http.MethodGet, "/metrics", "", nil).Body.String()
	if !strings.Contains(m, "chime_delivery_queue_depth 2") || !strings.Contains(m, `chime_deliveries_total{connector="webhook",outcome="failed"} 0`) {
		t.Fatalf("metrics:\n%s", m)
	}
	// The event stream needs the token, even from loopback.
	if c := fx.do(t, http.MethodGet, "/v1/sessions/s1/events", "", nil).Code; c != http.StatusUnauthorized {
		t.Fatalf("events without the token: %d", c)
	}
}

// FuzzDeliveriesAPI: session id, state filter and delivery id of the
// delivery endpoints get a documented status with a JSON body.
func FuzzDeliveriesAPI(f *testing.F) {
	fx := newFixture(f)
	if err := fx.svc.Deliver(context.Background(), delivery.Item{Session: "s1", RunID: "r1", Text: "x"}); err != nil {
		f.Fatal(err)
	}
	failed := failEntry(f, fx, "s1", "r1")
	for _, s := range [][3]string{{"s1", "failed", failed}, {"s1", "", "d_x"}, {"..", "queued", ".."}, {"a/b", "x", "%00"}, {"~abc", "unknown", strings.Repeat("d", 300)}} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, sid, state, did string) {
		fuzzCall(t, fx, http.MethodGet, "/api/sessions/"+url.PathEscape(sid)+"/deliveries?state="+url.QueryEscape(state), nil,
			http.StatusOK, http.StatusBadRequest, http.StatusNotFound, http.StatusMovedPermanently, http.StatusTemporaryRedirect)
		fuzzCall(t, fx, http.MethodPost, "/api/sessions/"+url.PathEscape(sid)+"/deliveries/"+url.PathEscape(did)+"/retry", nil,
			http.StatusOK, http.StatusNotFound, http.StatusConflict, http.StatusMovedPermanently, http.StatusTemporaryRedirect)
	})
}

func TestDeliveryConfigSection(t *testing.T) {
	cfg, err := ParseConfigFile([]byte(`
delivery:
  connectors: [sse, webhook]
  webhook: {url: "https://hooks.example.com/chime", secret: abc, timeout: 5s}
  sessions:
    - id: ops
      connectors: [webhook]
      webhook: {url: "http://10.0.0.5/hook"}
    - id: quiet
      connectors: [session]
`), "chime.yaml")
	if err != nil {
		t.Fatal(err)
	}
	d := cfg.Delivery
	if !slices.Equal(d.Connectors, []string{"sse", "webhook"}) || d.Webhook != (delivery.WebhookConfig{URL: "https://hooks.example.com/chime", Secret: "abc", Timeout: 5e9}) {
		t.Fatalf("global: %+v", d)
	}
	if len(d.Sessions) != 2 || d.Sessions[0].ID != "ops" || d.Sessions[0].Webhook == nil || d.Sessions[0].Webhook.URL != "http://10.0.0.5/hook" || d.Sessions[0].Webhook.Timeout != 5e9 || d.Sessions[1].Webhook != nil {
		t.Fatalf("sessions: %+v", d.Sessions)
	}
	for text, want := range map[string]string{
		"delivery:\n  connectors: [pigeon]\n":                            `chime.yaml:2: delivery.connectors[0]: "pigeon": want session, sse or webhook`,
		"delivery:\n  connectors: [webhook]\n":                           "delivery.connectors[0]: webhook needs a webhook url",
		"delivery:\n  connectors: []\n":                                  "delivery.connectors: must list at least one",
		"delivery:\n  connectors: [sse, sse]\n":                          `delivery.connectors[1]: "sse" is listed twice`,
		"delivery:\n  webhook: {url: ftp://x}\n":                         `delivery.webhook.url: "ftp://x": want an http:// or https:// URL`,
		"delivery:\n  webhook: {url: \"https://u:p@x/\"}\n":              "credentials in the URL are not allowed",
		"delivery:\n  webhook: {timeout: 0s}\n":                          "delivery.webhook.timeout: 0s: must be positive",
		"delivery:\n  webhook: {retries: 3}\n":                           "delivery.webhook.retries: unknown field in delivery.webhook; known: secret, timeout, url",
		"delivery:\n  sessions:\n    - connectors: [sse]\n":              "delivery.sessions[0].id: must name the session",
		"delivery:\n  sessions:\n    - {id: a}\n    - {id: a}\n":         `delivery.sessions[1].id: "a" is configured twice`,
		"delivery:\n  sessions:\n    - {id: a, hook: x}\n":               "delivery.sessions[0].hook: unknown field in delivery.sessions[0]; known: connectors, id, webhook",
		"delivery:\n  sessions:\n    - {id: a, webhook: {secret: s}}\n":  "delivery.sessions[0].webhook.url: must be set",
		"delivery:\n  sessions:\n    - {id: a, connectors: [webhook]}\n": "delivery.sessions[0].connectors[0]: webhook needs a webhook url",
	} {
		_, err := ParseConfigFile([]byte(text), "chime.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", text, err, want)
		}
	}
}

// FuzzDeliveryConfig: any delivery section parses or fails with a
// message; one that parses routes only to known connectors with a URL
// for webhook.
func FuzzDeliveryConfig(f *testing.F) {
	for _, s := range []string{
		"connectors: [sse]\n",
		"connectors: [webhook]\nwebhook: {url: \"https://x/h\", secret: s, timeout: 1s}\n",
		"sessions:\n  - {id: a, connectors: [webhook], webhook: {url: \"http://y\"}}\n",
		"webhook: {url: \"http://[::1\"}\n", "sessions: x\n", "connectors: {a: b}\n", "{",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, section string) {
		text := "delivery:\n"
		for line := range strings.Lines(section) {
			text += "  " + line
		}
		cfg, err := ParseConfigFile([]byte(text), "chime.yaml")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		check := func(list []string, hook *delivery.WebhookConfig) {
			for _, c := range list {
				if !slices.Contains(delivery.Connectors, c) {
					t.Fatalf("unknown connector %q accepted", c)
				}
				if c == delivery.Webhook && (hook == nil || hook.URL == "") {
					t.Fatalf("webhook without a URL accepted: %q", text)
				}
			}
		}
		d := cfg.Delivery
		check(d.Connectors, &d.Webhook)
		for _, s := range d.Sessions {
			h := s.Webhook
			if h == nil {
				h = &d.Webhook
			}
			check(s.Connectors, h)
		}
		if _, err := delivery.New(delivery.Config{Store: nil}); err == nil {
			t.Fatal("a queue without a store")
		}
	})
}
