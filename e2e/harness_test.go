package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/chimehq/chime/envoy"
	"github.com/chimehq/chime/internal/testport"
)

// The e2e suite runs the product's own envoy.yaml with only its addresses and
// the wasm path rewritten, so a test here speaks for the file users deploy.
// Backends: the local runtime always; real Envoy as well when ENVOY_BIN is set.

var (
	wasmOnce sync.Once
	wasmPath string
	wasmErr  error
)

// chimeWasm returns the path of chime.wasm: $CHIME_WASM (make test builds
// it) or a fresh build into a temp dir.
func chimeWasm(t testing.TB) string {
	t.Helper()
	wasmOnce.Do(func() {
		if p := os.Getenv("CHIME_WASM"); p != "" {
			wasmPath = p
			return
		}
		dir, err := os.MkdirTemp("", "chime-e2e-wasm")
		if err != nil {
			wasmErr = err
			return
		}
		wasmPath = filepath.Join(dir, "chime.wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", wasmPath, "./plugin")
		cmd.Dir = repoRoot()
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
		if out, err := cmd.CombinedOutput(); err != nil {
			wasmErr = fmt.Errorf("building chime.wasm: %v\n%s", err, out)
		}
	})
	if wasmErr != nil {
		t.Fatal(wasmErr)
	}
	return wasmPath
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// freePort picks a loopback port for a config file. Real Envoy needs fixed
// ports in its config, so both backends get them the same way; testport
// keeps them distinct and out of the kernel's ephemeral range.
func freePort(t testing.TB) int {
	t.Helper()
	p, err := testport.Pick()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// stackConfig describes how the product envoy.yaml is rewritten for a test.
type stackConfig struct {
	upstreamPort int    // cluster "llm"
	hostPort     int    // cluster "chime_host"
	bufferLimit  uint32 // listener per_connection_buffer_limit_bytes; 0 keeps the file's value
	withoutWasm  bool   // drop the wasm filter (the "no filter" baseline)
	pluginConfig string // replaces the wasm plugin configuration JSON when set
	wasmFile     string // another filter module than chimeWasm (a before/after benchmark)
}

type stack struct {
	listenURL string // http://127.0.0.1:port of listener "chime"
	adminURL  string
	stop      func()
}

// rewriteConfig loads the root envoy.yaml and rewrites addresses, the wasm
// path and the options in sc. It fails the test if the file's shape changed
// in a way the suite does not understand, rather than testing something else.
func rewriteConfig(t testing.TB, sc stackConfig, listenPort, adminPort int) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "envoy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("envoy.yaml: %v", err)
	}
	static := mapAt(t, doc, "static_resources")
	listeners := static["listeners"].([]any)
	if len(listeners) == 0 {
		t.Fatal("envoy.yaml has no listeners")
	}
	l := listeners[0].(map[string]any)
	mapAt(t, mapAt(t, l, "address"), "socket_address")["port_value"] = listenPort
	if sc.bufferLimit > 0 {
		l["per_connection_buffer_limit_bytes"] = sc.bufferLimit
	}
	foundWasm := false
	for _, fc := range l["filter_chains"].([]any) {
		for _, nf := range fc.(map[string]any)["filters"].([]any) {
			hcm := mapAt(t, nf.(map[string]any), "typed_config")
			var kept []any
			for _, hf := range hcm["http_filters"].([]any) {
				tc := mapAt(t, hf.(map[string]any), "typed_config")
				if !strings.HasSuffix(fmt.Sprint(tc["@type"]), "wasm.v3.Wasm") {
					kept = append(kept, hf)
					continue
				}
				foundWasm = true
				if sc.withoutWasm {
					continue
				}
				cfg := mapAt(t, tc, "config")
				local := mapAt(t, mapAt(t, mapAt(t, cfg, "vm_config"), "code"), "local")
				local["filename"] = chimeWasm(t)
				if sc.wasmFile != "" {
					local["filename"] = sc.wasmFile
				}
				if sc.pluginConfig != "" {
					mapAt(t, cfg, "configuration")["value"] = sc.pluginConfig
				}
				kept = append(kept, hf)
			}
			hcm["http_filters"] = kept
		}
	}
	if !foundWasm {
		t.Fatal("envoy.yaml has no wasm filter")
	}
	ports := map[string]int{"llm": sc.upstreamPort, "chime_host": sc.hostPort}
	for _, c := range static["clusters"].([]any) {
		cm := c.(map[string]any)
		port, ok := ports[fmt.Sprint(cm["name"])]
		if !ok {
			continue
		}
		for _, ep := range mapAt(t, cm, "load_assignment")["endpoints"].([]any) {
			for _, lb := range ep.(map[string]any)["lb_endpoints"].([]any) {
				sa := mapAt(t, mapAt(t, mapAt(t, lb.(map[string]any), "endpoint"), "address"), "socket_address")
				sa["address"] = "127.0.0.1"
				sa["port_value"] = port
			}
		}
	}
	if admin, ok := doc["admin"].(map[string]any); ok {
		mapAt(t, mapAt(t, admin, "address"), "socket_address")["port_value"] = adminPort
	}
	out, err := yaml.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mapAt(t testing.TB, m map[string]any, key string) map[string]any {
	t.Helper()
	v, ok := m[key].(map[string]any)
	if !ok {
		t.Fatalf("envoy.yaml: expected an object at %q", key)
	}
	return v
}

// backend starts a proxy for a config file and returns a stop func.
type backend struct {
	name  string
	start func(t testing.TB, configPath string) (stop func())
}

func backends() []backend {
	return []backend{
		{name: "local", start: startLocal},
		{name: "envoy", start: func(t testing.TB, p string) func() {
			bin := os.Getenv("ENVOY_BIN")
			if bin == "" {
				t.Skip("real Envoy not run: ENVOY_BIN is not set (no Envoy binary on this machine); set ENVOY_BIN=/path/to/envoy to run this suite against it")
			}
			return startEnvoy(t, bin, p)
		}},
	}
}

// forEachBackend runs fn against each backend as a subtest.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) { fn(t, b) })
	}
}

