// Package config loads an Envoy bootstrap (envoy.yaml) with Envoy's own API
// types and translates the subset the chime proxy runs into a small model
// (docs/local-runtime.md "Config subset"). A file Envoy rejects is rejected here too;
// a valid file that uses something this runtime does not implement gets an
// error naming that field rather than being half-run.
package config

import (
	"crypto/x509"
	"net"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
)

// Envoy defaults the model fills in when the file leaves them out.
const (
	DefaultBufferLimit       = 1 << 20          // per_connection_buffer_limit_bytes
	DefaultRouteTimeout      = 15 * time.Second // RouteAction.timeout
	DefaultConnectTimeout    = 5 * time.Second  // Cluster.connect_timeout
	DefaultStreamIdleTimeout = 5 * time.Minute  // HCM stream_idle_timeout
)

// Config is the translated bootstrap.
type Config struct {
	Path        string // file it was loaded from ("" for Parse without a name)
	NodeID      string
	NodeCluster string
	Admin       *Admin // nil when the bootstrap has no admin
	Listeners   []*Listener
	Clusters    []*Cluster
	// StatsTags are stats_config.stats_tags, in order.
	StatsTags []StatsTag
	// Services are the bootstrap_extensions WasmService entries, in order.
	Services []WasmService
	// Bootstrap is the parsed file as Envoy's type, for the admin's
	// /config_dump.
	Bootstrap *bootstrapv3.Bootstrap
}

// Cluster returns the named cluster or nil.
func (c *Config) Cluster(name string) *Cluster {
	for _, cl := range c.Clusters {
		if cl.Name == name {
			return cl
		}
	}
	return nil
}

// Listener returns the named listener or nil.
func (c *Config) Listener(name string) *Listener {
	for _, l := range c.Listeners {
		if l.Name == name {
			return l
		}
	}
	return nil
}

// WasmService is a bootstrap_extensions entry of type
// envoy.extensions.wasm.v3.WasmService: a wasm VM that serves no stream,
// only its root context (ticks, shared data and queues, http calls).
type WasmService struct {
	Name      string // the extension's name
	Singleton bool   // one VM on the main thread, else one per worker
	Wasm      httpfilter.WasmConfig
}

// StatsTag is a stats_config.stats_tags entry: Regex (at least one capture
// group) or FixedValue.
type StatsTag struct {
	Name       string
	Regex      *regexp.Regexp
	FixedValue string
}

// Admin is the admin listener.
type Admin struct {
	Address string // host:port
}

// Listener is one static listener running an http_connection_manager.
type Listener struct {
	Name        string
	Host        string
	Port        int
	BufferLimit int // per_connection_buffer_limit_bytes (Envoy default 1 MiB)

	StatPrefix        string
	StreamIdleTimeout time.Duration // 0 = disabled
	GenerateRequestID bool          // HCM generate_request_id (default true)
	ServerName        string        // HCM server_name (default "envoy")
	RouteConfigName   string
	VirtualHosts      []*VirtualHost
	// HTTPFilters are the wasm filters in config order; the router is
	// implicit and always last (Envoy requires it there).
	HTTPFilters []httpfilter.WasmConfig
	// TCPProxy is set when the chain ends in tcp_proxy instead of an
	// http_connection_manager (the HTTP fields above are then unset), and
	// NetworkFilters are the wasm network filters before it, in order.
	TCPProxy       *TCPProxy
	NetworkFilters []httpfilter.WasmConfig
}

// Address is host:port for net.Listen.
func (l *Listener) Address() string { return net.JoinHostPort(l.Host, strconv.Itoa(l.Port)) }

// VirtualHost is a route_config virtual host.
type VirtualHost struct {
	Name    string
	Domains []string
	Routes  []*Route
}

