package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"sigs.k8s.io/yaml"

	"github.com/chimehq/chime/envoy"
	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/internal/testport"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/mockllm"
)

var (
	wasmOnce sync.Once
	wasmPath string
	wasmErr  error
)

// chimeWasm is $CHIME_WASM (make test builds it) or a fresh build.
func chimeWasm(t *testing.T) string {
	t.Helper()
	wasmOnce.Do(func() {
		if wasmPath = os.Getenv("CHIME_WASM"); wasmPath != "" {
			return
		}
		dir, err := os.MkdirTemp("", "chime-deploy-wasm")
		if err != nil {
			wasmErr = err
			return
		}
		wasmPath = filepath.Join(dir, "chime.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-trimpath", "-o", wasmPath, "./plugin")
		cmd.Dir = repoRoot()
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			wasmErr = fmt.Errorf("building chime.wasm: %v\n%s", err, out)
		}
	})
	require.NoError(t, wasmErr)
	return wasmPath
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return ln
}

func freePort(t *testing.T) int {
	p, err := testport.Pick()
	require.NoError(t, err)
	return p
}

func readYAML(t *testing.T, path string) map[string]any {
	t.Helper()
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &doc), path)
	return doc
}

// at walks doc by keys (strings) and list indexes (ints).
func at(t *testing.T, doc any, path ...any) any {
	t.Helper()
	cur := doc
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := cur.(map[string]any)
			require.True(t, ok, "no object at %v", path)
			cur = m[k]
		case int:
			l, ok := cur.([]any)
			require.True(t, ok && k < len(l), "no list item at %v", path)
			cur = l[k]
		}
	}
	return cur
}

func obj(t *testing.T, doc any, path ...any) map[string]any {
	t.Helper()
	m, ok := at(t, doc, path...).(map[string]any)
	require.True(t, ok, "expected an object at %v", path)
	return m
}

// Paths into the bootstrap, shared by product and compose configs.
var (
	listenerAddr = []any{"static_resources", "listeners", 0, "address", "socket_address"}
	adminAddr    = []any{"admin", "address", "socket_address"}
	wasmConfig   = []any{"static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config", "http_filters", 0, "typed_config", "config"}
)

func clusterByName(t *testing.T, doc map[string]any, name string) map[string]any {
	t.Helper()
	for _, c := range at(t, doc, "static_resources", "clusters").([]any) {
		if c.(map[string]any)["name"] == name {
			return c.(map[string]any)
		}
	}
	t.Fatalf("no cluster %q", name)
	return nil
}

func clusterAddr(t *testing.T, doc map[string]any, name string) map[string]any {
	return obj(t, clusterByName(t, doc, name), "load_assignment", "endpoints", 0, "lb_endpoints", 0, "endpoint", "address", "socket_address")
}

