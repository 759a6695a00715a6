package envoy_test

import (
	"fmt"
	"strings"
	"testing"
)

// parseReport reads the vmshare guest's "key=value" lines.
func parseReport(t *testing.T, r reply) map[string]string {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("vmshare reply: %d %q", r.status, r.body)
	}
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.body), "\n") {
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("vmshare reply line %q", line)
		}
		m[k] = v
	}
	return m
}

// Two wasm filters on different listeners with one vm_id, the same code
// and the same VM configuration run in one VM per worker, each with its
// own root context (ids 1 and 2, in config order), as Envoy's
// proxy-wasm-cpp-host does (createWasm keyed by vm_id, configuration and
// code; WasmBase::start per plugin). proxy_on_vm_start and
// proxy_on_configure run once per root context. A filter with another
// vm_id gets its own VM and its own shared data.
func TestVMSharing(t *testing.T) {
	p := startProxy(t, runtimeSpec{
		listeners: []listenerSpec{
			{name: "la", filters: []filterSpec{{name: "plugin-a", mode: "a", vmID: "shared", guest: "vmshare", rootID: "ra"}}},
			{name: "lb", filters: []filterSpec{{name: "plugin-b", mode: "b", vmID: "shared", guest: "vmshare", rootID: "rb"}}},
			{name: "lc", filters: []filterSpec{{name: "plugin-c", mode: "c", vmID: "other", guest: "vmshare", rootID: "rc"}}},
		},
		clusters: map[string]string{"app": closedAddr(t)},
	})
	// Each listener hands its first connection to worker 0, its second to
	// worker 1.
	w0, w1 := newConn(t), newConn(t)
	a0 := parseReport(t, w0.get(t, p.url("la", "/")))
	b0 := parseReport(t, w0.get(t, p.url("lb", "/")))
	a1 := parseReport(t, w1.get(t, p.url("la", "/")))
	b1 := parseReport(t, w1.get(t, p.url("lb", "/")))
	c0 := parseReport(t, w0.get(t, p.url("lc", "/")))

	for _, r := range []map[string]string{a0, b0, a1, b1} {
		if r["roots"] != "1:a,2:b" {
			t.Errorf("root contexts of the shared VM = %q, want 1:a,2:b (one VM, one root context per plugin)", r["roots"])
		}
		if r["vm_starts"] != "2" || r["configures"] != "2" {
			t.Errorf("proxy_on_vm_start ran %s times, proxy_on_configure %s times in the shared VM, want 2 and 2", r["vm_starts"], r["configures"])
		}
		if r["shared_a"] != "1" || r["shared_b"] != "2" || r["shared_c"] != "" {
			t.Errorf("shared data seen from vm_id shared: a=%q b=%q c=%q, want 1, 2 and nothing", r["shared_a"], r["shared_b"], r["shared_c"])
		}
	}
	if a0["root"] != "1" || a0["plugin"] != "a" || b0["root"] != "2" || b0["plugin"] != "b" {
		t.Errorf("streams' root contexts: la %s/%s, lb %s/%s; want 1/a and 2/b", a0["root"], a0["plugin"], b0["root"], b0["plugin"])
	}
	if a0["vmid"] != b0["vmid"] || a1["vmid"] != b1["vmid"] {
		t.Errorf("plugins a and b on one worker ran in different VMs: worker 0 %s/%s, worker 1 %s/%s", a0["vmid"], b0["vmid"], a1["vmid"], b1["vmid"])
	}
	if a0["vmid"] == a1["vmid"] {
		t.Errorf("workers 0 and 1 share VM %s; want one VM per worker", a0["vmid"])
	}
	if c0["roots"] != "1:c" || c0["root"] != "1" || c0["shared_c"] != "1" || c0["shared_a"] != "" || c0["vm_starts"] != "1" {
		t.Errorf("filter with its own vm_id: %v; want its own VM with root 1:c and its own shared data", c0)
	}
}

// A bootstrap_extensions WasmService singleton runs in a VM of its own
// (another vm_id here) and feeds the HTTP filters through a shared queue
// they register: it resolves the queue by the filters' vm_id on its ticks
// and enqueues; the filters' root context gets proxy_on_queue_ready and
// dequeues every item, in order.
func TestWasmServiceSingletonFeedsFilters(t *testing.T) {
	code := guest(t, "vmshare")
	p := startProxy(t, runtimeSpec{
		listeners: []listenerSpec{
			{name: "la", filters: []filterSpec{{name: "plugin-a", mode: "a", vmID: "fed", guest: "vmshare", rootID: "ra"}}},
		},
		clusters: map[string]string{"app": closedAddr(t)},
		bootstrap: fmt.Sprintf(`bootstrap_extensions:
- name: envoy.bootstrap.wasm
  typed_config:
    "@type": type.googleapis.com/envoy.extensions.wasm.v3.WasmService
    singleton: true
    config:
      name: feeder
      root_id: feeder
      vm_config: { vm_id: svc, runtime: envoy.wasm.runtime.v8, code: { local: { filename: %q } } }
      configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: "service fed" }
`, code),
	})
	for i := 1; i <= 3; i++ {
		p.logs.waitMatch(t, "plugin-a", fmt.Sprintf(`fed tick-%d-from-root-1 on root 1`, i))
	}
	// The service has its own VM: it is no root context of the filters' VM.
	r := parseReport(t, newConn(t).get(t, p.url("la", "/")))
	if r["roots"] != "1:a" {
		t.Errorf("filters' VM root contexts %q, want 1:a only", r["roots"])
	}
	if got := p.logs.find("feeder", "configured root 1 as service fed"); len(got) != 1 {
		t.Errorf("service configured %d times, want once (singleton): %q", len(got), p.logs.dump("feeder"))
	}
}
