package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// selfSignedPEM is a throwaway CA certificate in PEM.
func selfSignedPEM(t testing.TB) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// tlsCluster is a cluster "llm" with the given transport_socket typed_config body.
func tlsCluster(typ, body string) string {
	return `
  - name: llm
    type: STRICT_DNS
    load_assignment:
      cluster_name: llm
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: api.example.test, port_value: 443 } } } }] }]
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/` + typ + body
}

const upstreamTLSType = "envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"

func TestParseUpstreamTLS(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, selfSignedPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Parse([]byte(doc("", "", "", tlsCluster(upstreamTLSType, `
        sni: api.example.test
        common_tls_context:
          alpn_protocols: [h2, http/1.1]
          tls_params: { tls_minimum_protocol_version: TLSv1_2, tls_maximum_protocol_version: tlsv1_3 }
          validation_context: { trusted_ca: { filename: `+caFile+` } }`))), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := c.Cluster("llm").TLS
	if got == nil || got.SNI != "api.example.test" || got.RootCAs == nil || got.VerifySNI || got.AutoHostSNI {
		t.Fatalf("TLS = %+v", got)
	}
	if len(got.ALPN) != 1 || got.ALPN[0] != "http/1.1" {
		t.Errorf("ALPN = %q, want only http/1.1 offered", got.ALPN)
	}
	if got.MinVersion != tls.VersionTLS12 || got.MaxVersion != tls.VersionTLS13 {
		t.Errorf("versions %x..%x", got.MinVersion, got.MaxVersion)
	}

	// Without validation_context: system roots, and the SNI is verified.
	// Envoy's client default is TLS 1.2 at most.
	c, err = Parse([]byte(doc("", "", "", tlsCluster(upstreamTLSType, `
        auto_host_sni: true`))), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got = c.Cluster("llm").TLS
	if got == nil || got.RootCAs != nil || !got.VerifySNI || !got.AutoHostSNI || got.SNI != "" || got.ALPN != nil {
		t.Fatalf("TLS = %+v", got)
	}
	if got.MinVersion != tls.VersionTLS12 || got.MaxVersion != tls.VersionTLS12 {
		t.Errorf("default versions %x..%x, want Envoy's TLS 1.2..1.2", got.MinVersion, got.MaxVersion)
	}

	// Inline CA, through a TypedStruct.
	ca := strings.ReplaceAll(string(selfSignedPEM(t)), "\n", `\n`)
	c, err = Parse([]byte(doc("", "", "", tlsCluster("udpa.type.v1.TypedStruct", `
        type_url: type.googleapis.com/`+upstreamTLSType+`
        value: { common_tls_context: { validation_context: { trusted_ca: { inline_string: "`+ca+`" } } } }`))), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got = c.Cluster("llm").TLS; got == nil || got.RootCAs == nil {
		t.Fatalf("TLS = %+v", got)
	}

	// raw_buffer is plaintext.
	c, err = Parse([]byte(doc("", "", "", tlsCluster("envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer", ""))), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Cluster("llm").TLS != nil {
		t.Fatal("raw_buffer gave TLS")
	}
}

func TestParseUpstreamTLSInvalid(t *testing.T) {
	badPEM := filepath.Join(t.TempDir(), "bad.pem")
	os.WriteFile(badPEM, []byte("not a certificate"), 0o600)
	tests := []struct {
		name, yaml string
		want       []string
	}{
		{"client certificate", doc("", "", "", tlsCluster(upstreamTLSType, `
        common_tls_context: { tls_certificates: [{ certificate_chain: { filename: a.pem }, private_key: { filename: k.pem } }] }`)),
			[]string{"clusters[0] (llm): transport_socket.typed_config.common_tls_context.tls_certificates: not supported"}},
		{"SAN matching", doc("", "", "", tlsCluster(upstreamTLSType, `
        common_tls_context: { validation_context: { match_typed_subject_alt_names: [{ san_type: DNS, matcher: { exact: x } }] } }`)),
			[]string{"validation_context.match_typed_subject_alt_names", "not supported"}},
		{"unsupported TLS field", doc("", "", "", tlsCluster(upstreamTLSType, `
        allow_renegotiation: true`)), []string{"transport_socket.typed_config.allow_renegotiation", "not supported"}},
		{"typo", doc("", "", "", tlsCluster(upstreamTLSType, `
        snii: x`)), []string{`unknown field "snii"`}},
		{"h2 only", doc("", "", "", tlsCluster(upstreamTLSType, `
        common_tls_context: { alpn_protocols: [h2] }`)), []string{"alpn_protocols", `"http/1.1"`}},
		{"bad PEM", doc("", "", "", tlsCluster(upstreamTLSType, `
        common_tls_context: { validation_context: { trusted_ca: { filename: `+badPEM+` } } }`)), []string{"trusted_ca", badPEM}},
		{"missing CA file", doc("", "", "", tlsCluster(upstreamTLSType, `
        common_tls_context: { validation_context: { trusted_ca: { filename: /nonexistent/ca.pem } } }`)), []string{"trusted_ca", "/nonexistent/ca.pem"}},
		{"min above max", doc("", "", "", tlsCluster(upstreamTLSType, `
        common_tls_context: { tls_params: { tls_minimum_protocol_version: TLSv1_3, tls_maximum_protocol_version: TLSv1_2 } }`)),
			[]string{"tls_minimum_protocol_version TLSv1_3 is above"}},
		{"downstream context", doc("", "", "", tlsCluster("envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext", "")),
			[]string{"DownstreamTlsContext", "not supported"}},
		{"socket matches", strings.Replace(doc("", "", "", ""), "connect_timeout: 1s", "connect_timeout: 1s\n    transport_socket_matches: [{ name: m, transport_socket: { name: raw } }]", 1),
			[]string{"transport_socket_matches", "not supported"}},
		{"unsupported route host option", doc("", `
              - match: { prefix: "/" }
                route: { cluster: llm, host_rewrite_header: x-host }`, "", ""), []string{"route.host_rewrite_header", "not supported"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "test.yaml")
			if err == nil {
				t.Fatal("Parse accepted an invalid config")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestHostRewriteAndHostnames(t *testing.T) {
	c, err := Parse([]byte(doc("", `
              - match: { prefix: "/a" }
                route: { cluster: llm, host_rewrite_literal: api.example.test }
              - match: { prefix: "/b" }
                route: { cluster: dns, auto_host_rewrite: true }`, "", `
  - name: llm
    load_assignment:
      cluster_name: llm
      endpoints: [{ lb_endpoints: [
        { endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 1 } } } },
        { endpoint: { hostname: named.test, address: { socket_address: { address: 127.0.0.2, port_value: 1 } } } }] }]
  - name: dns
    type: LOGICAL_DNS
    load_assignment:
      cluster_name: dns
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: upstream.test, port_value: 80 } } } }] }]`)), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	routes := c.Listeners[0].VirtualHosts[0].Routes
	if routes[0].HostRewrite != "api.example.test" || routes[0].AutoHostRewrite {
		t.Errorf("route a: %+v", routes[0])
	}
	if routes[1].HostRewrite != "" || !routes[1].AutoHostRewrite {
		t.Errorf("route b: %+v", routes[1])
	}
	if h := c.Cluster("llm").Hostnames; len(h) != 2 || h[0] != "" || h[1] != "named.test" {
		t.Errorf("static hostnames %q", h)
	}
	if h := c.Cluster("dns").Hostnames; len(h) != 1 || h[0] != "upstream.test" {
		t.Errorf("dns hostnames %q", h)
	}
}

func TestOverrideUpstream(t *testing.T) {
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	os.WriteFile(caFile, selfSignedPEM(t), 0o600)
	// The file's llm has TLS and auto_host_rewrite; a second route and
	// cluster must stay as written.
	yaml := doc("", `
              - match: { prefix: "/host" }
                route: { cluster: other }
              - match: { prefix: "/" }
                route: { cluster: llm, auto_host_rewrite: true }`, "", tlsCluster(upstreamTLSType, `
        sni: file.test
        common_tls_context: { validation_context: { trusted_ca: { filename: `+caFile+` } } }
  - name: other
    load_assignment:
      cluster_name: other
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 8787 } } } }] }]`))
	tests := []struct {
		url, typ, endpoint, host, sni string
	}{
		{"https://api.openai.com", "LOGICAL_DNS", "api.openai.com:443", "api.openai.com", "api.openai.com"},
		{"https://api.openai.com/", "LOGICAL_DNS", "api.openai.com:443", "api.openai.com", "api.openai.com"},
		{"https://localhost:8443", "LOGICAL_DNS", "localhost:8443", "localhost:8443", "localhost"},
		{"http://127.0.0.1:9000", "STATIC", "127.0.0.1:9000", "127.0.0.1:9000", ""},
		{"http://example.test", "LOGICAL_DNS", "example.test:80", "example.test", ""},
		{"https://[::1]:8443", "STATIC", "[::1]:8443", "[::1]:8443", "::1"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			c, err := Parse([]byte(yaml), "test.yaml")
			if err != nil {
				t.Fatal(err)
			}
			o, err := c.OverrideUpstream("llm", tt.url)
			if err != nil {
				t.Fatal(err)
			}
			cl := c.Cluster("llm")
			if o.Type != tt.typ || cl.Type != tt.typ || o.Endpoint != tt.endpoint || o.Host != tt.host {
				t.Fatalf("override %+v, cluster type %s", o, cl.Type)
			}
			if len(cl.Endpoints) != 1 || cl.Endpoints[0] != tt.endpoint || len(cl.Hostnames) != 1 {
				t.Fatalf("endpoints %q hostnames %q", cl.Endpoints, cl.Hostnames)
			}
			if tt.sni == "" {
				if cl.TLS != nil || o.TLS {
					t.Fatalf("http override kept TLS %+v", cl.TLS)
				}
			} else if cl.TLS == nil || cl.TLS.SNI != tt.sni || !cl.TLS.VerifySNI || cl.TLS.RootCAs != nil || !o.TLS {
				t.Fatalf("TLS %+v", cl.TLS)
			}
			routes := c.Listeners[0].VirtualHosts[0].Routes
			if routes[1].HostRewrite != tt.host || routes[1].AutoHostRewrite {
				t.Errorf("llm route %+v", routes[1])
			}
			if routes[0].HostRewrite != "" || c.Cluster("other").Endpoints[0] != "127.0.0.1:8787" {
				t.Errorf("override touched other routes or clusters: %+v %+v", routes[0], c.Cluster("other"))
			}
		})
	}
}

func TestOverrideUpstreamInvalid(t *testing.T) {
	for _, bad := range []struct{ url, want string }{
		{"api.openai.com", "scheme"},
		{"ftp://x", "scheme"},
		{"https://", "no host"},
		{"https:x", "no host"},
		{"https://x/v1", `path "/v1"`},
		{"https://x?a=1", "query"},
		{"https://x#f", "fragment"},
		{"https://u:p@x", "credentials"},
		{"https://x:99999", "port"},
		{"https://x:", "port"},
		{"https://x:0", "port"},
		{"http://[::1", "want http://host"},
		{"https://]", "neither an IP address nor a DNS name"},
		{"https://a b.com", "want http://host"},
		{"https://-x.com", "neither an IP address nor a DNS name"},
		{"https://x..y", "neither an IP address nor a DNS name"},
	} {
		c, err := Parse([]byte(doc("", "", "", "")), "test.yaml")
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.OverrideUpstream("llm", bad.url)
		if err == nil || !strings.Contains(err.Error(), bad.want) || !strings.Contains(err.Error(), bad.url) {
			t.Errorf("%q: error %v, want it to mention %q and the URL", bad.url, err, bad.want)
		}
		if ep := c.Cluster("llm").Endpoints[0]; ep != "127.0.0.1:8788" {
			t.Errorf("%q: a failed override changed the cluster to %s", bad.url, ep)
		}
	}
	c, _ := Parse([]byte(doc("", "", "", "")), "test.yaml")
	if _, err := c.OverrideUpstream("provider", "https://x"); err == nil || !strings.Contains(err.Error(), `no cluster "provider"`) {
		t.Errorf("missing cluster: %v", err)
	}
}

func FuzzOverrideUpstream(f *testing.F) {
	for _, s := range []string{"https://api.openai.com", "http://127.0.0.1:9000", "https://[::1]:1/", "https://x:", "api.openai.com", "http://a/b?c#d", "https://%zz", "https://]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		c := &Config{Clusters: []*Cluster{{Name: "llm", Type: "STATIC", Endpoints: []string{"127.0.0.1:1"}, Hostnames: []string{""}}}}
		o, err := c.OverrideUpstream("llm", raw)
		if err != nil {
			if c.Clusters[0].Endpoints[0] != "127.0.0.1:1" {
				t.Fatal("failed override changed the cluster")
			}
			return
		}
		host, port, err := net.SplitHostPort(o.Endpoint)
		if err != nil || host == "" || port == "" || c.Clusters[0].Endpoints[0] != o.Endpoint ||
			(net.ParseIP(host) == nil && !validDNSName(host)) {
			t.Fatalf("%q: endpoint %q (%v)", raw, o.Endpoint, err)
		}
		if (net.ParseIP(host) != nil) != (o.Type == "STATIC") || o.TLS != (c.Clusters[0].TLS != nil) {
			t.Fatalf("%q: %+v", raw, o)
		}
	})
}

func TestOverrideProductConfig(t *testing.T) {
	c, err := Load("../../../envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o, err := c.OverrideUpstream("llm", "https://api.openai.com")
	if err != nil {
		t.Fatal(err)
	}
	if o.Endpoint != "api.openai.com:443" || c.Cluster("llm").TLS == nil || c.Listener("chime").VirtualHosts[0].Routes[0].HostRewrite != "api.openai.com" {
		t.Fatalf("override %+v", o)
	}
	if c.Cluster("chime_host").Endpoints[0] != "127.0.0.1:8787" || c.Cluster("chime_host").TLS != nil {
		t.Fatalf("host cluster changed: %+v", c.Cluster("chime_host"))
	}
}