// TestComposeEnvoyMatchesProduct: the compose Envoy config is the product
// envoy.yaml with container addresses, nothing else; the real-provider
// variant differs from it only in cluster "llm" and the route's host.
func TestComposeEnvoyMatchesProduct(t *testing.T) {
	product := readYAML(t, filepath.Join(repoRoot(), "envoy.yaml"))
	compose := readYAML(t, filepath.Join(composeDir(), "envoy.yaml"))

	assert.Equal(t, "0.0.0.0", obj(t, compose, listenerAddr...)["address"])
	assert.EqualValues(t, 10000, obj(t, compose, listenerAddr...)["port_value"])
	assert.Equal(t, "0.0.0.0", obj(t, compose, adminAddr...)["address"])
	assert.EqualValues(t, 9901, obj(t, compose, adminAddr...)["port_value"])
	assert.Equal(t, "/usr/share/chime/chime.wasm", at(t, compose, append(wasmConfig, "vm_config", "code", "local", "filename")...),
		"the chime-wasm volume's path (docker-compose.yaml, Dockerfile)")
	for name, want := range map[string]string{"chime_host": "chime-host:8787", "llm": "mockllm:8788"} {
		sa := clusterAddr(t, compose, name)
		assert.Equal(t, want, fmt.Sprintf("%v:%v", sa["address"], sa["port_value"]), "cluster %s reaches the compose service", name)
		assert.Equal(t, "STRICT_DNS", clusterByName(t, compose, name)["type"], name)
	}

	// Undo the container edits: what is left must be the product file.
	norm := func(doc map[string]any) {
		obj(t, doc, listenerAddr...)["address"] = "X"
		obj(t, doc, adminAddr...)["address"] = "X"
		obj(t, doc, append(wasmConfig, "vm_config", "code", "local")...)["filename"] = "X"
		for _, name := range []string{"chime_host", "llm"} {
			c := clusterByName(t, doc, name)
			c["type"] = "X"
			delete(c, "dns_lookup_family")
			clusterAddr(t, doc, name)["address"] = "X"
			clusterAddr(t, doc, name)["port_value"] = 0
		}
	}
	norm(product)
	norm(compose)
	assert.Equal(t, product, compose, "deploy/compose/envoy.yaml drifted from envoy.yaml beyond its addresses")

	compose = readYAML(t, filepath.Join(composeDir(), "envoy.yaml"))
	openai := readYAML(t, filepath.Join(composeDir(), "envoy-openai.yaml"))
	sa := clusterAddr(t, openai, "llm")
	assert.Equal(t, "api.openai.com:443", fmt.Sprintf("%v:%v", sa["address"], sa["port_value"]))
	assert.Equal(t, "api.openai.com", at(t, clusterByName(t, openai, "llm"), "transport_socket", "typed_config", "sni"))
	// Every route goes to cluster llm, so every one rewrites the host.
	routes := []any{"static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config", "route_config", "virtual_hosts", 0, "routes"}
	for i := range at(t, openai, routes...).([]any) {
		route := append(slices.Clone(routes), i, "route")
		assert.Equal(t, "api.openai.com", obj(t, openai, route...)["host_rewrite_literal"], "route %d", i)
		delete(obj(t, openai, route...), "host_rewrite_literal")
	}
	for i, c := range at(t, openai, "static_resources", "clusters").([]any) {
		if c.(map[string]any)["name"] == "llm" {
			at(t, openai, "static_resources", "clusters").([]any)[i] = clusterByName(t, compose, "llm")
		}
	}
	assert.Equal(t, compose, openai, "envoy-openai.yaml differs from envoy.yaml beyond cluster llm")
}

// localConfig rewrites a compose Envoy config for loopback: the container
// addresses become free ports, the wasm path the built filter, and the
// token the given one, as the envoy service's command substitutes it.
func localConfig(t *testing.T, file string, ports map[string]int, token string) (path string, listenURL string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(composeDir(), file))
	require.NoError(t, err)
	require.Equal(t, 1, strings.Count(string(raw), tokenLiteral))
	raw = []byte(strings.Replace(string(raw), tokenLiteral, `"token":"`+token+`"`, 1))
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &doc))

	listenPort := freePort(t)
	obj(t, doc, listenerAddr...)["address"] = "127.0.0.1"
	obj(t, doc, listenerAddr...)["port_value"] = listenPort
	obj(t, doc, adminAddr...)["address"] = "127.0.0.1"
	obj(t, doc, adminAddr...)["port_value"] = freePort(t)
	obj(t, doc, append(wasmConfig, "vm_config", "code", "local")...)["filename"] = chimeWasm(t)
	for name, port := range ports {
		sa := clusterAddr(t, doc, name)
		sa["address"] = "127.0.0.1"
		sa["port_value"] = port
	}
	out, err := yaml.Marshal(doc)
	require.NoError(t, err)
	path = filepath.Join(t.TempDir(), "envoy.yaml")
	require.NoError(t, os.WriteFile(path, out, 0o600))
	return path, fmt.Sprintf("http://127.0.0.1:%d", listenPort)
}

