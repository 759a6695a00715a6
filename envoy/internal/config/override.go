package config

import (
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// Override is what OverrideUpstream did, for the log.
type Override struct {
	Cluster  string
	Type     string // STATIC for an IP, LOGICAL_DNS for a name
	Endpoint string // host:port
	TLS      bool
	Host     string // the :authority routes to the cluster now send
}

// OverrideUpstream points a cluster at a base URL such as
// https://api.openai.com or http://127.0.0.1:9000 (docs/configuration.md `--upstream`,
// CHIME_UPSTREAM). The cluster's endpoints become the URL's host:port
// (STATIC for an IP, LOGICAL_DNS for a name); https enables TLS with
// SNI = host, verified against the system roots, http turns TLS off; routes
// to the cluster rewrite :authority to the URL's host. Everything else in
// the file stays as written.
func (c *Config) OverrideUpstream(cluster, rawURL string) (*Override, error) {
	cl := c.Cluster(cluster)
	if cl == nil {
		return nil, fmt.Errorf("config: %s: upstream override: the config has no cluster %q to point at %s", c.Path, cluster, rawURL)
	}
	u, err := parseUpstreamURL(rawURL)
	if err != nil {
		return nil, err
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	o := &Override{Cluster: cluster, Type: "LOGICAL_DNS", Endpoint: net.JoinHostPort(host, port), TLS: u.Scheme == "https", Host: u.Host}
	hostname := host
	if net.ParseIP(host) != nil {
		o.Type, hostname = "STATIC", ""
	}
	cl.Type = o.Type
	cl.Endpoints = []string{o.Endpoint}
	cl.Hostnames = []string{hostname}
	cl.TLS = nil
	if o.TLS {
		// SNI is the URL's host; Go sends none for an IP but still verifies it.
		cl.TLS = &UpstreamTLS{SNI: host, VerifySNI: true, ALPN: []string{ALPNHTTP11}}
	}
	for _, l := range c.Listeners {
		for _, vh := range l.VirtualHosts {
			for _, r := range vh.Routes {
				if r.Cluster == cluster {
					r.HostRewrite, r.AutoHostRewrite = o.Host, false
				}
			}
		}
	}
	return o, nil
}

// parseUpstreamURL accepts scheme://host[:port] with an optional trailing
// "/". A path is refused: request paths are forwarded unchanged, so a base
// path such as /v1 would silently be dropped.
func parseUpstreamURL(raw string) (*url.URL, error) {
	bad := func(why string) error {
		return fmt.Errorf("config: upstream override %q: %s (want http://host[:port] or https://host[:port])", raw, why)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, bad(err.Error())
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return nil, bad("scheme must be http or https")
	case u.Opaque != "" || u.Hostname() == "":
		return nil, bad("no host")
	case u.User != nil:
		return nil, bad("credentials in the URL are not supported")
	case u.Path != "" && u.Path != "/":
		return nil, bad(fmt.Sprintf("path %q is not supported: request paths are forwarded unchanged", u.Path))
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return nil, bad("query and fragment are not supported")
	case strings.HasSuffix(u.Host, ":"):
		return nil, bad("empty port")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return nil, bad(fmt.Sprintf("port %q out of range", p))
		}
	}
	if h := u.Hostname(); net.ParseIP(h) == nil && !validDNSName(h) {
		return nil, bad(fmt.Sprintf("host %q is neither an IP address nor a DNS name", h))
	}
	return u, nil
}

// validDNSName accepts a host name of letters, digits, hyphens and
// underscores in dot-separated labels of 1–63 bytes (RFC 1123, with the
// underscore some internal names carry), 253 bytes at most.
func validDNSName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}
