package proxy

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// Clusters is the cluster manager: one connection pool per cluster,
// endpoints picked per request. It implements httpfilter.HTTPCaller for
// proxy_http_call (docs/local-runtime.md).
type Clusters struct {
	byName map[string]*cluster
	stats  *stats.Store
}

type cluster struct {
	cfg           *config.Cluster
	transport     *http.Transport
	dialer        *net.Dialer
	network       string
	scheme        string            // "https" with a TLS transport socket
	sni           map[string]string // endpoint address → SNI to send
	next          atomic.Uint64
	rq            httpfilter.Metric
	cxFail        httpfilter.Metric
	rqTimeout     httpfilter.Metric
	perTryTimeout httpfilter.Metric
	overflow      httpfilter.Metric
	// open counts http_calls in flight, against cfg.MaxRequests.
	open atomic.Int64
}

// NewClusters builds the pools for the configured clusters.
func NewClusters(cfgs []*config.Cluster, st *stats.Store) *Clusters {
	if st == nil {
		st = stats.New()
	}
	cs := &Clusters{byName: map[string]*cluster{}, stats: st}
	var _ httpfilter.ClusterChecker = cs
	for _, c := range cfgs {
		tag := stats.Tag{Name: "envoy_cluster_name", Value: c.Name}
		cl := &cluster{
			cfg:           c,
			rq:            st.Counter("cluster."+c.Name+".upstream_rq_total", "cluster.upstream_rq_total", tag),
			cxFail:        st.Counter("cluster."+c.Name+".upstream_cx_connect_fail", "cluster.upstream_cx_connect_fail", tag),
			rqTimeout:     st.Counter("cluster."+c.Name+".upstream_rq_timeout", "cluster.upstream_rq_timeout", tag),
			perTryTimeout: st.Counter("cluster."+c.Name+".upstream_rq_per_try_timeout", "cluster.upstream_rq_per_try_timeout", tag),
			overflow:      st.Counter("cluster."+c.Name+".upstream_rq_pending_overflow", "cluster.upstream_rq_pending_overflow", tag),
			dialer:        &net.Dialer{KeepAlive: 30 * time.Second},
			network:       c.Network,
			scheme:        "http",
		}
		if cl.network == "" {
			cl.network = "tcp"
		}
		cl.transport = &http.Transport{
			DialContext: cl.dial,
			// The proxy forwards bytes as they are: no transparent gzip.
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     time.Hour,
			WriteBufferSize:     64 << 10,
		}
		if c.TLS != nil {
			// https requests go through dialTLS; with a custom TLS dialer
			// net/http does not switch to HTTP/2, so HTTP/1.1 it is.
			cl.scheme = "https"
			cl.transport.DialTLSContext = cl.dialTLS
			cl.sni = map[string]string{}
			for i, ep := range c.Endpoints {
				cl.sni[ep] = c.TLS.SNI
				if c.TLS.AutoHostSNI && i < len(c.Hostnames) && c.Hostnames[i] != "" {
					cl.sni[ep] = c.Hostnames[i]
				}
			}
		}
		cs.byName[c.Name] = cl
	}
	return cs
}

// Close drops idle upstream connections.
func (cs *Clusters) Close() {
	for _, c := range cs.byName {
		c.transport.CloseIdleConnections()
	}
}

// endpoint is a picked upstream host.
type endpoint struct {
	addr     string // host:port
	hostname string // for auto_host_rewrite ("" = none)
}

// pick returns the next endpoint by the cluster's lb_policy.
func (c *cluster) pick() endpoint {
	n := len(c.cfg.Endpoints)
	var i int
	if c.cfg.LBPolicy == "RANDOM" {
		i = rand.IntN(n)
	} else {
		i = int((c.next.Add(1) - 1) % uint64(n))
	}
	ep := endpoint{addr: c.cfg.Endpoints[i]}
	if i < len(c.cfg.Hostnames) {
		ep.hostname = c.cfg.Hostnames[i]
	}
	return ep
}

// dial opens the TCP connection; connect_timeout bounds it.
func (c *cluster) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	if t := c.cfg.ConnectTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	conn, err := c.dialer.DialContext(ctx, c.network, addr)
	if err != nil {
		c.cxFail.Add(1)
		return nil, &connectError{err: err, transport: transportFailure(err)}
	}
	return conn, nil
}