func startProxy(t *testing.T, path string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Envoy 1.39's WASI set (the compose image).
	srv, err := envoy.Start(ctx, envoy.Options{ConfigPath: path, WASIProfile: envoy.ProfileEnvoyLatest, Workers: 1,
		CacheDir: filepath.Join(os.TempDir(), "chime-deploy-cache"), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err, "the local runtime refused %s", path)
	t.Cleanup(func() { _ = srv.Close() })
}

// TestComposeEnvoyConfigRuns runs deploy/compose/envoy.yaml (addresses
// moved to loopback) in the local runtime with a real host and the mock
// provider, and sends the README's demo request through it.
func TestComposeEnvoyConfigRuns(t *testing.T) {
	const token = "compose-test-token"
	ctx, cancel := context.WithCancel(context.Background())
	hostLn, mockLn := listen(t), listen(t)

	cfg := host.DefaultConfig()
	cfg.DataDir, cfg.Token, cfg.NTP.Enabled = t.TempDir(), token, false
	svc, err := host.New(cfg, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	hostDone, mockDone := make(chan struct{}), make(chan struct{})
	go func() { defer close(hostDone); _ = svc.Serve(ctx, hostLn) }()
	mock := mockllm.New()
	go func() { defer close(mockDone); _ = mock.Serve(ctx, mockLn) }()
	t.Cleanup(func() { cancel(); <-hostDone; <-mockDone })

	path, proxyURL := localConfig(t, "envoy.yaml", map[string]int{
		"chime_host": hostLn.Addr().(*net.TCPAddr).Port,
		"llm":        mockLn.Addr().(*net.TCPAddr).Port,
	}, token)
	startProxy(t, path)

	// The README's docker compose demo request, as written there.
	demo := parseDemoCurl(t, readmeSection(t, "## docker compose"))
	req, err := http.NewRequest("POST", proxyURL+demo.path, strings.NewReader(demo.body))
	require.NoError(t, err)
	for k, v := range demo.headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	text := gjson.GetBytes(body, "choices.0.message.content").String()
	assert.Equal(t, 4, strings.Count(text, "ok"), "continued three times by stopMessage: %q", text)

	got := mock.Requests()
	require.Len(t, got, 4, "the first request and three continuations")
	first := got[0].Body
	assert.NotContains(t, first, "<**", "the directive is stripped")
	assert.Contains(t, gjson.Get(first, "messages.0.content").String(), "hi")
	var last string
	for _, m := range gjson.Get(first, "messages").Array() {
		last = m.Get("content").String()
	}
	assert.True(t, strings.HasPrefix(last, llm.TimeTagPrefix), "a time tag ends the request: %q", last)
	assert.Contains(t, last, "tz=`"+demo.headers["x-chime-timezone"]+"`")
	assert.Contains(t, gjson.Get(got[1].Body, "messages").Raw, "keep going", "the continuation carries the stopMessage text")
	for _, r := range got {
		assert.Empty(t, r.Rejection, "the mock refused %s", r.Body)
	}

	// The host answered for the session: the filter reached it with the token.
	hreq, _ := http.NewRequest("GET", "http://"+hostLn.Addr().String()+"/api/sessions", nil)
	hreq.Header.Set("authorization", "Bearer "+token)
	hresp, err := http.DefaultClient.Do(hreq)
	require.NoError(t, err)
	sessions, _ := io.ReadAll(hresp.Body)
	hresp.Body.Close()
	assert.Equal(t, http.StatusOK, hresp.StatusCode)
	assert.Contains(t, string(sessions), `"`+demo.headers["x-chime-session"]+`"`)
	var anyJSON any
	assert.NoError(t, json.Unmarshal(sessions, &anyJSON))
}

// TestComposeOpenAIConfigLoads: the real-provider variant passes the same
// loader and starts (no request is sent: no network here).
func TestComposeOpenAIConfigLoads(t *testing.T) {
	path, _ := localConfig(t, "envoy-openai.yaml", map[string]int{"chime_host": freePort(t)}, "t")
	startProxy(t, path)
}
