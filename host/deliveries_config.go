package host

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chimehq/chime/host/delivery"
)

// DefaultDeliveryConfig routes to session injection, then the event
// stream, and has no webhook.
func DefaultDeliveryConfig() DeliveryConfig {
	return DeliveryConfig{
		Connectors: slices.Clone(delivery.DefaultConnectors),
		Webhook:    delivery.WebhookConfig{Timeout: delivery.DefaultWebhookTimeout},
	}
}

// deliverySection is the delivery: section of the host config file
// (docs/configuration.md#delivery, docs/delivery.md#routing).
type deliverySection struct {
	Connectors []string                 `yaml:"connectors"`
	Webhook    webhookSection           `yaml:"webhook"`
	Sessions   []deliverySessionSection `yaml:"sessions"`
}

type webhookSection struct {
	URL     string        `yaml:"url"`
	Secret  string        `yaml:"secret"`
	Timeout time.Duration `yaml:"timeout"`
}

type deliverySessionSection struct {
	ID         string         `yaml:"id"`
	Connectors []string       `yaml:"connectors"`
	Webhook    webhookSection `yaml:"webhook"` // url "" = the global webhook
}

func (s *deliverySection) from(cfg Config) {
	dc := cfg.Delivery
	s.Connectors = slices.Clone(dc.Connectors)
	if len(s.Connectors) == 0 {
		s.Connectors = slices.Clone(delivery.DefaultConnectors)
	}
	s.Webhook = webhookSection{URL: dc.Webhook.URL, Secret: dc.Webhook.Secret, Timeout: dc.Webhook.Timeout}
	if s.Webhook.Timeout == 0 {
		s.Webhook.Timeout = delivery.DefaultWebhookTimeout
	}
	s.Sessions = nil
	for _, ds := range dc.Sessions {
		x := deliverySessionSection{ID: ds.ID, Connectors: slices.Clone(ds.Connectors)}
		if ds.Webhook != nil {
			x.Webhook = webhookSection{URL: ds.Webhook.URL, Secret: ds.Webhook.Secret, Timeout: ds.Webhook.Timeout}
		}
		s.Sessions = append(s.Sessions, x)
	}
}

// checkConnectors checks a routing list at path.
func checkConnectors(c *checker, path string, list []string, hasWebhook bool) {
	seen := map[string]bool{}
	for i, name := range list {
		p := path + "[" + strconv.Itoa(i) + "]"
		switch {
		case !slices.Contains(delivery.Connectors, name):
			c.bad(p, fmt.Sprintf("%q: want session, sse or webhook", name))
		case seen[name]:
			c.bad(p, fmt.Sprintf("%q is listed twice", name))
		case name == delivery.Webhook && !hasWebhook:
			c.bad(p, "webhook needs a webhook url (delivery.webhook.url, or the session's webhook.url)")
		}
		seen[name] = true
	}
}

// CheckWebhookURL reports what is wrong with a webhook URL.
func CheckWebhookURL(v string) error {
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return fmt.Errorf("%q: %v", v, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%q: want an http:// or https:// URL", v)
	case u.Host == "":
		return fmt.Errorf("%q: no host", v)
	case u.User != nil:
		return fmt.Errorf("%q: credentials in the URL are not allowed; use webhook.secret", redact(u))
	case u.Fragment != "":
		return fmt.Errorf("%q: a fragment is never sent", v)
	}
	return nil
}

func redact(u *url.URL) string { return u.Redacted() }

func checkWebhook(c *checker, path string, w webhookSection) {
	if w.URL != "" {
		if err := CheckWebhookURL(w.URL); err != nil {
			c.bad(path+".url", err.Error())
		}
	}
	if w.Timeout < 0 {
		c.bad(path+".timeout", fmt.Sprintf("%s: must be positive", w.Timeout))
	}
	if w.Secret != strings.TrimSpace(w.Secret) {
		c.bad(path+".secret", "has leading or trailing white space")
	}
}

func (s *deliverySection) check(c *checker) {
	if len(s.Connectors) == 0 {
		c.bad("delivery.connectors", "must list at least one of session, sse, webhook")
	}
	checkConnectors(c, "delivery.connectors", s.Connectors, s.Webhook.URL != "")
	checkWebhook(c, "delivery.webhook", s.Webhook)
	c.positive("delivery.webhook.timeout", s.Webhook.Timeout)
	ids := map[string]bool{}
	for i, ds := range s.Sessions {
		p := "delivery.sessions[" + strconv.Itoa(i) + "]"
		switch {
		case ds.ID == "":
			c.bad(p+".id", "must name the session")
		case ids[ds.ID]:
			c.bad(p+".id", fmt.Sprintf("%q is configured twice", ds.ID))
		}
		ids[ds.ID] = true
		hasHook := s.Webhook.URL != ""
		if hw := ds.Webhook; hw != (webhookSection{}) {
			if hw.URL == "" {
				c.bad(p+".webhook.url", "must be set when the session has a webhook")
			}
			checkWebhook(c, p+".webhook", hw)
			hasHook = hw.URL != ""
		}
		checkConnectors(c, p+".connectors", ds.Connectors, hasHook)
	}
}

func (s *deliverySection) apply(cfg *Config) {
	dc := &cfg.Delivery
	dc.Connectors = s.Connectors
	dc.Webhook = delivery.WebhookConfig{URL: s.Webhook.URL, Secret: s.Webhook.Secret, Timeout: s.Webhook.Timeout}
	dc.Sessions = nil
	for _, ds := range s.Sessions {
		x := DeliverySession{ID: ds.ID, Connectors: ds.Connectors}
		if ds.Webhook.URL != "" {
			t := ds.Webhook.Timeout
			if t == 0 {
				t = s.Webhook.Timeout
			}
			x.Webhook = &delivery.WebhookConfig{URL: ds.Webhook.URL, Secret: ds.Webhook.Secret, Timeout: t}
		}
		dc.Sessions = append(dc.Sessions, x)
	}
}