// dialTLS opens the connection and completes the TLS handshake. As in
// Envoy, connect_timeout covers both, and a failed handshake is a connect
// failure (the client gets 503).
func (c *cluster) dialTLS(ctx context.Context, _, addr string) (net.Conn, error) {
	if t := c.cfg.ConnectTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	raw, err := c.dialer.DialContext(ctx, c.network, addr)
	if err != nil {
		c.cxFail.Add(1)
		return nil, &connectError{err: err, transport: transportFailure(err)}
	}
	conn := tls.Client(raw, c.tlsConfig(c.sni[addr]))
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		c.cxFail.Add(1)
		return nil, &connectError{err: err, remote: true, transport: tlsFailure(err)}
	}
	return conn, nil
}

// tlsConfig builds the client config for one SNI. Verification is done in
// VerifyConnection because Envoy's trusted_ca checks the chain but not the
// name, which crypto/tls cannot express otherwise.
func (c *cluster) tlsConfig(sni string) *tls.Config {
	t := c.cfg.TLS
	verifyName := ""
	if t.VerifySNI {
		verifyName = sni
	}
	return &tls.Config{
		ServerName:         sni,
		NextProtos:         t.ALPN,
		MinVersion:         t.MinVersion,
		MaxVersion:         t.MaxVersion,
		InsecureSkipVerify: true, // verified below
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return &verifyError{errors.New("no server certificate")}
			}
			opts := x509.VerifyOptions{Roots: t.RootCAs, DNSName: verifyName, Intermediates: x509.NewCertPool()}
			for _, ic := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(ic)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return &verifyError{err}
			}
			return nil
		},
	}
}

// verifyError is a rejected server certificate.
type verifyError struct{ err error }

func (e *verifyError) Error() string { return "certificate verify failed: " + e.err.Error() }
func (e *verifyError) Unwrap() error { return e.err }

// connectError marks a failure to establish the upstream connection
// (Envoy's "connection failure" reset reason, "remote connection failure"
// when the TLS handshake failed), with Envoy's transport failure reason.
type connectError struct {
	err       error
	remote    bool
	transport string
}

func (e *connectError) Error() string { return e.resetReason() + ": " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

func (e *connectError) resetReason() string {
	if e.remote {
		return "remote connection failure"
	}
	return "connection failure"
}

// transportFailure is Envoy's reason for a failed TCP connect.
func transportFailure(err error) string {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return fmt.Sprintf("delayed connect error: %d", int(errno))
	}
	return ""
}

// tlsFailure renders a handshake error the way Envoy (BoringSSL) reports
// the common ones.
func tlsFailure(err error) string {
	var ve *verifyError
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &ve):
		return "TLS_error:|268435581:SSL routines:OPENSSL_internal:CERTIFICATE_VERIFY_FAILED:TLS_error_end"
	case errors.As(err, &rh):
		return "TLS_error:|268435703:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER:TLS_error_end"
	}
	return "TLS_error:|" + err.Error() + ":TLS_error_end"
}

// hopByHop headers are connection-scoped and never forwarded.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "transfer-encoding": true,
	"upgrade": true, "te": true, "trailer": true,
}

// newUpstreamRequest turns Envoy-style headers into an outgoing request.
func (c *cluster) newUpstreamRequest(ctx context.Context, ep endpoint, h httpfilter.Headers, body io.Reader, contentLength int64) (*http.Request, error) {
	method, _ := h.Get(":method")
	path, _ := h.Get(":path")
	authority, _ := h.Get(":authority")
	req, err := http.NewRequestWithContext(ctx, method, c.scheme+"://"+ep.addr+path, body)
	if err != nil {
		return nil, err
	}
	req.Host = authority
	req.ContentLength = contentLength
	if contentLength == 0 {
		req.Body = http.NoBody
	}
	req.Header = make(http.Header, len(h))
	for _, e := range h {
		// te is hop-by-hop, but Envoy's codec writes the "te: trailers"
		// its connection manager kept (and a filter's te) as it writes any.
		if strings.HasPrefix(e.Key, ":") || hopByHop[e.Key] && e.Key != "te" || e.Key == "content-length" || e.Key == "host" {
			continue
		}
		req.Header[http.CanonicalHeaderKey(e.Key)] = append(req.Header[http.CanonicalHeaderKey(e.Key)], e.Value)
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // no Go default user agent
	}
	return req, nil
}

// HasCluster implements httpfilter.ClusterChecker.
func (cs *Clusters) HasCluster(name string) bool { return cs.byName[name] != nil }

