package envoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

func writeConfig(t *testing.T, upstream, code string, admin bool) string {
	t.Helper()
	host, port, _ := strings.Cut(strings.TrimPrefix(upstream, "http://"), ":")
	adminYAML := ""
	if admin {
		adminYAML = "admin: { address: { socket_address: { address: 127.0.0.1, port_value: 0 } } }\nnode: { id: node-1, cluster: c-1 }\n"
	}
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	y := adminYAML + `
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
          - name: envoy.filters.http.wasm
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm
              config:
                root_id: r
                vm_config: { runtime: envoy.wasm.runtime.v8, code: { local: { filename: "` + code + `" } } }
                configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: "cfg" }
          - name: envoy.filters.http.router
            typed_config: { "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router }
  clusters:
  - name: app
    load_assignment:
      cluster_name: app
      endpoints: [{ lb_endpoints: [{ endpoint: { address: { socket_address: { address: ` + host + `, port_value: ` + port + ` } } } }] }]
`
	if err := os.WriteFile(path, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// stubFactory stands in for wasmhost: a filter that tags requests.
type stubFactory struct {
	mu      sync.Mutex
	cfg     httpfilter.WasmConfig
	env     httpfilter.Env
	closed  bool
	started bool
}

func (f *stubFactory) Start() { f.mu.Lock(); f.started = true; f.mu.Unlock() }

type stubFilter struct{ httpfilter.Callbacks }

func (stubFilter) DecodeHeaders(h *httpfilter.Headers, _ bool) httpfilter.HeadersStatus {
	h.Set("x-stub", "1")
	return httpfilter.HeadersContinue
}
func (stubFilter) DecodeData(*httpfilter.Buffer, bool) httpfilter.DataStatus {
	return httpfilter.DataContinue
}
func (stubFilter) DecodeTrailers(*httpfilter.Headers) httpfilter.TrailersStatus {
	return httpfilter.TrailersContinue
}
func (stubFilter) EncodeHeaders(*httpfilter.Headers, bool) httpfilter.HeadersStatus {
	return httpfilter.HeadersContinue
}
func (stubFilter) EncodeData(*httpfilter.Buffer, bool) httpfilter.DataStatus {
	return httpfilter.DataContinue
}
func (stubFilter) EncodeTrailers(*httpfilter.Headers) httpfilter.TrailersStatus {
	return httpfilter.TrailersContinue
}
func (stubFilter) OnStreamComplete() {}

func (f *stubFactory) NewFilter(cb httpfilter.Callbacks) (httpfilter.Filter, error) {
	return stubFilter{cb}, nil
}
func (f *stubFactory) Close() error { f.mu.Lock(); f.closed = true; f.mu.Unlock(); return nil }

func useStub(t *testing.T, fail error) *stubFactory {
	stub := &stubFactory{}
	old := newWasmFactory
	newWasmFactory = func(cfg httpfilter.WasmConfig, env httpfilter.Env) (httpfilter.Factory, error) {
		if fail != nil {
			return nil, fail
		}
		stub.cfg, stub.env = cfg, env
		return stub, nil
	}
	t.Cleanup(func() { newWasmFactory = old })
	return stub
}

func TestStartBuildsWasmFiltersAndServes(t *testing.T) {
	stub := useStub(t, nil)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "x-stub=", r.Header.Get("X-Stub"))
	}))
	defer up.Close()
	code := filepath.Join(t.TempDir(), "plugin.wasm")
	os.WriteFile(code, []byte("\x00asm"), 0o600)
	srv, err := Start(context.Background(), Options{ConfigPath: writeConfig(t, up.URL, code, true), Workers: 3, WASIProfile: ProfileEnvoyLatest, CacheDir: "/tmp/cache"})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + srv.Addr("main") + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "x-stub=1" {
		t.Fatalf("the wasm filter slot did not run: %q", b)
	}
	if stub.cfg.RootID != "r" || string(stub.cfg.PluginConfiguration) != "cfg" || stub.cfg.CodePath != code {
		t.Errorf("factory got %+v", stub.cfg)
	}
	e := stub.env
	if e.Workers != 3 || e.WASIProfile != ProfileEnvoy139 /* the alias resolved */ || e.CacheDir != "/tmp/cache" || e.NodeID != "node-1" || e.NodeCluster != "c-1" || e.Clusters == nil || e.Stats == nil || !e.HoldUntilStarted {
		t.Errorf("env %+v", e)
	}
	if !stub.started {
		t.Error("the factory was never started after the listeners were bound")
	}
	resp, err = http.Get("http://" + srv.AdminAddr() + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "LIVE\n" {
		t.Fatalf("/ready %q", b)
	}
	resp, err = http.Get("http://" + srv.AdminAddr() + "/listeners")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(b) != "main::"+srv.Addr("main")+"\n" {
		t.Fatalf("/listeners %q", b)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
	if !stub.closed {
		t.Error("Close did not close the filter factory")
	}
}

func TestStartErrors(t *testing.T) {
	up := httptest.NewServer(http.NotFoundHandler())
	defer up.Close()
	code := filepath.Join(t.TempDir(), "plugin.wasm")
	os.WriteFile(code, []byte("\x00asm"), 0o600)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("static_resources: { listenerz: [] }"), 0o600)

	cases := []struct {
		name string
		opt  Options
		fail error
		want []string
	}{
		{"missing wasm file", Options{ConfigPath: writeConfig(t, up.URL, "no-such-plugin.wasm", false)}, nil,
			[]string{"no-such-plugin.wasm", "working directory"}},
		{"config error", Options{ConfigPath: bad}, nil, []string{bad, `unknown field "listenerz"`}},
		{"missing config", Options{ConfigPath: "/nonexistent/envoy.yaml"}, nil, []string{"/nonexistent/envoy.yaml"}},
		{"bad profile", Options{ConfigPath: bad, WASIProfile: "envoy-2.0"}, nil, []string{"envoy-2.0"}},
		{"factory error", Options{ConfigPath: writeConfig(t, up.URL, code, false)}, errors.New("module lacks proxy_abi_version"),
			[]string{"root_id \"r\"", "proxy_abi_version"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			useStub(t, c.fail)
			srv, err := Start(context.Background(), c.opt)
			if err == nil {
				srv.Close()
				t.Fatal("Start succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}
