package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The issue-4 suite drives the real `chime` binary: `chime up`, or the
// host, proxy and mock as separate processes where a test must kill one.

const hostToken = "e2e-host-token"

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// chimeBin builds bin/chime once per test binary.
func chimeBin(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "chime-e2e-bin")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "chime")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/chime")
		cmd.Dir = repoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("building chime: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// proc is a running chime subprocess.
type proc struct {
	cmd  *exec.Cmd
	logs *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startChime runs `chime args...` with env and waits until every URL in
// ready answers 200.
func startChime(t testing.TB, env []string, ready []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(chimeBin(t), args...), logs: &syncBuffer{}}
	p.cmd.Dir = repoRoot()
	p.cmd.Env = append(append(os.Environ(), "CHIME_NTP=off", "CHIME_HOST_TOKEN="+hostToken), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.kill(syscall.SIGTERM)
		if t.Failed() {
			t.Logf("chime %s output:\n%s", strings.Join(args, " "), p.logs.String())
		}
	})
	for _, u := range ready {
		waitOK(t, u, p)
	}
	return p
}

func (p *proc) kill(sig syscall.Signal) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func waitOK(t testing.TB, url string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not ready: %v\n%s", url, err, p.logs.String())
		}
		time.Sleep(50 * time.Millisecond) // poll: a separate process starting up
	}
}

// demo is one chime stack on free ports.
type demo struct {
	proxyURL, hostURL, mockURL string
	proxyProc                  *proc
	adminURL                   string
	config                     string // rewritten envoy.yaml
	dataDir                    string
	hostPort, mockPort         int
	// hostConfig, when set, is a host config file (CHIME_CONFIG).
	hostConfig string

	// The rejection guard (see guardRejections).
	mu              sync.Mutex
	guarded         bool
	expectRejected  int           // rejections the test declared
	clearedRejected []mockRequest // rejections recorded before a clear
}

func newDemo(t testing.TB) *demo { return newDemoWith(t, "") }

// newDemoWith is newDemo with extra plugin configuration fields (JSON
// members, e.g. `"allowOnHeadersStopIteration":true`).
func newDemoWith(t testing.TB, pluginFields string) *demo {
	t.Helper()
	return newDemoWasm(t, pluginFields, "")
}

// newDemoWasm is newDemoWith running wasmFile instead of chime.wasm ("" =
// chime.wasm).
func newDemoWasm(t testing.TB, pluginFields, wasmFile string) *demo {
	t.Helper()
	d := &demo{hostPort: freePort(t), mockPort: freePort(t), dataDir: t.TempDir()}
	listen, admin := freePort(t), freePort(t)
	if pluginFields != "" {
		pluginFields = "," + pluginFields
	}
	cfg := rewriteConfig(t, stackConfig{upstreamPort: d.mockPort, hostPort: d.hostPort, wasmFile: wasmFile,
		pluginConfig: `{"hostCluster":"chime_host","token":"` + hostToken + `"` + pluginFields + `}`}, listen, admin)
	d.config = filepath.Join(t.TempDir(), "envoy.yaml")
	if err := os.WriteFile(d.config, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	d.proxyURL = fmt.Sprintf("http://127.0.0.1:%d", listen)
	d.adminURL = fmt.Sprintf("http://127.0.0.1:%d", admin)
	d.hostURL = fmt.Sprintf("http://127.0.0.1:%d", d.hostPort)
	d.mockURL = fmt.Sprintf("http://127.0.0.1:%d", d.mockPort)
	return d
}

func (d *demo) env() []string {
	env := []string{"CHIME_DATA_DIR=" + d.dataDir}
	if d.hostConfig != "" {
		env = append(env, "CHIME_CONFIG="+d.hostConfig)
	}
	return env
}

// withHostConfig makes the host read yamlText as its config file.
func (d *demo) withHostConfig(t testing.TB, yamlText string) *demo {
	d.hostConfig = filepath.Join(t.TempDir(), "chime.yaml")
	if err := os.WriteFile(d.hostConfig, []byte(yamlText), 0o600); err != nil {
		t.Fatal(err)
	}
	return d
}

// up runs the whole stack as `chime up`.
func (d *demo) up(t testing.TB) *proc {
	p := startChime(t, d.env(), []string{d.hostURL + "/healthz", d.mockURL + "/__mock/requests", d.adminURL + "/ready"},
		"up", "-c", d.config, "--host-addr", fmt.Sprintf("127.0.0.1:%d", d.hostPort),
		"--mock-addr", fmt.Sprintf("127.0.0.1:%d", d.mockPort), "--wasi-profile", e2eProfile(), "--cache-dir", filepath.Join(os.TempDir(), "chime-e2e-cache"))
	d.guardRejections(t)
	return p
}

// host runs `chime host` alone.
func (d *demo) host(t testing.TB) *proc {
	return startChime(t, d.env(), []string{d.hostURL + "/healthz"}, "host", "--addr", fmt.Sprintf("127.0.0.1:%d", d.hostPort))
}

// proxyAndMock runs `chime proxy` and `chime mockllm` as two processes.
func (d *demo) proxyAndMock(t testing.TB) {
	startChime(t, nil, []string{d.mockURL + "/__mock/requests"}, "mockllm", "--addr", fmt.Sprintf("127.0.0.1:%d", d.mockPort))
	d.proxyProc = startChime(t, nil, []string{d.adminURL + "/ready"}, "proxy", "-c", d.config, "--wasi-profile", e2eProfile(), "--cache-dir", filepath.Join(os.TempDir(), "chime-e2e-cache"))
	d.guardRejections(t)
}

// guardRejections fails t at its end if the mock provider refused more or
// fewer requests than the test declared with expectRejections. The strict
// mock answers 400 where the real API would (docs/mock-provider.md), and chime turns some
// refusals into a visible note with a 200 to the client, so a test that
// only looks at the client's answer would not notice that the provider
// refused what chime sent. A scripted error status counts as a refusal too.
// Registered after the mock started, the check runs before it is stopped.
func (d *demo) guardRejections(t testing.TB) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.guarded {
		return
	}
	d.guarded = true
	t.Cleanup(func() {
		rejected, err := d.rejections()
		if err != nil {
			t.Errorf("mock rejection guard: %v", err)
			return
		}
		d.mu.Lock()
		rejected = append(append([]mockRequest(nil), d.clearedRejected...), rejected...)
		want := d.expectRejected
		d.mu.Unlock()
		if len(rejected) == want {
			return
		}
		var b strings.Builder
		for _, r := range rejected {
			why, body := r.Rejection, r.Body
			if why == "" {
				why = "(no request rule: a scripted status or an unknown path)"
			}
			if len(body) > 300 {
				body = body[:300] + "…"
			}
			fmt.Fprintf(&b, "\n  %s %s -> %d %s\n    body: %s", r.Method, r.Path, r.Status, why, body)
		}
		t.Errorf("the mock provider refused %d requests, the test expected %d (declare deliberate ones with expectRejections):%s",
			len(rejected), want, b.String())
	})
}

