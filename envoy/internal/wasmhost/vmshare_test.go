package wasmhost

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// sharedPlugin builds a factory for the vmshare guest with plugin
// configuration name, in scope, with vm_id vmID.
func sharedPlugin(t *testing.T, scope *httpfilter.VMScope, vmID, name string, logs *logSink) *Factory {
	t.Helper()
	cfg, env, _, _, _, _ := testConfig(t, name, func(c *httpfilter.WasmConfig, e *httpfilter.Env) {
		c.CodePath = guests["vmshare"]
		c.VMID = vmID
		c.PluginName = "plugin-" + name
		c.RootID = "root-" + name
		e.VMScope = scope
		e.Workers = 1
	})
	if logs != nil {
		env.Logger = slog.New(sinkHandler{logs})
	}
	f, err := newFactory(cfg, env)
	if err != nil {
		t.Fatalf("plugin %s: %v", name, err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// report runs one request through f and parses the guest's reply.
func report(t *testing.T, f *Factory, headers ...string) map[string]string {
	t.Helper()
	fs := newFakeStream(nil, 0, headers...)
	flt, err := f.NewFilter(fs)
	if err != nil {
		t.Fatal(err)
	}
	flt.DecodeHeaders(&fs.req, true)
	flt.OnStreamComplete()
	if len(fs.replies) != 1 || fs.replies[0].status != 200 {
		return nil // no reply, or the 503 of a failed VM
	}
	m := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(fs.replies[0].body), "\n") {
		k, v, _ := strings.Cut(l, "=")
		m[k] = v
	}
	return m
}

// Closing one of two plugins sharing a VM ends only its root context
// (proxy_on_done on root 1); the other keeps the VM. A VM that traps is
// replaced by one that starts every remaining plugin's root context.
func TestSharedVMPluginCloseAndReload(t *testing.T) {
	vmID := "vm-" + t.Name()
	scope := &httpfilter.VMScope{}
	logs := &logSink{min: -8}
	a := sharedPlugin(t, scope, vmID, "a", logs)
	b := sharedPlugin(t, scope, vmID, "b", logs)
	c := sharedPlugin(t, scope, vmID, "c", logs)
	if a.g != b.g || b.g != c.g || a.Instantiations() != 1 {
		t.Fatalf("plugins with one vm_id, code and configuration: groups %p %p %p, %d VMs; want one group with one VM", a.g, b.g, c.g, a.Instantiations())
	}
	// The same module in another scope (another server) is not shared.
	other := sharedPlugin(t, &httpfilter.VMScope{}, vmID, "a", nil)
	if other.g == a.g {
		t.Fatal("a filter of another scope joined the group")
	}

	before := report(t, b)
	if before["roots"] != "1:a,2:b,3:c" || before["root"] != "2" {
		t.Fatalf("before close: %v", before)
	}
	a.Close()
	if _, ok := logs.find("root 1 (a) done"); !ok {
		t.Errorf("closing plugin a did not end root context 1: %q", logs.lines())
	}
	if _, ok := logs.find("root 2 (b) done"); ok {
		t.Error("closing plugin a ended plugin b's root context")
	}
	if r := report(t, b); r["roots"] != "2:b,3:c" || r["plugin"] != "b" {
		t.Errorf("after closing a: %v; want roots 2:b,3:c", r)
	}

	if r := report(t, c, "x-trap", "1"); r != nil {
		t.Fatalf("trapping request got a report: %v", r)
	}
	r := report(t, c)
	if b.Instantiations() != 2 {
		t.Errorf("%d VM instances after a trap, want 2", b.Instantiations())
	}
	// The new VM allocates root ids afresh, in plugin order.
	if r["roots"] != "1:b,2:c" || r["root"] != "2" || r["plugin"] != "c" || r["vm"] == before["vm"] || r["vm_starts"] != "2" {
		t.Errorf("replacement VM: %v; want a new VM with roots 1:b,2:c and c's stream on root 2", r)
	}
	if rb := report(t, b); rb["root"] != "1" || rb["vm"] != r["vm"] {
		t.Errorf("plugin b after the reload: %v; want root 1 in VM %s", rb, r["vm"])
	}
}

// Ticks belong to root contexts: two plugins sharing a VM each set a tick
// period in proxy_on_configure and each gets proxy_on_tick with its own
// root context id (the guest tags what it enqueues with the id it got).
func TestSharedVMTicksPerRootContext(t *testing.T) {
	vmID := "vm-" + t.Name()
	scope := &httpfilter.VMScope{}
	logs := &logSink{min: -8}
	sharedPlugin(t, scope, vmID, "a", logs) // root 1: registers and drains the queue
	s1 := sharedPlugin(t, scope, vmID, "service "+vmID, logs)
	s2 := sharedPlugin(t, scope, vmID, "service "+vmID+" second", logs) // another configuration, another root
	if s1.g != s2.g {
		t.Fatal("the services did not share the VM")
	}
	roots := map[string]bool{}
	deadline := time.Now().Add(5 * time.Second)
	for len(roots) < 2 && time.Now().Before(deadline) {
		time.Sleep(2 * time.Millisecond) // poll: ticks run on the VM's own timers
		for _, l := range logs.lines() {
			if rest, ok := strings.CutPrefix(l, "fed tick-"); ok {
				_, from, _ := strings.Cut(rest, "-from-root-")
				id, _, _ := strings.Cut(from, " ")
				roots[id] = true
			}
		}
	}
	if !roots["2"] || !roots["3"] || len(roots) != 2 {
		t.Errorf("proxy_on_tick reached root contexts %v, want 2 and 3 (the services'); log:\n%s", roots, strings.Join(logs.lines(), "\n"))
	}
}

// Two filters with the same root_id and plugin configuration in one VM
// are one plugin to Envoy (cpp-host's plugin key), whatever their names:
// one root context, configured once; it ends when the last one closes.
func TestSharedVMSamePluginKeyOneRootContext(t *testing.T) {
	vmID := "vm-" + t.Name()
	scope := &httpfilter.VMScope{}
	logs := &logSink{min: -8}
	mk := func(name string) *Factory {
		cfg, env, _, _, _, _ := testConfig(t, "a", func(c *httpfilter.WasmConfig, e *httpfilter.Env) {
			c.CodePath, c.VMID, c.PluginName, c.RootID = guests["vmshare"], vmID, name, "same-root"
			e.VMScope, e.Workers, e.Logger = scope, 1, slog.New(sinkHandler{logs})
		})
		f, err := newFactory(cfg, env)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	first, second := mk("first"), mk("second")
	r := report(t, second)
	if r["roots"] != "1:a" || r["root"] != "1" || r["configures"] != "1" || r["vm_starts"] != "1" {
		t.Errorf("same plugin key: %v; want one root context 1, configured once", r)
	}
	first.Close()
	if _, ok := logs.find("root 1 (a) done"); ok {
		t.Error("closing one of two filters with one plugin key ended the shared root context")
	}
	if r := report(t, second); r["root"] != "1" {
		t.Errorf("after closing the first filter: %v", r)
	}
	second.Close()
	logs.wait(t, "root 1 (a) done")
}

// With Env.BackgroundWorkers the factory is ready once worker 0's VM runs
// and the other workers' VMs are built behind it. A plugin that joins the
// group while worker 1's VM is still being built is started in that VM
// once, after the plugin before it; the first stream on worker 1 waits for
// that VM instead of building one of its own.
func TestBackgroundWorkerVMs(t *testing.T) {
	release := make(chan struct{})
	buildWorkerHook = func(int) { <-release }
	t.Cleanup(func() { buildWorkerHook = nil })
	vmID := "vm-" + t.Name()
	scope := &httpfilter.VMScope{}
	mk := func(name string) *Factory {
		cfg, env, _, _, _, _ := testConfig(t, name, func(c *httpfilter.WasmConfig, e *httpfilter.Env) {
			c.CodePath, c.VMID, c.PluginName, c.RootID = guests["vmshare"], vmID, "plugin-"+name, "root-"+name
			e.VMScope, e.Workers, e.BackgroundWorkers = scope, 2, true
		})
		f, err := newFactory(cfg, env)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a := mk("a")
	if n := a.Instantiations(); n != 1 {
		t.Fatalf("%d VMs when the factory returned, want 1 (worker 1's is held in its build)", n)
	}
	b := mk("b")
	if r := report(t, b); r["roots"] != "1:a,2:b" || r["root"] != "2" {
		t.Fatalf("worker 0: %v; want roots 1:a,2:b", r)
	}
	done := make(chan map[string]string, 1)
	go func() {
		fs := newFakeStream(nil, 1)
		flt, err := b.NewFilter(fs)
		if err != nil {
			done <- nil
			return
		}
		flt.DecodeHeaders(&fs.req, true)
		flt.OnStreamComplete()
		m := map[string]string{}
		if len(fs.replies) == 1 {
			for _, l := range strings.Split(strings.TrimSpace(fs.replies[0].body), "\n") {
				k, v, _ := strings.Cut(l, "=")
				m[k] = v
			}
		}
		done <- m
	}()
	close(release)
	r := <-done
	if r["roots"] != "1:a,2:b" || r["root"] != "2" || r["configures"] != "2" || r["vm_starts"] != "2" {
		t.Errorf("worker 1: %v; want its own VM with roots 1:a,2:b, each configured once", r)
	}
	a.g.building.Wait()
	if n := a.Instantiations(); n != 2 {
		t.Errorf("%d VMs for 2 workers, want 2", n)
	}
	if w0 := report(t, a); w0["vmid"] == r["vmid"] {
		t.Errorf("workers 0 and 1 share VM %s", r["vmid"])
	}
}
