package envoy_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/chimehq/chime/envoy"
)

// Start a runtime from an envoy.yaml that routes every request to an
// upstream, then send one request through it.
func Example() {
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s %s", r.Method, r.URL.Path)
	}))
	defer upstream.Close()
	host, port, _ := strings.Cut(strings.TrimPrefix(upstream.URL, "http://"), ":")

	dir, _ := os.MkdirTemp("", "envoy-example")
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "envoy.yaml")
	os.WriteFile(cfgPath, []byte(`
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
            - { name: all, domains: ["*"], routes: [{ match: { prefix: "/" }, route: { cluster: app } }] }
          http_filters:
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
  - name: app
    load_assignment:
      cluster_name: app
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: `+host+`, port_value: `+port+` } } } }] }]
`), 0o600)

	srv, err := envoy.Start(context.Background(), envoy.Options{ConfigPath: cfgPath, Workers: 2})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer srv.Close()

	resp, err := http.Get("http://" + srv.Addr("main") + "/hello")
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, string(body))
	// Output: 200 upstream saw GET /hello
}