// expectRejections declares n more provider requests that the test makes
// the mock refuse on purpose (scripted error statuses or invalid requests).
func (d *demo) expectRejections(n int) {
	d.mu.Lock()
	d.expectRejected += n
	d.mu.Unlock()
}

// rejections returns the recorded requests the mock refused.
func (d *demo) rejections() ([]mockRequest, error) {
	resp, err := http.Get(d.mockURL + "/__mock/requests")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var all []mockRequest
	if err := json.NewDecoder(resp.Body).Decode(&all); err != nil {
		return nil, fmt.Errorf("GET /__mock/requests: %v", err)
	}
	var out []mockRequest
	for _, r := range all {
		if r.Rejection != "" || r.Status >= 400 {
			out = append(out, r)
		}
	}
	return out, nil
}

// clearMockRequests empties the mock's request log, keeping the refusals
// in it for the rejection guard.
func (d *demo) clearMockRequests(t testing.TB) {
	t.Helper()
	rejected, err := d.rejections()
	if err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	d.clearedRejected = append(d.clearedRejected, rejected...)
	d.mu.Unlock()
	req, _ := http.NewRequest("DELETE", d.mockURL+"/__mock/requests", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

func postJSON(t testing.TB, url string, hdr map[string]string, body any) (int, []byte) {
	t.Helper()
	return requestJSON(t, "POST", url, hdr, body)
}

// requestJSON sends body (a string, bytes, or a value to marshal; nil for
// none) as JSON with method.
func requestJSON(t testing.TB, method, url string, hdr map[string]string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	if body == nil {
		rd = http.NoBody
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, out
}

// clock calls the clock tool through the host API, as the response path will.
func (d *demo) clock(t testing.TB, session string, args map[string]any) map[string]any {
	t.Helper()
	for _, k := range []string{"items", "taskId"} {
		if _, ok := args[k]; !ok {
			if k == "items" {
				args[k] = []any{}
			} else {
				args[k] = ""
			}
		}
	}
	code, out := postJSON(t, d.hostURL+"/v1/tools/execute", map[string]string{"authorization": "Bearer " + hostToken},
		map[string]any{"sessionId": session, "requestId": fmt.Sprintf("e2e-%d", time.Now().UnixNano()), "name": "clock", "arguments": args})
	if code != http.StatusOK {
		t.Fatalf("tools/execute: %d %s", code, out)
	}
	var res map[string]any
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("tools/execute: %v: %s", err, out)
	}
	return res
}

// mockRequest is one request the mock provider recorded
// (mockllm.RecordedRequest).
type mockRequest struct {
	Method     string            `json:"method"`
	Path       string            `json:"path"`
	Headers    map[string]string `json:"headers"`
	Body       string            `json:"body"`
	ReceivedAt time.Time         `json:"receivedAt"`
	Status     int               `json:"status"`    // 0 while undecided or when the client left
	Rejection  string            `json:"rejection"` // why the mock refused it as the real API would
}

func (d *demo) mockRequests(t testing.TB) []mockRequest {
	t.Helper()
	resp, err := http.Get(d.mockURL + "/__mock/requests")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []mockRequest
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

func (d *demo) script(t testing.TB, replies ...map[string]any) {
	t.Helper()
	if code, out := postJSON(t, d.mockURL+"/__mock/script", nil, replies); code/100 != 2 {
		t.Fatalf("script: %d %s", code, out)
	}
}
