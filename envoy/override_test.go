package envoy

import (
	"bytes"
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// overrideConfig has cluster llm at a dead address (the override must
// replace it) and, unless noLLM, routes everything to it.
func overrideConfig(t *testing.T, noLLM bool) string {
	t.Helper()
	cluster := "llm"
	if noLLM {
		cluster = "provider"
	}
	y := `
static_resources:
  listeners:
  - name: main
    address: { socket_address: { address: 127.0.0.1, port_value: 0 } }
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: main
          route_config:
            virtual_hosts:
            - { name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: ` + cluster + ` } }] }
          http_filters:
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
  - name: ` + cluster + `
    connect_timeout: 1s
    load_assignment:
      cluster_name: ` + cluster + `
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 1 } } } }] }]
`
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// seenRequest is what the provider stand-in recorded.
type seenRequest struct {
	host, sni string
	tls       bool
}

func provider(t *testing.T, useTLS bool) (*httptest.Server, func() []seenRequest) {
	var mu sync.Mutex
	var seen []seenRequest
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seenRequest{host: r.Host, tls: r.TLS != nil}
		if r.TLS != nil {
			s.sni = r.TLS.ServerName
		}
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
		fmt.Fprint(w, "provider ok")
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // expected handshake failures
	if useTLS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, func() []seenRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]seenRequest(nil), seen...)
	}
}

// trustForOverride makes the override trust srv instead of the system roots.
func trustForOverride(t *testing.T, srv *httptest.Server) {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	overrideRootCAs = pool
	t.Cleanup(func() { overrideRootCAs = nil })
}

func getBody(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestUpstreamOverrideTLS(t *testing.T) {
	srv, seen := provider(t, true)
	trustForOverride(t, srv)
	var logs bytes.Buffer
	url := srv.URL // https://127.0.0.1:PORT
	s, err := Start(context.Background(), Options{ConfigPath: overrideConfig(t, false), UpstreamOverride: url,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, body := getBody(t, "http://"+s.Addr("main")+"/v1/models")
	if code != 200 || body != "provider ok" {
		t.Fatalf("got %d %q", code, body)
	}
	hostport := strings.TrimPrefix(url, "https://")
	if got := seen(); len(got) != 1 || got[0] != (seenRequest{host: hostport, tls: true}) {
		t.Fatalf("provider saw %+v", got) // no SNI: Go sends none for an IP
	}
	for _, w := range []string{"level=INFO", `msg="upstream override"`, "cluster=llm", "endpoint=" + hostport, "type=STATIC", "tls=true"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("log lacks %q:\n%s", w, logs.String())
		}
	}
}

func TestUpstreamOverrideByNameVerifiesHost(t *testing.T) {
	// localhost resolves to the TLS server, whose certificate is valid for
	// 127.0.0.1 and example.com but not localhost: the override checks the
	// name, so the request fails as Envoy fails a verification.
	srv, seen := provider(t, true)
	trustForOverride(t, srv)
	port := srv.URL[strings.LastIndexByte(srv.URL, ':')+1:]
	s, err := Start(context.Background(), Options{ConfigPath: overrideConfig(t, false), UpstreamOverride: "https://localhost:" + port,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, body := getBody(t, "http://"+s.Addr("main")+"/")
	if code != 503 || !strings.Contains(body, "CERTIFICATE_VERIFY_FAILED") {
		t.Fatalf("got %d %q", code, body)
	}
	if n := len(seen()); n != 0 {
		t.Fatalf("provider handled %d requests", n)
	}
}

func TestUpstreamOverridePlain(t *testing.T) {
	srv, seen := provider(t, false)
	s, err := Start(context.Background(), Options{ConfigPath: overrideConfig(t, false), UpstreamOverride: srv.URL + "/",
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, body := getBody(t, "http://"+s.Addr("main")+"/")
	if code != 200 || body != "provider ok" {
		t.Fatalf("got %d %q", code, body)
	}
	if got := seen(); len(got) != 1 || got[0] != (seenRequest{host: strings.TrimPrefix(srv.URL, "http://")}) {
		t.Fatalf("provider saw %+v", got)
	}
}

func TestUpstreamOverrideErrors(t *testing.T) {
	for _, c := range []struct {
		url   string
		noLLM bool
		want  string
	}{
		{"api.openai.com", false, "scheme must be http or https"},
		{"https://api.openai.com/v1", false, `path "/v1"`},
		{"https://api.openai.com:70000", false, "port"},
		{"https://api.openai.com", true, `no cluster "llm"`},
	} {
		s, err := Start(context.Background(), Options{ConfigPath: overrideConfig(t, c.noLLM), UpstreamOverride: c.url,
			Logger: slog.New(slog.DiscardHandler)})
		if err == nil {
			s.Close()
			t.Errorf("%q: Start succeeded", c.url)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.url) {
			t.Errorf("%q: error %q lacks %q or the URL", c.url, err, c.want)
		}
	}
}
