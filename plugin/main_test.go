package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the native side of the comparison must know the zones too

	"github.com/chimehq/chime/hostapi"
	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/internal/filter"
	"github.com/chimehq/chime/plugin/internal/wasmcheck"
)

var (
	// chimeWasmPath is chime.wasm: $CHIME_WASM (make test builds it) or a
	// fresh build for this test binary.
	chimeWasmPath string
	// compileCache is the runtime's compilation cache, shared by every
	// stack of the binary so the module compiles once.
	compileCache string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "chime-wasm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	compileCache = filepath.Join(dir, "cache")
	chimeWasmPath = os.Getenv("CHIME_WASM")
	if chimeWasmPath == "" {
		chimeWasmPath = filepath.Join(dir, "chime.wasm")
		if err := wasmcheck.Build(".", ".", chimeWasmPath); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// TestImportsAreEnvoy138Subset: every WASI import is one Envoy 1.38
// provides and every env import is an ABI v0.2.1 proxy_* function with the
// right signature, so the module loads in released Envoy; every callback
// is exported with the signature Envoy calls it with.
func TestImportsAreEnvoy138Subset(t *testing.T) {
	wasm, err := os.ReadFile(chimeWasmPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	imports, err := wasmcheck.Imports(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmcheck.CheckImports(imports); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, im := range imports {
		if im.Module == "env" {
			env = append(env, im.Name)
		}
	}
	for _, want := range []string{"proxy_http_call", "proxy_continue_stream", "proxy_get_buffer_bytes", "proxy_define_metric"} {
		if !slices.Contains(env, want) {
			t.Errorf("chime.wasm does not import %s; imports %q", want, env)
		}
	}
	exports, err := wasmcheck.Exports(ctx, wasm)
	if err != nil {
		t.Fatal(err)
	}
	if err := wasmcheck.CheckExports(exports); err != nil {
		t.Fatal(err)
	}
	for _, e := range exports {
		if e.Name == "_start" {
			t.Error("module exports _start; it must be a reactor")
		}
	}
	if !slices.ContainsFunc(exports, func(e abi.Func) bool { return e.Name == "_initialize" }) {
		t.Error("module does not export _initialize")
	}
}

// prepareBody is the part of a prepare request these tests check.
type prepareBody struct {
	RequestID, Protocol string
	Directives          []struct{ Kind, Route string }
}

// TestModuleRunsRequestsUnderEnvoy138 drives chime.wasm through many full
// request lifecycles in the runtime: headers, a body the filter buffers,
// the prepare http_call and its answer, resume, the response, teardown.
// The bodies add up to far more than the heap, so the Go GC must run
// inside callbacks; under envoy-1.38 a runtime that tried to sleep would
// get ENOSYS from poll_oneoff and crash the VM.
func TestModuleRunsRequestsUnderEnvoy138(t *testing.T) {
	const requests, size = 200, 256 << 10
	full := llmBody(size)
	type seen struct {
		contentLength int64
		n             int
		tail          string
		directive     bool
	}
	upstreamSaw := make(chan seen, 1)
	s := mustStart(t, stackOptions{
		pluginConfig: `{"token":"t0k","prepareTimeoutMs":300}`,
		gctrace:      true,
		upstream: func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			upstreamSaw <- seen{r.ContentLength, len(b), string(b[max(0, len(b)-200):]), bytes.Contains(b, []byte("<**"))}
			w.Header().Set("content-type", "application/json")
			io.WriteString(w, `{"id":"resp","output":[]}`)
		},
	})
	s.host.handle(hostapi.PathPrepare, func(w http.ResponseWriter, _ *http.Request, _ []byte) {
		io.WriteString(w, `{"ntp":{"status":"ok","offsetMs":-12}}`)
	})
	c := &http.Client{Timeout: 30 * time.Second}
	for i := range requests {
		id := fmt.Sprintf("r%d", i)
		resp, body := s.post(c, "/v1/responses", full, "x-request-id", id)
		if resp.StatusCode != 200 || string(body) != `{"id":"resp","output":[]}` {
			t.Fatalf("request %d: %d %q\nlog:\n%s", i, resp.StatusCode, body, s.logs.dump())
		}
		up := <-upstreamSaw
		// The filter dropped the client's content-length (the body grew),
		// so the runtime framed the edited body anew.
		framed := up.contentLength == -1 || up.contentLength == int64(up.n)
		if !strings.HasSuffix(up.tail, "ntpOffsetMs=`-12`\"}]}]}") || up.directive || up.n < size-100 || up.n == size || !framed {
			t.Fatalf("request %d: upstream got %d bytes (content-length %d), directive %v, ending %q", i, up.n, up.contentLength, up.directive, up.tail)
		}
		calls := s.host.callsTo(hostapi.PathPrepare)
		if len(calls) != 1 {
			t.Fatalf("request %d: %d prepare calls", i, len(calls))
		}
		var prep prepareBody
		if err := json.Unmarshal(calls[0].body, &prep); err != nil || prep.Protocol != "responses" || len(prep.RequestID) != 32 || prep.RequestID == id ||
			len(prep.Directives) != 1 || prep.Directives[0].Route != "fast" {
			t.Fatalf("request %d: prepare body %s (%v)", i, calls[0].body, err)
		}
		if h := calls[0].header; h.Get("authorization") != "Bearer t0k" {
			t.Fatalf("request %d: prepare headers %v", i, h)
		}
		s.host.reset()
	}

	s.checkHealthy()
	if n := s.metric(filter.MetricRequests); n != requests {
		t.Errorf("%s = %d, want %d", filter.MetricRequests, n, requests)
	}
	// 200 × 256 KiB went through guest memory; a heap that never
	// collected would be over 50 MiB.
	cycles, peak := gcTrace(t, s.logs)
	t.Logf("guest GC: %d cycles, peak heap %d MB", cycles, peak)
	if cycles == 0 || peak > 32 {
		t.Errorf("guest GC: %d cycles, heap peaked at %d MB: garbage is not being collected", cycles, peak)
	}
}

// gcTrace reads the guest's GODEBUG=gctrace=1 lines back from its stderr
// log records and returns the number of GC cycles and the largest heap at
// a cycle's start, in MB. Every other error-level guest record (chime's
// error logs) fails the test.
func gcTrace(t *testing.T, logs *logBuffer) (cycles, peakMB int) {
	t.Helper()
	// The Go runtime writes a trace line in pieces, one fd_write each, and
	// the runtime logs a record per write with the newline trimmed: a
	// record that was only "\n" comes back empty.
	var stderr strings.Builder
	for _, r := range logs.guest(slog.LevelError) {
		if r.Msg == "" {
			stderr.WriteByte('\n')
		}
		stderr.WriteString(r.Msg)
	}
	heap := regexp.MustCompile(`^gc \d+ @.* (\d+)->\d+->\d+ MB`)
	for _, line := range strings.Split(stderr.String(), "\n") {
		if line == "" {
			continue
		}
		m := heap.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("error log: %s", line)
			continue
		}
		cycles++
		n, _ := strconv.Atoi(m[1])
		peakMB = max(peakMB, n)
	}
	return cycles, peakMB
}

// TestModuleFailsOpenAndRejectsBadConfig: a host that does not answer
// within prepareTimeoutMs still lets the request through (fail open, with
// the time tag); an invalid configuration fails on_configure, so the
// runtime refuses to start, with a log line that names the field.
func TestModuleFailsOpenAndRejectsBadConfig(t *testing.T) {
	upstreamBody := make(chan []byte, 1)
	s := mustStart(t, stackOptions{
		pluginConfig: `{"prepareTimeoutMs":300}`,
		upstream: func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			upstreamBody <- b
			io.WriteString(w, "ok")
		},
	})
	s.host.handle(hostapi.PathPrepare, func(w http.ResponseWriter, r *http.Request, _ []byte) {
		select { // never answers in time: the runtime's http_call timeout ends it
		case <-r.Context().Done():
		case <-time.After(5 * time.Second):
		}
	})
	start := time.Now()
	resp, body := s.post(http.DefaultClient, "/v1/chat/completions", []byte(`{"messages":[]}`))
	// Real time is under test here: the 300 ms prepare timeout, not the
	// host's 5 s, must release the request.
	if elapsed := time.Since(start); resp.StatusCode != 200 || string(body) != "ok" || elapsed > 3*time.Second {
		t.Fatalf("request with a silent host: %d %q after %v", resp.StatusCode, body, elapsed)
	}
	if b := <-upstreamBody; !tagRE.Match(b) {
		t.Errorf("failed-open request reached the upstream without the time tag: %s", b)
	}
	if n := s.metric(filter.MetricHostCallFailures); n != 1 {
		t.Errorf("%s = %d, want 1", filter.MetricHostCallFailures, n)
	}
	if n := s.metric(filter.MetricFailOpen); n != 1 {
		t.Errorf("%s = %d, want 1", filter.MetricFailOpen, n)
	}
	s.checkHealthy()

	bad, err := startStack(t, stackOptions{pluginConfig: `{"prepareTimeoutMs":"fast"}`})
	if err == nil || !strings.Contains(err.Error(), "Unable to configure") {
		t.Fatalf("invalid configuration: start error %v", err)
	}
	if !slices.ContainsFunc(bad.logs.guest(slog.LevelError), func(r logRecord) bool { return strings.Contains(r.Msg, "prepareTimeoutMs") }) {
		t.Fatalf("no error log names the bad field:\n%s", bad.logs.dump())
	}
}

// BenchmarkRequestLifecycle measures one handled request through the
// runtime with chime.wasm: buffer, parse, strip a directive, prepare,
// append the time tag, replace the body, forward, answer.
func BenchmarkRequestLifecycle(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) {
			s := mustStart(b, stackOptions{upstream: func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				io.WriteString(w, `{"id":"resp","output":[]}`)
			}})
			body := llmBody(size)
			c := &http.Client{}
			b.SetBytes(int64(size))
			for b.Loop() {
				if resp, _ := s.post(c, "/v1/responses", body, "x-request-id", "r"); resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
				s.host.reset()
			}
		})
	}
}

