package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

// upstreamTLSFields is what the chime proxy implements of UpstreamTlsContext.
var upstreamTLSFields = newAllowlist(
	"sni",
	"auto_host_sni",
	"common_tls_context.alpn_protocols",
	"common_tls_context.tls_params.tls_minimum_protocol_version",
	"common_tls_context.tls_params.tls_maximum_protocol_version",
	"common_tls_context.validation_context.trusted_ca.filename",
	"common_tls_context.validation_context.trusted_ca.inline_string",
	"common_tls_context.validation_context.trusted_ca.inline_bytes",
)

// ALPNHTTP11 is the only protocol the upstream transport speaks.
const ALPNHTTP11 = "http/1.1"

// translateTransportSocket reads a cluster's transport_socket. Like Envoy it
// goes by the typed_config type, not the name: UpstreamTlsContext gives TLS,
// RawBuffer plaintext (nil).
func translateTransportSocket(ts *corev3.TransportSocket) (*UpstreamTLS, error) {
	const where = "transport_socket"
	msg, err := unpackTyped(ts.GetTypedConfig(), ts.GetName(), where)
	if err != nil {
		return nil, err
	}
	switch m := msg.(type) {
	case *rawbufferv3.RawBuffer:
		return nil, nil
	case *tlsv3.UpstreamTlsContext:
		if err := checkSupported(m.ProtoReflect(), upstreamTLSFields, "", where+".typed_config"); err != nil {
			return nil, err
		}
		return translateUpstreamTLS(m, where+".typed_config")
	default:
		return nil, fmt.Errorf("%s: transport socket %q (%s): not supported by the chime proxy (tls and raw_buffer are)",
			where, ts.GetName(), msg.ProtoReflect().Descriptor().FullName())
	}
}

func translateUpstreamTLS(m *tlsv3.UpstreamTlsContext, where string) (*UpstreamTLS, error) {
	ctx := m.GetCommonTlsContext()
	t := &UpstreamTLS{SNI: m.GetSni(), AutoHostSNI: m.GetAutoHostSni()}
	// Envoy's client defaults: TLS 1.2 at least and at most.
	t.MinVersion, t.MaxVersion = tls.VersionTLS12, tls.VersionTLS12
	if p := ctx.GetTlsParams(); p != nil {
		if v := p.GetTlsMinimumProtocolVersion(); v != tlsv3.TlsParameters_TLS_AUTO {
			t.MinVersion = tlsVersion(v)
		}
		if v := p.GetTlsMaximumProtocolVersion(); v != tlsv3.TlsParameters_TLS_AUTO {
			t.MaxVersion = tlsVersion(v)
		}
		if t.MinVersion > t.MaxVersion {
			return nil, fmt.Errorf("%s.common_tls_context.tls_params: tls_minimum_protocol_version %s is above tls_maximum_protocol_version %s",
				where, p.GetTlsMinimumProtocolVersion(), p.GetTlsMaximumProtocolVersion())
		}
	}
	if alpn := ctx.GetAlpnProtocols(); len(alpn) > 0 {
		// Envoy's HTTP/1 codec cannot use anything else the server might pick.
		if !slices.Contains(alpn, ALPNHTTP11) {
			return nil, fmt.Errorf("%s.common_tls_context.alpn_protocols %q: the chime proxy speaks HTTP/1.1 upstream, so the list must include %q",
				where, alpn, ALPNHTTP11)
		}
		t.ALPN = []string{ALPNHTTP11}
	}
	if ca := ctx.GetValidationContext().GetTrustedCa(); ca != nil {
		pem, err := dataSource(ca)
		if err != nil {
			return nil, fmt.Errorf("%s.common_tls_context.validation_context.trusted_ca: %w", where, err)
		}
		t.RootCAs = x509.NewCertPool()
		if !t.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s.common_tls_context.validation_context.trusted_ca: Failed to load trusted CA certificates from %s: no PEM certificate found",
				where, dataSourceName(ca))
		}
	} else {
		// Envoy would not verify the server at all here; the chime proxy
		// verifies it against the system roots, and the SNI when one is sent.
		t.VerifySNI = true
	}
	return t, nil
}

func tlsVersion(v tlsv3.TlsParameters_TlsProtocol) uint16 {
	switch v {
	case tlsv3.TlsParameters_TLSv1_0:
		return tls.VersionTLS10
	case tlsv3.TlsParameters_TLSv1_1:
		return tls.VersionTLS11
	case tlsv3.TlsParameters_TLSv1_2:
		return tls.VersionTLS12
	}
	return tls.VersionTLS13
}

func dataSourceName(ds *corev3.DataSource) string {
	if f := ds.GetFilename(); f != "" {
		return f
	}
	return "<inline>"
}
