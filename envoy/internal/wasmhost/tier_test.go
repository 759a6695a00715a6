package wasmhost

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// tieredPlugin builds a factory for the vmshare guest with tiering on and
// the given cache directory.
func tieredPlugin(t *testing.T, vmID, cacheDir string, logs *logSink) *Factory {
	t.Helper()
	cfg, env, _, _, _, _ := testConfig(t, "a", func(c *httpfilter.WasmConfig, e *httpfilter.Env) {
		c.CodePath, c.VMID, c.PluginName, c.RootID = guests["vmshare"], vmID, "plugin-a", "root-a"
		e.VMScope, e.Workers, e.CacheDir, e.InterpretWhileCompiling = &httpfilter.VMScope{}, 1, cacheDir, true
	})
	env.Logger = slog.New(sinkHandler{logs})
	f, err := newFactory(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func slotVM(f *Factory) *vmInstance {
	s := f.g.slots[0]
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.vm
}

// A module missing from the cache starts interpreted and serves at once;
// once it has compiled, new streams get a compiled VM (a new instance,
// started and configured like the first) while a stream bound to the
// interpreted VM before the switch still finishes on it. That VM's root
// context then gets proxy_on_done, the VM and its runtime are released,
// and the cache's marker makes the next start skip the interpreter.
func TestInterpretWhileCompiling(t *testing.T) {
	release := make(chan struct{})
	tierUpHook = func() { <-release }
	t.Cleanup(func() { tierUpHook = nil })
	dir := t.TempDir()
	logs := &logSink{min: slog.LevelDebug}
	f := tieredPlugin(t, "vm-"+t.Name(), dir, logs)

	old := slotVM(f)
	if !old.eng.interpreted {
		t.Fatal("a module never compiled into the cache did not start interpreted")
	}
	if r := report(t, f); r["vm"] != "1" || r["configures"] != "1" {
		t.Fatalf("interpreted VM: %v; want vm 1, configured once", r)
	}
	held := newFakeStream(nil, 0)
	flt, err := f.NewFilter(held) // bound to the interpreted VM
	if err != nil {
		t.Fatal(err)
	}

	close(release)
	f.g.building.Wait()
	now := slotVM(f)
	if now == old || now.eng.interpreted {
		t.Fatal("after the compilation the worker still has its interpreted VM")
	}
	if r := report(t, f); r["vm"] != "2" || r["roots"] != "1:a" || r["configures"] != "1" || r["vm_starts"] != "1" {
		t.Fatalf("compiled VM: %v; want vm 2 with root 1:a, started and configured once", r)
	}
	old.mu.Lock()
	closed := old.closed
	old.mu.Unlock()
	if closed || logs.count("root 1 (a) done") != 0 {
		t.Fatal("the interpreted VM ended while a stream was still bound to it")
	}

	flt.DecodeHeaders(&held.req, true)
	flt.OnStreamComplete()
	if len(held.replies) != 1 || !strings.Contains(held.replies[0].body, "vm=1\n") {
		t.Fatalf("the stream bound before the switch: %+v; want its reply from vm 1", held.replies)
	}
	logs.wait(t, "root 1 (a) done")
	deadline := time.Now().Add(5 * time.Second)
	for {
		old.mu.Lock()
		closed = old.closed
		old.mu.Unlock()
		f.g.enginesMu.Lock()
		engines := len(f.g.engines)
		f.g.enginesMu.Unlock()
		if closed && engines == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("interpreted VM closed %v, engines %d; want closed and only the compiled engine", closed, engines)
		}
		time.Sleep(time.Millisecond) // poll: the retired VM ends on its own goroutine
	}
	if n := logs.count("root 1 (a) done"); n != 1 {
		t.Errorf("proxy_on_done of the interpreted VM's root ran %d times, want 1", n)
	}

	markers, _ := os.ReadDir(filepath.Join(dir, "chime-compiled"))
	if len(markers) != 1 {
		t.Fatalf("cache markers %v, want one", markers)
	}
	// A later process: nothing in memory, the marker on disk.
	compiledModules.Delete(markerKey(dir, f.g.digest))
	again := tieredPlugin(t, "vm-"+t.Name()+"-again", dir, &logSink{})
	again.g.building.Wait()
	if slotVM(again).eng.interpreted || again.Instantiations() != 1 {
		t.Errorf("with the module in the cache: interpreted %v, %d VMs; want one compiled VM",
			slotVM(again).eng.interpreted, again.Instantiations())
	}
}

// A start without tiering (the compile waited for) marks the module too,
// so a later start that tiers skips the interpreter.
func TestCompiledStartMarksTheModule(t *testing.T) {
	dir := t.TempDir()
	cfg, env, _, _, _, _ := testConfig(t, "a", func(c *httpfilter.WasmConfig, e *httpfilter.Env) {
		c.CodePath, c.VMID, c.PluginName, c.RootID = guests["vmshare"], "vm-"+t.Name(), "plugin-a", "root-a"
		e.VMScope, e.Workers, e.CacheDir = &httpfilter.VMScope{}, 1, dir
	})
	f, err := newFactory(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	f.g.building.Wait()
	if markers, _ := os.ReadDir(filepath.Join(dir, "chime-compiled")); len(markers) != 1 {
		t.Fatalf("cache markers %v after a compiled start, want one", markers)
	}
	compiledModules.Delete(markerKey(dir, f.g.digest)) // a later process
	tiered := tieredPlugin(t, "vm-"+t.Name()+"-tiered", dir, &logSink{})
	if slotVM(tiered).eng.interpreted {
		t.Error("a tiered start after a compiled one started interpreted")
	}
}

// Without a cache directory the process's own compilation counts: a
// second group for the same module starts compiled.
func TestInterpretWhileCompilingInMemoryCache(t *testing.T) {
	logs := &logSink{}
	first := tieredPlugin(t, "vm-"+t.Name(), "", logs)
	first.g.building.Wait()
	if slotVM(first).eng.interpreted {
		t.Fatal("the worker kept its interpreted VM after the compilation")
	}
	second := tieredPlugin(t, "vm-"+t.Name()+"-2", "", logs)
	if slotVM(second).eng.interpreted {
		t.Error("a module this process compiled started interpreted again")
	}
}

// Closing the factory while the module compiles returns, and leaves no
// VM behind in the worker's slot.
func TestInterpretWhileCompilingClosedEarly(t *testing.T) {
	entered := make(chan struct{})
	tierUpHook = func() { close(entered) }
	t.Cleanup(func() { tierUpHook = nil })
	f := tieredPlugin(t, "vm-"+t.Name(), t.TempDir(), &logSink{})
	<-entered
	f.Close()
	if vm := slotVM(f); vm != nil {
		t.Errorf("slot still holds a VM (interpreted %v) after Close", vm.eng.interpreted)
	}
	f.g.enginesMu.Lock()
	defer f.g.enginesMu.Unlock()
	if len(f.g.engines) != 0 {
		t.Errorf("%d engines left open after Close", len(f.g.engines))
	}
}

// A plugin whose proxy_on_done returns false keeps its retired VM until it
// calls proxy_done: its http_call is still answered there, proxy_done is
// NOT_FOUND before the plugin deferred and after it finished, and
// proxy_on_delete and the VM's end follow it, as cpp-host's pending_done_
// has them.
func TestRetiredVMWaitsForProxyDone(t *testing.T) {
	release := make(chan struct{})
	tierUpHook = func() { <-release }
	t.Cleanup(func() { tierUpHook = nil })
	logs := &logSink{min: slog.LevelDebug}
	cfg, env, _, _, clusters, _ := testConfig(t, "deferred", func(c *httpfilter.WasmConfig, e *httpfilter.Env) {
		c.CodePath, c.VMID, c.PluginName, c.RootID = guests["vmshare"], "vm-"+t.Name(), "plugin-d", "root-d"
		e.VMScope, e.Workers, e.CacheDir, e.InterpretWhileCompiling = &httpfilter.VMScope{}, 1, t.TempDir(), true
	})
	env.Logger = slog.New(sinkHandler{logs})
	f, err := newFactory(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	old := slotVM(f)
	if !old.eng.interpreted {
		t.Fatal("the module did not start interpreted")
	}
	closed := func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		return old.closed
	}

	close(release) // compiled: the interpreted VM retires
	f.g.building.Wait()
	logs.wait(t, "root 1 (deferred) done")
	for deadline := time.Now().Add(5 * time.Second); ; {
		if calls := clusters.recorded(); len(calls) == 1 && calls[0].cluster == "gated" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the deferred plugin's call never went out: %+v", clusters.recorded())
		}
		time.Sleep(time.Millisecond) // poll: the call goes out on its own goroutine
	}
	if closed() || logs.count("root 1 (deferred) deleted") != 0 {
		t.Fatal("the retired VM ended before its plugin called proxy_done")
	}
	if logs.count("proxy_done before deferring: 1") != 1 { // NOT_FOUND
		t.Error("proxy_done before the plugin deferred was not NOT_FOUND")
	}

	close(clusters.gate) // the host answers
	logs.wait(t, "root 1 (deferred) deleted")
	for deadline := time.Now().Add(5 * time.Second); !closed(); {
		if time.Now().After(deadline) {
			t.Fatal("the retired VM stayed open after its last plugin called proxy_done")
		}
		time.Sleep(time.Millisecond) // poll: the VM closes on its own goroutine
	}
	for _, want := range []string{"root 1 answered", "root 1 proxy_done: 0", "root 1 proxy_done again: 1"} {
		if logs.count(want) != 1 {
			t.Errorf("log %q: %d times, want once", want, logs.count(want))
		}
	}
	if r := report(t, f); r["vm"] != "2" || r["plugin"] != "deferred" {
		t.Errorf("the compiled VM: %v", r)
	}
}
