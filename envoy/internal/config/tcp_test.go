package config

import (
	"strings"
	"testing"
)

// tcpDoc is a bootstrap with one listener whose chain is filters.
func tcpDoc(filters string) string {
	return `
static_resources:
  listeners:
  - name: tcp
    address: { socket_address: { address: 127.0.0.1, port_value: 10000 } }
    filter_chains:
    - filters:` + filters + `
  clusters:
  - name: echo
    connect_timeout: 1s
    load_assignment:
      cluster_name: echo
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: 127.0.0.1, port_value: 7 } } } }] }]
`
}

const netWasmFilter = `
      - name: envoy.filters.network.wasm
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.wasm.v3.Wasm
          config:
            name: counter
            root_id: counter_root
            vm_config: { vm_id: tcp, runtime: envoy.wasm.runtime.v8, code: { local: { filename: counter.wasm } } }
            configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: "upper" }`

const tcpProxyFilter = `
      - name: envoy.filters.network.tcp_proxy
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.tcp_proxy.v3.TcpProxy
          stat_prefix: echo_tcp
          cluster: echo`

// TestTCPProxyChain: wasm network filters then tcp_proxy are read into
// the listener, with the HTTP side left empty.
func TestTCPProxyChain(t *testing.T) {
	c, err := Parse([]byte(tcpDoc(netWasmFilter+netWasmFilter+tcpProxyFilter)), "tcp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := c.Listener("tcp")
	if l.TCPProxy == nil || l.TCPProxy.StatPrefix != "echo_tcp" || l.TCPProxy.Cluster != "echo" {
		t.Fatalf("tcp_proxy %+v", l.TCPProxy)
	}
	if len(l.NetworkFilters) != 2 || len(l.HTTPFilters) != 0 || l.VirtualHosts != nil {
		t.Fatalf("filters: network %d, http %d", len(l.NetworkFilters), len(l.HTTPFilters))
	}
	w := l.NetworkFilters[0]
	if w.FilterName != "envoy.filters.network.wasm" || w.PluginName != "counter" || w.RootID != "counter_root" || w.VMID != "tcp" ||
		w.CodePath != "counter.wasm" || string(w.PluginConfiguration) != "upper" || w.ListenerName != "tcp" {
		t.Fatalf("network wasm %+v", w)
	}
}

// TestTCPProxyAloneAndUnknownCluster: tcp_proxy alone is a valid chain,
// and, as in Envoy, its cluster is not checked at load (a connection to a
// missing cluster is closed instead).
func TestTCPProxyAloneAndUnknownCluster(t *testing.T) {
	c, err := Parse([]byte(tcpDoc(strings.Replace(tcpProxyFilter, "cluster: echo", "cluster: nowhere", 1))), "tcp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if l := c.Listener("tcp"); l.TCPProxy == nil || l.TCPProxy.Cluster != "nowhere" || len(l.NetworkFilters) != 0 {
		t.Fatalf("listener %+v", l)
	}
}

// TestTCPChainErrors: the chain rules Envoy enforces, with its messages,
// and what this runtime does not implement, by path.
func TestTCPChainErrors(t *testing.T) {
	hcm := `
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: x
          route_config: { virtual_hosts: [{ name: a, domains: ["*"], routes: [{ match: { prefix: "/" }, direct_response: { status: 200 } }] }] }
          http_filters: [{ name: envoy.filters.http.router, typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router } }]`
	for _, tc := range []struct{ name, filters, want string }{
		{"wasm last", netWasmFilter, "filters[0]: Error: non-terminal filter named envoy.filters.network.wasm of type envoy.filters.network.wasm is the last filter in a network filter chain."},
		{"tcp_proxy not last", tcpProxyFilter + netWasmFilter, "filters[0]: Error: terminal filter named envoy.filters.network.tcp_proxy of type envoy.filters.network.tcp_proxy must be the last filter in a network filter chain."},
		{"idle_timeout", tcpProxyFilter + "\n          idle_timeout: 5s", "filters[0].typed_config.idle_timeout: not supported by the chime proxy"},
		{"wasm before hcm", netWasmFilter + hcm, "filters[1]: network filter \"envoy.filters.network.http_connection_manager\": the chime proxy runs http_connection_manager only as the one filter of its chain"},
		{"http-only setting", strings.Replace(netWasmFilter, "root_id: counter_root", "root_id: counter_root\n            allow_on_headers_stop_iteration: true", 1) + tcpProxyFilter,
			"filters[0].typed_config.config.allow_on_headers_stop_iteration: not supported by the chime proxy"},
		{"no cluster", strings.Replace(tcpProxyFilter, "cluster: echo", "", 1), "filters[0].typed_config: invalid TcpProxy.ClusterSpecifier"},
		{"empty chain", " []", "exactly one filter chain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tcpDoc(tc.filters)), "tcp.yaml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}