// Route is one route: a match and either a cluster or a direct response.
type Route struct {
	Name  string
	Match RouteMatch
	// Cluster is the upstream; empty for a direct response.
	Cluster string
	Timeout time.Duration // 0 = no timeout
	Direct  *DirectResponse
	// HostRewrite is host_rewrite_literal: the upstream :authority.
	HostRewrite string
	// Metadata is the route's metadata, serialized envoy.config.core.v3.Metadata
	// (the xds.route_metadata property); nil when the route has none.
	Metadata []byte
	// AutoHostRewrite is auto_host_rewrite: the upstream :authority becomes
	// the picked endpoint's hostname when it has one (Cluster.Hostnames).
	AutoHostRewrite bool
}

// DirectResponse is RouteAction direct_response.
type DirectResponse struct {
	Status int
	Body   []byte
}

// PathKind says how RouteMatch compares the path.
type PathKind int

const (
	PathPrefix PathKind = iota // match.prefix
	PathExact                  // match.path (query string ignored)
	PathRegex                  // match.safe_regex (full match, query ignored)
)

// RouteMatch is a route's match block.
type RouteMatch struct {
	Kind          PathKind
	Value         string
	CaseSensitive bool // default true
	Headers       []HeaderMatcher
	regex         *regexp.Regexp
}

// MatchKind says how a HeaderMatcher compares a value.
type MatchKind int

const (
	MatchExact MatchKind = iota
	MatchPrefix
	MatchSuffix
	MatchContains
	MatchRegex
	MatchPresent
)

// HeaderMatcher is a route match header condition.
type HeaderMatcher struct {
	Name                string // lower-case
	Kind                MatchKind
	Value               string
	Present             bool // for MatchPresent: the header must (true) or must not exist
	IgnoreCase          bool
	Invert              bool
	TreatMissingAsEmpty bool
	regex               *regexp.Regexp
}

// Matches reports whether a request with this :path and these headers
// matches, with Envoy's rules: prefix compares the whole :path, exact and
// regex ignore the query string; every header matcher must hold.
func (m *RouteMatch) Matches(path string, h httpfilter.Headers) bool {
	switch m.Kind {
	case PathPrefix:
		if m.CaseSensitive {
			if !strings.HasPrefix(path, m.Value) {
				return false
			}
		} else if len(path) < len(m.Value) || !strings.EqualFold(path[:len(m.Value)], m.Value) {
			return false
		}
	case PathExact:
		p := stripQuery(path)
		if m.CaseSensitive && p != m.Value || !m.CaseSensitive && !strings.EqualFold(p, m.Value) {
			return false
		}
	case PathRegex:
		if !m.regex.MatchString(stripQuery(path)) {
			return false
		}
	}
	for i := range m.Headers {
		if !m.Headers[i].Matches(h) {
			return false
		}
	}
	return true
}

func stripQuery(p string) string {
	if i := strings.IndexAny(p, "?#"); i >= 0 {
		return p[:i]
	}
	return p
}

// Matches applies one header condition. Multiple values of a header are
// joined with "," first, as Envoy does.
func (hm *HeaderMatcher) Matches(h httpfilter.Headers) bool {
	var vals []string
	for _, e := range h {
		if e.Key == hm.Name {
			vals = append(vals, e.Value)
		}
	}
	exists := len(vals) > 0
	if hm.Kind == MatchPresent {
		return (exists == hm.Present) != hm.Invert
	}
	if !exists {
		if !hm.TreatMissingAsEmpty {
			return false // a missing header never matches, even inverted
		}
		vals = []string{""}
	}
	v := strings.Join(vals, ",")
	want := hm.Value
	if hm.IgnoreCase {
		v, want = strings.ToLower(v), strings.ToLower(want)
	}
	var ok bool
	switch hm.Kind {
	case MatchExact:
		ok = v == want
	case MatchPrefix:
		ok = strings.HasPrefix(v, want)
	case MatchSuffix:
		ok = strings.HasSuffix(v, want)
	case MatchContains:
		ok = strings.Contains(v, want)
	case MatchRegex:
		ok = hm.regex.MatchString(v)
	}
	return ok != hm.Invert
}