func startLocal(t testing.TB, configPath string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := envoy.Start(ctx, envoy.Options{
		ConfigPath:  configPath,
		WASIProfile: e2eProfile(),
		CacheDir:    filepath.Join(os.TempDir(), "chime-e2e-cache"),
		Workers:     2,
		Logger:      slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		cancel()
		t.Fatalf("local runtime: %v", err)
	}
	return func() { srv.Close(); cancel() }
}

func startEnvoy(t testing.TB, bin, configPath string) func() {
	t.Helper()
	var logs bytes.Buffer
	cmd := exec.Command(bin, "-c", configPath, "--concurrency", "2", "--log-level", "warn",
		"--base-id", fmt.Sprint(os.Getpid()%1000+int(time.Now().UnixNano()%1000)))
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatalf("envoy: %v", err)
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("envoy output:\n%s", logs.String())
		}
	}
}

// startStack writes the rewritten config, starts the backend and waits until
// the admin endpoint reports ready.
func startStack(t testing.TB, b backend, sc stackConfig) *stack {
	t.Helper()
	listenPort, adminPort := freePort(t), freePort(t)
	cfg := rewriteConfig(t, sc, listenPort, adminPort)
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	stop := b.start(t, path)
	st := &stack{
		listenURL: fmt.Sprintf("http://127.0.0.1:%d", listenPort),
		adminURL:  fmt.Sprintf("http://127.0.0.1:%d", adminPort),
		stop:      stop,
	}
	t.Cleanup(stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(st.adminURL + "/ready")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return st
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s backend not ready: %v", b.name, err)
		}
		time.Sleep(50 * time.Millisecond) // poll: a separate process starting up
	}
}