// Call implements httpfilter.HTTPCaller as Envoy's async client behaves:
// the request goes through the router, so a connect failure or a reset
// before headers comes back as the router's 503 local reply and an
// upstream timeout as its 504, with headers and body; only a failure
// after the response started (or the caller's own cancel) is an error,
// which the wasm host delivers as num_headers=0. The required pseudo
// headers must be present; an empty value is allowed (Envoy checks
// presence only).
func (cs *Clusters) Call(ctx context.Context, name string, headers httpfilter.Headers, body []byte, trailers httpfilter.Headers, timeout time.Duration) (*httpfilter.CallResponse, error) {
	for _, k := range []string{":method", ":path", ":authority"} {
		if _, ok := headers.Get(k); !ok {
			return nil, fmt.Errorf("http_call: missing required header %s", k)
		}
	}
	headers = slices.Clone(headers) // the caller's stay as they are
	if v, _ := headers.Get(":method"); v == "" {
		headers.Set(":method", http.MethodGet) // what an empty method means on the wire
	}
	if v, _ := headers.Get(":path"); v == "" {
		headers.Set(":path", "/")
	}
	// The async client goes through a router of its own: it marks the
	// request internal and handles the x-envoy timeout headers as the
	// stream router does, with the call's timeout as the route's.
	timeout, _ = routerTimeouts(&headers, timeout)
	headers.Set("x-envoy-internal", "true")
	parent := ctx
	c := cs.byName[name]
	if c == nil {
		return nil, fmt.Errorf("%w: %q", httpfilter.ErrUnknownCluster, name)
	}
	// The circuit breaker: past max_requests open requests the router
	// answers at once with its overflow reply.
	if n := c.open.Add(1); c.cfg.MaxRequests > 0 && n > int64(c.cfg.MaxRequests) {
		c.open.Add(-1)
		c.overflow.Add(1)
		r := localReplyResponse(http.StatusServiceUnavailable, "upstream connect error or disconnect/reset before headers. reset reason: overflow")
		r.Headers = append(r.Headers, httpfilter.Header{Key: "x-envoy-overloaded", Value: "true"})
		return r, nil
	}
	defer c.open.Add(-1)
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := c.newUpstreamRequest(ctx, c.pick(), headers, bytes.NewReader(body), int64(len(body)))
	if err != nil {
		return nil, err
	}
	if len(trailers) > 0 {
		req.Trailer = http.Header{}
		for _, t := range trailers {
			req.Trailer.Add(t.Key, t.Value)
		}
		req.ContentLength = -1
	}
	c.rq.Add(1)
	resp, err := c.transport.RoundTrip(req)
	if err != nil {
		switch {
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			c.rqTimeout.Add(1)
			return localReplyResponse(http.StatusGatewayTimeout, "upstream request timeout"), nil
		case parent.Err() != nil:
			return nil, err // the caller went away: nobody gets an answer
		}
		body, _ := resetBeforeHeaders(err)
		return localReplyResponse(http.StatusServiceUnavailable, body), nil
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	out := &httpfilter.CallResponse{Headers: responseHeaders(resp), Body: data}
	for k, vs := range resp.Trailer {
		for _, v := range vs {
			out.Trailers = append(out.Trailers, httpfilter.Header{Key: strings.ToLower(k), Value: v})
		}
	}
	return out, nil
}

// responseHeaders converts an upstream response head: ":status" first,
// then the headers sorted by name (Go does not keep wire order).
func responseHeaders(resp *http.Response) httpfilter.Headers {
	h := httpfilter.Headers{{Key: ":status", Value: fmt.Sprint(resp.StatusCode)}}
	h = appendHeaderMap(h, resp.Header)
	if resp.ContentLength >= 0 {
		if _, ok := h.Get("content-length"); !ok && resp.Header.Get("Content-Length") == "" && len(resp.TransferEncoding) == 0 {
			h = append(h, httpfilter.Header{Key: "content-length", Value: fmt.Sprint(resp.ContentLength)})
		}
	}
	return h
}

func appendHeaderMap(h httpfilter.Headers, m http.Header) httpfilter.Headers {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sortStrings(keys)
	for _, k := range keys {
		lk := strings.ToLower(k)
		if hopByHop[lk] {
			continue
		}
		for _, v := range m[k] {
			h = append(h, httpfilter.Header{Key: lk, Value: v})
		}
	}
	return h
}

// localReplyResponse is a router local reply as an http_call response.
func localReplyResponse(status int, body string) *httpfilter.CallResponse {
	return &httpfilter.CallResponse{
		Headers: httpfilter.Headers{
			{Key: ":status", Value: strconv.Itoa(status)},
			{Key: "content-length", Value: strconv.Itoa(len(body))},
			{Key: "content-type", Value: "text/plain"},
		},
		Body: []byte(body),
	}
}
