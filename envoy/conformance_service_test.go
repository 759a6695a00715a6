package envoy_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"
)

// A bootstrap_extensions WasmService with singleton: false runs, as in
// Envoy (bootstrap/wasm PluginConfig with a thread-local slot), one root
// context per worker: on each worker it joins the VM of the filters with
// the same vm_id, code and VM configuration, as one more plugin created
// after them (root context 2), and is started (proxy_on_vm_start,
// proxy_on_configure) once per worker. Its ticks run per worker too, so
// the two service roots together feed the filters' queue twice as many
// items as a singleton does.
func TestWasmServicePerWorker(t *testing.T) {
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
    singleton: false
    config:
      name: feeder
      root_id: feeder
      vm_config: { vm_id: fed, runtime: envoy.wasm.runtime.v8, code: { local: { filename: %q } } }
      configuration: { "@type": type.googleapis.com/google.protobuf.StringValue, value: "service fed" }
`, code),
	})
	// The first connection of a listener goes to worker 0, the second to 1.
	w0 := parseReport(t, newConn(t).get(t, p.url("la", "/")))
	w1 := parseReport(t, newConn(t).get(t, p.url("la", "/")))
	for i, r := range []map[string]string{w0, w1} {
		if r["roots"] != "1:a,2:service fed" || r["root"] != "1" {
			t.Errorf("worker %d VM: root contexts %q (stream's root %s), want 1:a,2:service fed", i, r["roots"], r["root"])
		}
		if r["vm_starts"] != "2" || r["configures"] != "2" {
			t.Errorf("worker %d VM: proxy_on_vm_start ran %s times, proxy_on_configure %s; want 2 and 2", i, r["vm_starts"], r["configures"])
		}
	}
	if w0["vmid"] == w1["vmid"] {
		t.Errorf("both workers report VM %s; want one VM per worker", w0["vmid"])
	}
	if got := p.logs.find("feeder", "configured root 2 as service fed"); len(got) != 2 {
		t.Errorf("service configured %d times, want once per worker (2): %q", len(got), p.logs.dump("feeder"))
	}
	// Each worker's service root enqueues tick-1..3: six items in all.
	fed := regexp.MustCompile(`^fed tick-[123]-from-root-2 on root 1$`)
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := 0
		for _, l := range p.logs.guestLines("plugin-a") {
			if fed.MatchString(l) {
				n++
			}
		}
		if n == 6 {
			break
		}
		if n > 6 || time.Now().After(deadline) {
			t.Fatalf("the filters received %d items, want 6 (3 per worker); they logged:\n%s", n, p.logs.dump("plugin-a"))
		}
		time.Sleep(5 * time.Millisecond) // poll: items arrive on the runtime's tick goroutines; no clock to drive
	}
}
