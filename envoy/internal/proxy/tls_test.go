package proxy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// tlsUpstream is an httptest TLS backend that records what each request
// arrived with: Host, SNI, TLS version and ALPN.
type tlsUpstream struct {
	*httptest.Server
	caFile string // its certificate as a trusted_ca file
	mu     sync.Mutex
	seen   []tlsSeen
}

type tlsSeen struct {
	host, sni, alpn, body string
	version               uint16
}

func newTLSUpstream(t *testing.T) *tlsUpstream {
	u := &tlsUpstream{}
	u.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.seen = append(u.seen, tlsSeen{r.Host, r.TLS.ServerName, r.TLS.NegotiatedProtocol, string(body), r.TLS.Version})
		u.mu.Unlock()
		w.WriteHeader(201)
		fmt.Fprintf(w, "tls %s %s", r.Method, r.URL.Path)
	}))
	u.Config.ErrorLog = log.New(io.Discard, "", 0) // handshake failures are expected
	u.StartTLS()
	t.Cleanup(u.Close)
	u.caFile = writePEM(t, u.Certificate().Raw)
	return u
}

func (u *tlsUpstream) addr() string { return strings.TrimPrefix(u.URL, "https://") }

func (u *tlsUpstream) requests() []tlsSeen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]tlsSeen(nil), u.seen...)
}

func writePEM(t *testing.T, der []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// otherCA is a CA file that did not sign the test server's certificate.
func otherCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: "unrelated ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return writePEM(t, der)
}

// tlsClusterYAML is a STATIC cluster at addr with an UpstreamTlsContext
// body and optional endpoint hostname.
func tlsClusterYAML(name, addr, hostname, tlsBody string) string {
	host, port, _ := strings.Cut(addr, ":")
	hn := ""
	if hostname != "" {
		hn = "hostname: " + hostname + ", "
	}
	return fmt.Sprintf(`
  - name: %s
    connect_timeout: 1s
    load_assignment:
      cluster_name: %s
      endpoints: [{ lb_endpoints: [{ endpoint: { %saddress: { socket_address: { address: %s, port_value: %s } } } }] }]
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext%s`, name, name, hn, host, port, tlsBody)
}

func TestTLSUpstreamThroughListener(t *testing.T) {
	up := newTLSUpstream(t)
	var sawAuthority string
	e := start(t, setup{
		routes: `
              - match: { prefix: "/" }
                route: { cluster: llm, host_rewrite_literal: api.example.test }`,
		clusters: tlsClusterYAML("llm", up.addr(), "", `
        sni: api.example.test
        common_tls_context:
          alpn_protocols: [h2, http/1.1]
          validation_context: { trusted_ca: { filename: `+up.caFile+` } }`),
		filters: []func(*fakeFilter){func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				sawAuthority, _ = h.Get(":authority")
				return httpfilter.HeadersContinue
			}
		}},
	})
	for i := range 2 { // the second request reuses the pooled TLS connection
		resp, body := post(t, e.url+"/v1/chat/completions", "hello")
		if resp.StatusCode != 201 || body != "tls POST /v1/chat/completions" {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
	}
	seen := up.requests()
	if len(seen) != 2 {
		t.Fatalf("upstream saw %d requests", len(seen))
	}
	got := seen[0]
	want := tlsSeen{host: "api.example.test", sni: "api.example.test", alpn: "http/1.1", body: "hello", version: tls.VersionTLS12}
	if got != want {
		t.Fatalf("upstream saw %+v, want %+v", got, want)
	}
	// The rewrite is the router's: filters before it saw the client's host.
	if sawAuthority != strings.TrimPrefix(e.url, "http://") {
		t.Errorf("filter saw :authority %q", sawAuthority)
	}
}

func TestTLSAutoHostRewriteAndSNI(t *testing.T) {
	up := newTLSUpstream(t)
	e := start(t, setup{
		routes: `
              - match: { prefix: "/" }
                route: { cluster: llm, auto_host_rewrite: true }`,
		clusters: tlsClusterYAML("llm", up.addr(), "named.test", `
        sni: ignored.test
        auto_host_sni: true
        common_tls_context:
          tls_params: { tls_maximum_protocol_version: TLSv1_3 }
          validation_context: { trusted_ca: { filename: `+up.caFile+` } }`),
	})
	resp, body := get(t, e.url+"/x")
	if resp.StatusCode != 201 {
		t.Fatalf("%d %q", resp.StatusCode, body)
	}
	got := up.requests()[0]
	if got.host != "named.test" || got.sni != "named.test" || got.version != tls.VersionTLS13 || got.alpn != "" {
		t.Fatalf("upstream saw %+v", got)
	}
}

const envoyVerifyFailed = "upstream connect error or disconnect/reset before headers. reset reason: remote connection failure, " +
	"transport failure reason: TLS_error:|268435581:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED:TLS_error_end"