// Cluster is a static or DNS cluster.
type Cluster struct {
	Name           string
	Type           string // "STATIC", "STRICT_DNS", "LOGICAL_DNS"
	LBPolicy       string // "ROUND_ROBIN" or "RANDOM"
	ConnectTimeout time.Duration
	BufferLimit    int
	Network        string   // "tcp", or "tcp4"/"tcp6" per dns_lookup_family
	Endpoints      []string // host:port, resolved at connect time for DNS types
	// Hostnames holds, per endpoint, the name auto_host_rewrite and
	// auto_host_sni use, by Envoy's rule: endpoint.hostname when set, else
	// the DNS name for STRICT_DNS/LOGICAL_DNS, else "" (none).
	Hostnames []string
	// TLS is the envoy.transport_sockets.tls transport socket; nil means
	// plaintext (no transport_socket, or raw_buffer).
	TLS *UpstreamTLS
	// MaxRequests is circuit_breakers.thresholds max_requests of the
	// default priority: how many requests the cluster has open at once
	// (Envoy's default 1024). The runtime enforces it on http_call.
	MaxRequests int
}

// DefaultMaxRequests is Envoy's circuit-breaker default for max_requests
// (and max_connections, max_pending_requests).
const DefaultMaxRequests = 1024

// UpstreamTLS is a cluster's UpstreamTlsContext (docs/configuration.md, docs/local-runtime.md: a public
// provider behind cluster llm).
type UpstreamTLS struct {
	// SNI is the server_name sent ("" sends none, as in Envoy).
	SNI string
	// AutoHostSNI sends the endpoint's hostname as SNI instead (auto_host_sni).
	AutoHostSNI bool
	// RootCAs verifies the server's chain (validation_context.trusted_ca);
	// nil means the system roots.
	RootCAs *x509.CertPool
	// VerifySNI also checks that the certificate is valid for the SNI sent.
	// It is off with trusted_ca (Envoy checks the chain only) and on with
	// the system roots, which Envoy would not verify at all.
	VerifySNI bool
	// ALPN is offered to the server; only "http/1.1" is ever offered, the
	// one protocol the upstream transport speaks.
	ALPN []string
	// MinVersion and MaxVersion are tls.VersionTLS1x values (0 = Go's default).
	MinVersion, MaxVersion uint16
}

// SelectVirtualHost picks the virtual host for an :authority with Envoy's
// precedence: exact domain, then the longest suffix wildcard ("*.x.com"),
// then the longest prefix wildcard ("x.*"), then "*".
func (l *Listener) SelectVirtualHost(authority string) *VirtualHost {
	host := strings.ToLower(authority)
	var best *VirtualHost
	bestRank, bestLen := 0, -1
	for _, vh := range l.VirtualHosts {
		for _, d := range vh.Domains {
			d = strings.ToLower(d)
			rank, n := 0, len(d)
			switch {
			case d == host:
				return vh
			case d == "*":
				rank = 1
			case strings.HasSuffix(d, "*") && strings.HasPrefix(host, d[:len(d)-1]) && len(host) > len(d)-1:
				rank = 2
			case strings.HasPrefix(d, "*") && strings.HasSuffix(host, d[1:]) && len(host) > len(d)-1:
				rank = 3
			}
			if rank > bestRank || rank == bestRank && rank > 0 && n > bestLen {
				best, bestRank, bestLen = vh, rank, n
			}
		}
	}
	return best
}

// MatchRoute returns the first route of the selected virtual host that
// matches, or nil (Envoy answers 404).
func (l *Listener) MatchRoute(h httpfilter.Headers) *Route {
	authority, _ := h.Get(":authority")
	vh := l.SelectVirtualHost(authority)
	if vh == nil {
		return nil
	}
	path, _ := h.Get(":path")
	for _, r := range vh.Routes {
		if r.Match.Matches(path, h) {
			return r
		}
	}
	return nil
}
