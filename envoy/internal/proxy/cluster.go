package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// Clusters is the cluster manager: one connection pool per cluster,
// endpoints picked per request. It implements httpfilter.HTTPCaller for
// proxy_http_call (SPEC §13).
type Clusters struct {
	byName map[string]*cluster
	stats  *stats.Store
}

type cluster struct {
	cfg       *config.Cluster
	transport *http.Transport
	next      atomic.Uint64
	rq        httpfilter.Metric
	cxFail    httpfilter.Metric
	rqTimeout httpfilter.Metric
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
			cfg:       c,
			rq:        st.Counter("cluster."+c.Name+".upstream_rq_total", "cluster.upstream_rq_total", tag),
			cxFail:    st.Counter("cluster."+c.Name+".upstream_cx_connect_fail", "cluster.upstream_cx_connect_fail", tag),
			rqTimeout: st.Counter("cluster."+c.Name+".upstream_rq_timeout", "cluster.upstream_rq_timeout", tag),
		}
		dialer := &net.Dialer{Timeout: c.ConnectTimeout, KeepAlive: 30 * time.Second}
		network := c.Network
		if network == "" {
			network = "tcp"
		}
		cl.transport = &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				conn, err := dialer.DialContext(ctx, network, addr)
				if err != nil {
					cl.cxFail.Add(1)
					return nil, &connectError{err}
				}
				return conn, nil
			},
			// The proxy forwards bytes as they are: no transparent gzip.
			DisableCompression:  true,
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     time.Hour,
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

// pick returns the next endpoint address by the cluster's lb_policy.
func (c *cluster) pick() string {
	eps := c.cfg.Endpoints
	if c.cfg.LBPolicy == "RANDOM" {
		return eps[rand.IntN(len(eps))]
	}
	return eps[(c.next.Add(1)-1)%uint64(len(eps))]
}

// connectError marks a failure to establish the upstream connection
// (Envoy's "connection failure" reset reason).
type connectError struct{ err error }

func (e *connectError) Error() string { return "connection failure: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// hopByHop headers are connection-scoped and never forwarded.
var hopByHop = map[string]bool{
	"connection": true, "keep-alive": true, "proxy-connection": true, "transfer-encoding": true,
	"upgrade": true, "te": true, "trailer": true,
}

// newUpstreamRequest turns Envoy-style headers into an outgoing request.
func (c *cluster) newUpstreamRequest(ctx context.Context, h httpfilter.Headers, body io.Reader, contentLength int64) (*http.Request, error) {
	method, _ := h.Get(":method")
	path, _ := h.Get(":path")
	authority, _ := h.Get(":authority")
	req, err := http.NewRequestWithContext(ctx, method, "http://"+c.pick()+path, body)
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
		if strings.HasPrefix(e.Key, ":") || hopByHop[e.Key] || e.Key == "content-length" || e.Key == "host" {
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

// Call implements httpfilter.HTTPCaller.
func (cs *Clusters) Call(ctx context.Context, name string, headers httpfilter.Headers, body []byte, trailers httpfilter.Headers, timeout time.Duration) (*httpfilter.CallResponse, error) {
	for _, k := range []string{":method", ":path", ":authority"} {
		if v, ok := headers.Get(k); !ok || v == "" {
			return nil, fmt.Errorf("http_call: missing required header %s", k)
		}
	}
	c := cs.byName[name]
	if c == nil {
		return nil, fmt.Errorf("%w: %q", httpfilter.ErrUnknownCluster, name)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	req, err := c.newUpstreamRequest(ctx, headers, bytes.NewReader(body), int64(len(body)))
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
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			c.rqTimeout.Add(1)
		}
		return nil, err
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