func TestTLSWrongCAIs503(t *testing.T) {
	up := newTLSUpstream(t)
	e := start(t, setup{
		routes: `
              - match: { prefix: "/" }
                route: { cluster: llm }`,
		clusters: tlsClusterYAML("llm", up.addr(), "", `
        sni: example.com
        common_tls_context: { validation_context: { trusted_ca: { filename: `+otherCA(t)+` } } }`),
		filters: []func(*fakeFilter){nil},
	})
	resp, body := get(t, e.url+"/")
	if resp.StatusCode != 503 || body != envoyVerifyFailed {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
	if n := len(up.requests()); n != 0 {
		t.Fatalf("upstream handled %d requests", n)
	}
	if n := e.clusters.byName["llm"].cxFail.Value(); n != 1 {
		t.Errorf("upstream_cx_connect_fail = %d", n)
	}
	f := e.facs[0].filters()[0]
	<-f.done
	info := *f.cb.Info()
	if want := "upstream_reset_before_response_started{remote_connection_failure,TLS_error:|268435581:SSL_routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED:TLS_error_end}"; info.ResponseDetails != want {
		t.Errorf("response details %q", info.ResponseDetails)
	}
}

func TestTLSWithoutCAUsesSystemRoots(t *testing.T) {
	// The test server's certificate is in no system store: rejected, where
	// Envoy would not have verified at all.
	up := newTLSUpstream(t)
	e := start(t, setup{
		clusters: tlsClusterYAML("a", up.addr(), "", `
        sni: example.com`),
	})
	resp, body := get(t, e.url+"/")
	if resp.StatusCode != 503 || body != envoyVerifyFailed {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestTLSToPlaintextServerIs503(t *testing.T) {
	plain := newUpstream(t, nil)
	e := start(t, setup{clusters: tlsClusterYAML("a", plain.addr(), "", `
        sni: example.com`)})
	resp, body := get(t, e.url+"/")
	if resp.StatusCode != 503 || !strings.HasSuffix(body, "transport failure reason: TLS_error:|268435703:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER:TLS_error_end") {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestConnectRefusedTransportReason(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := ln.Addr().String()
	ln.Close()
	e := start(t, setup{upstreams: map[string]string{"a": dead}})
	resp, body := get(t, e.url+"/")
	want := fmt.Sprintf("upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: %d", int(syscall.ECONNREFUSED))
	if resp.StatusCode != 503 || body != want {
		t.Fatalf("got %d %q", resp.StatusCode, body)
	}
}

func TestHTTPCallerTLS(t *testing.T) {
	up := newTLSUpstream(t)
	e := start(t, setup{
		routes: `
              - match: { prefix: "/" }
                direct_response: { status: 200 }`,
		clusters: tlsClusterYAML("host", up.addr(), "", `
        sni: host.example.test
        common_tls_context: { validation_context: { trusted_ca: { filename: `+up.caFile+` } } }`),
	})
	hdr := httpfilter.Headers{{Key: ":method", Value: "POST"}, {Key: ":path", Value: "/prepare"}, {Key: ":authority", Value: "chime_host"}}
	resp, err := e.clusters.Call(context.Background(), "host", hdr, []byte("payload"), nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := resp.Headers.Get(":status"); st != "201" || string(resp.Body) != "tls POST /prepare" {
		t.Fatalf("got %v %q", resp.Headers, resp.Body)
	}
	got := up.requests()[0]
	// http_call sends the filter's :authority; the route's rewrite is not involved.
	if got.host != "chime_host" || got.sni != "host.example.test" || got.body != "payload" {
		t.Fatalf("upstream saw %+v", got)
	}
}

// With the system-roots mode (VerifySNI), the certificate must also be
// valid for the SNI: the test certificate covers example.com only.
func TestVerifySNIChecksTheName(t *testing.T) {
	up := newTLSUpstream(t)
	pool := x509.NewCertPool()
	pool.AddCert(up.Certificate())
	hdr := httpfilter.Headers{{Key: ":method", Value: "GET"}, {Key: ":path", Value: "/"}, {Key: ":authority", Value: "x"}}
	for _, tc := range []struct {
		sni    string
		verify bool
		ok     bool
	}{
		{"example.com", true, true},
		{"wrong.test", true, false},
		{"wrong.test", false, true}, // trusted_ca mode: the chain only, as Envoy
	} {
		cs := NewClusters([]*config.Cluster{{
			Name: "c", Type: "STATIC", LBPolicy: "ROUND_ROBIN", ConnectTimeout: time.Second, Network: "tcp",
			Endpoints: []string{up.addr()}, Hostnames: []string{""},
			TLS: &config.UpstreamTLS{SNI: tc.sni, VerifySNI: tc.verify, RootCAs: pool},
		}}, stats.New())
		resp, err := cs.Call(context.Background(), "c", hdr, nil, nil, 5*time.Second)
		cs.Close()
		if err != nil {
			t.Fatalf("sni %s verify=%v: err = %v; a failed handshake is a 503 answer, as Envoy's async client gives", tc.sni, tc.verify, err)
		}
		st, _ := resp.Headers.Get(":status")
		// A refused certificate is a connect failure: the router's 503 local
		// reply names the TLS failure as its transport failure reason.
		failed := st == "503" && strings.Contains(string(resp.Body), "transport failure reason: TLS_error") && strings.Contains(string(resp.Body), "CERTIFICATE_VERIFY_FAILED")
		if tc.ok == failed || (tc.ok && st == "503") {
			t.Errorf("sni %s verify=%v: %s %q", tc.sni, tc.verify, st, resp.Body)
		}
	}
}