// llmBody is a Responses request of size bytes whose user text carries a
// directive.
func llmBody(size int) []byte {
	head, tail := `{"model":"m","input":[{"role":"user","content":"<**route:fast**>`, `"}]}`
	b := append([]byte(head), bytes.Repeat([]byte("x"), size-len(head)-len(tail))...)
	return append(b, tail...)
}

var tagRE = regexp.MustCompile("utc=`([^`]+)` local=`([^`]+)` tz=`([^`]+)` nowMs=`(-?\\d+)` ntpOffsetMs=`(-?\\d+)`")

// TestModuleRendersZones: chime.wasm carries its own zone database (there
// is no file system in the guest), so a zone from the configuration or the
// request header renders with its real offset, DST included.
func TestModuleRendersZones(t *testing.T) {
	upstreamBody := make(chan []byte, 1)
	s := mustStart(t, stackOptions{
		pluginConfig: `{"defaultTimezone":"America/Los_Angeles"}`,
		upstream: func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			upstreamBody <- b
			io.WriteString(w, "ok")
		},
	})
	ticks := 0
	for _, r := range s.logs.records() {
		if r.Msg == "wasm: tick period set" && r.PeriodMs != nil {
			ticks++
			if *r.PeriodMs != 1_000 {
				t.Errorf("tick period %d ms", *r.PeriodMs)
			}
		}
	}
	if ticks != 1 {
		t.Errorf("the filter set its tick period %d times, want once", ticks)
	}
	// The host fails (503): the filter's own clock writes the tag.
	s.host.handle(hostapi.PathPrepare, func(w http.ResponseWriter, _ *http.Request, _ []byte) { w.WriteHeader(503) })
	for _, zone := range []string{"Asia/Kathmandu", "", "Australia/Lord_Howe", "Not/AZone"} {
		resp, _ := s.post(http.DefaultClient, "/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"hi"}]}`),
			"x-chime-timezone", zone)
		if resp.StatusCode != 200 {
			t.Fatalf("%q: status %d", zone, resp.StatusCode)
		}
		sent := <-upstreamBody
		m := tagRE.FindStringSubmatch(string(sent))
		if m == nil {
			t.Fatalf("%q: no time tag in %s", zone, sent)
		}
		want := zone
		if zone == "" || zone == "Not/AZone" {
			want = "America/Los_Angeles"
		}
		loc, err := time.LoadLocation(want)
		if err != nil {
			t.Fatal(err)
		}
		utc, err := time.Parse("2006-01-02T15:04:05.000Z", m[1])
		if err != nil {
			t.Fatal(err)
		}
		if local := utc.In(loc).Format("2006-01-02 15:04:05.000 -07:00"); m[2] != local || m[3] != want {
			t.Errorf("%q: tag local=%s tz=%s, want %s %s", zone, m[2], m[3], local, want)
		}
		if now := time.Now(); utc.Before(now.Add(-time.Minute)) || utc.After(now.Add(time.Minute)) {
			t.Errorf("%q: tag time %s is not now", zone, utc)
		}
	}
	s.checkHealthy()
}
