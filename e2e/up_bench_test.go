package e2e

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// BenchmarkUpReady runs `chime up` and times it from the process start to
// the first 200 answered through the proxy (the chime filter and the host
// on the path, the mock provider behind), with a cold wasm compilation
// cache (a fresh --cache-dir) and then a warm one (the same directory on
// the next start). Each round is a fresh stack (ports, data directory).
// It prints the median of the rounds next to the goals (cold ≤ 1.5 s,
// warm ≤ 0.5 s on 2 cores).
//
// CHIME_UP_BASELINE names another chime binary (for example one built
// from an older commit) and CHIME_UP_BASELINE_WASM, optionally, the
// chime.wasm it runs (default: this build's): its rounds interleave with
// this build's, so both columns come from one run on the same machine
// load, and the ratio is printed.
func BenchmarkUpReady(b *testing.B) {
	type build struct {
		name, path, wasm string
		tiered           bool // interprets while compiling, and marks the compiled module
	}
	bins := []build{{"this build", chimeBin(b), "", true}}
	if base := os.Getenv("CHIME_UP_BASELINE"); base != "" {
		bins = append(bins, build{"baseline", base, os.Getenv("CHIME_UP_BASELINE_WASM"), tiers(b, base)})
	}
	const rounds = 3
	// Wall time to the first 200, and the CPU time chime spent until then
	// (less sensitive to other work on the machine).
	cold, warm := map[string][]time.Duration{}, map[string][]time.Duration{}
	coldCPU, warmCPU := map[string][]time.Duration{}, map[string][]time.Duration{}
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			for _, bin := range bins {
				cache := b.TempDir()
				wall, cpu := upFirstAnswer(b, bin.path, bin.wasm, cache, bin.tiered)
				cold[bin.name], coldCPU[bin.name] = append(cold[bin.name], wall), append(coldCPU[bin.name], cpu)
				wall, cpu = upFirstAnswer(b, bin.path, bin.wasm, cache, bin.tiered)
				warm[bin.name], warmCPU[bin.name] = append(warm[bin.name], wall), append(warmCPU[bin.name], cpu)
			}
		}
	}
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	var out strings.Builder
	fmt.Fprintf(&out, "\n%-11s %12s %12s %12s %12s %12s\n", "chime up", "cold", "cold CPU", "warm", "warm CPU", "module")
	for _, bin := range bins {
		n, wasm := bin.name, bin.wasm
		if wasm == "" {
			wasm = chimeWasm(b)
		}
		size := "-"
		if fi, err := os.Stat(wasm); err == nil {
			size = fmt.Sprintf("%.2f MB", float64(fi.Size())/1e6)
		}
		fmt.Fprintf(&out, "%-11s %12s %12s %12s %12s %12s\n", n, ms(median(cold[n])), ms(median(coldCPU[n])), ms(median(warm[n])), ms(median(warmCPU[n])), size)
	}
	fmt.Fprintf(&out, "%-11s %12s %12s %12s %12s\n", "goal", "≤ 1.5s", "", "≤ 0.5s", "")
	if len(bins) == 2 {
		ratio := func(m map[string][]time.Duration) string {
			if median(m["baseline"]) == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f×", float64(median(m["this build"]))/float64(median(m["baseline"])))
		}
		fmt.Fprintf(&out, "%-11s %12s %12s %12s %12s\n", "÷ baseline", ratio(cold), ratio(coldCPU), ratio(warm), ratio(warmCPU))
	}
	b.Log(out.String())
	b.ReportMetric(float64(median(cold["this build"]).Milliseconds()), "cold-ms")
	b.ReportMetric(float64(median(warm["this build"]).Milliseconds()), "warm-ms")
}

// TestUpFirstRequestThroughHost: the first request `chime up` answers 200
// through the proxy, sent without waiting for any readiness endpoint, was
// handled by the filter with the host's answer (the host's clock tool is
// in what the provider got), not failed open: the proxy serves before
// every worker's VM is built and while the host may still be opening its
// store.
func TestUpFirstRequestThroughHost(t *testing.T) {
	_, _ = upFirstAnswer(t, chimeBin(t), "", filepath.Join(os.TempDir(), "chime-e2e-cache"), true)
}

// upFirstAnswer starts `bin up` on a fresh stack running wasm ("" =
// chime.wasm) with the given cache directory and returns the time until a chat request through the proxy
// is answered 200, and the CPU time chime used until then (0 where
// /proc does not tell). It fails tb unless that request reached the provider
// with the time tag and the clock tool the filter adds from the host's
// answer.
func upFirstAnswer(tb testing.TB, bin, wasm, cacheDir string, tiered bool) (time.Duration, time.Duration) {
	tb.Helper()
	d := newDemoWasm(tb, "", wasm)
	logs := &syncBuffer{}
	cmd := exec.Command(bin, "up", "-c", d.config,
		"--host-addr", d.hostURL[len("http://"):], "--mock-addr", d.mockURL[len("http://"):], "--cache-dir", cacheDir)
	cmd.Dir = repoRoot()
	cmd.Env = append(append(os.Environ(), "CHIME_NTP=off", "CHIME_HOST_TOKEN="+hostToken), d.env()...)
	cmd.Stdout, cmd.Stderr = logs, logs
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	p := &proc{cmd: cmd, logs: logs}
	defer p.kill(syscall.SIGTERM)
	deadline := start.Add(2 * time.Minute)
	for {
		req, err := http.NewRequest(http.MethodPost, d.proxyURL+"/v1/messages", bytes.NewReader(body))
		if err != nil {
			tb.Fatal(err)
		}
		req.Header.Set("content-type", "application/json")
		req.Header.Set("x-api-key", "sk-up-ready")
		req.Header.Set("anthropic-version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("chime up: no 200 through the proxy within 2 minutes (last error %v)\n%s", err, logs.String())
		}
		time.Sleep(10 * time.Millisecond) // poll: a separate process starting up
	}
	elapsed := time.Since(start)
	cpu := processCPU(cmd.Process.Pid)
	reqs := d.mockRequests(tb)
	if len(reqs) != 1 || !strings.Contains(reqs[0].Body, "[Time/Date]:") || !slices.Contains(toolNames("/v1/messages", reqs[0].Body), "clock") {
		tb.Fatalf("the first request did not pass the filter with the host's answer (time tag and clock tool): %+v\n%s", reqs, logs.String())
	}
	// With a cold cache the first answer came from interpreted VMs: wait
	// for the compiled module to reach the cache (its marker is written
	// after wazero's entry), so that the next start is a warm one.
	for tiered {
		if entries, _ := os.ReadDir(filepath.Join(cacheDir, "chime-compiled")); len(entries) > 0 {
			break
		}
		if time.Now().After(deadline) {
			tb.Fatalf("chime up: the compiled module did not reach the cache %s within 2 minutes\n%s", cacheDir, logs.String())
		}
		time.Sleep(10 * time.Millisecond) // poll: the compile runs in another process
	}
	if entries, _ := os.ReadDir(cacheDir); len(entries) < 1 || tiered && len(entries) < 2 {
		tb.Fatalf("the wasm compilation cache %s holds no compiled code after chime up: %v", cacheDir, entries)
	}
	return elapsed, cpu
}

// processCPU is the user plus system time of process pid so far, from
// /proc/PID/stat (in clock ticks, 100 a second on Linux); 0 elsewhere.
func processCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The fields after the command name, which is in parentheses: state
	// is the first, utime the 12th and stime the 13th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	var ticks int64
	for _, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / 100
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// tiers reports whether the chime binary at bin serves from the
// interpreter while it compiles, leaving a marker once compiled (older
// builds compiled before their first answer): a warm start must wait for
// that marker, or it measures a second cold one.
func tiers(tb testing.TB, bin string) bool {
	out, err := exec.Command(bin, "proxy", "--help").CombinedOutput()
	if err != nil {
		tb.Fatalf("%s proxy --help: %v\n%s", bin, err, out)
	}
	return strings.Contains(string(out), "--interpret-while-compiling")
}
