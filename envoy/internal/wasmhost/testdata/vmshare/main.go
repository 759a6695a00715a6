//go:build wasip1

// Command vmshare is a conformance guest for VM sharing. Each plugin's
// configuration is its name. Every VM numbers itself through shared data
// (key "vm-seq", per vm_id) when its first root context is created, so a
// test can tell whether two plugins run in one VM. A request gets a local
// reply whose body reports, as "key=value" lines, the VM's number, the
// stream's parent root id and its plugin, every root context of this VM
// with its plugin, how many times proxy_on_vm_start and proxy_on_configure
// ran in this VM, and what the shared data key of each plugin holds. A
// request with x-trap traps the VM; a root context logs its proxy_on_done.
// A plugin configured "deferred" defers its proxy_on_done: it calls the
// "gated" cluster and calls proxy_done when that answers; every root
// context logs its proxy_on_delete.
// A plugin configured "service <vm_id> [tag]" (a WasmService) enqueues three
// ticks into the "feed" queue of that vm_id, which every other plugin
// registers and drains, logging what it got.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"runtime"
	"sort"
	"strings"

	abi "github.com/chimehq/chime/internal/proxywasmabi"

	g "github.com/chimehq/chime/envoy/internal/wasmhost/testdata/guestabi"
)

var (
	// vmSeq numbers the VMs of a run in the order they start (shared
	// data); vmID names this VM at random. VMs that start at once can
	// both read the counter absent, and a set with CAS 0 is unconditional,
	// so only vmID tells concurrent VMs apart.
	vmSeq, vmID string
	rootPlugin  = map[uint32]string{} // root context id -> plugin config
	parentOf    = map[uint32]uint32{} // stream context id -> root context id
	vmStarts    int
	configures  int
	otherPlugin = []string{"a", "b", "c"}
	feedVM      string // a service's target vm_id ("service <vm_id>")
	ticks       int
)

func main() {}

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_memory_allocate
func onAlloc(size uint32) uint32 { return g.Alloc(size) }

func getShared(key string) (string, uint32) {
	k := g.S(key)
	var p, n, cas uint32
	st := g.ProxyGetSharedData(k.A(), k.N(), g.Ptr(&p), g.Ptr(&n), g.Ptr(&cas))
	runtime.KeepAlive(k.B)
	if st != 0 {
		return "", 0
	}
	return string(g.Bytes(p, n)), cas
}

func setShared(key, value string, cas uint32) uint32 {
	k, v := g.S(key), g.S(value)
	st := g.ProxySetSharedData(k.A(), k.N(), v.A(), v.N(), cas)
	runtime.KeepAlive(k.B)
	runtime.KeepAlive(v.B)
	return st
}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, parent uint32) {
	g.Reset()
	if parent != 0 {
		parentOf[id] = parent
		return
	}
	if _, ok := rootPlugin[id]; ok {
		g.Log(fmt.Sprintf("root context %d created twice", id))
	}
	rootPlugin[id] = ""
	if vmID == "" {
		var b [8]byte
		if _, err := rand.Read(b[:]); err != nil {
			panic(err)
		}
		vmID = hex.EncodeToString(b[:])
	}
	if vmSeq == "" {
		for {
			cur, cas := getShared("vm-seq")
			n := 0
			fmt.Sscan(cur, &n)
			next := fmt.Sprint(n + 1)
			if setShared("vm-seq", next, cas) == 0 {
				vmSeq = next
				break
			}
		}
	}
}

//go:wasmexport proxy_on_vm_start
func onVMStart(root, size uint32) uint32 {
	g.Reset()
	vmStarts++
	return 1
}

//go:wasmexport proxy_on_configure
func onConfigure(root, size uint32) uint32 {
	g.Reset()
	configures++
	cfg, _ := g.GetBuffer(abi.BufferPluginConfiguration)
	rootPlugin[root] = string(cfg)
	setShared("plugin-"+string(cfg), fmt.Sprint(root), 0)
	g.Log(fmt.Sprintf("configured root %d as %s", root, cfg))
	if f := strings.Fields(string(cfg)); len(f) >= 2 && f[0] == "service" {
		feedVM = f[1]
		g.ProxySetTickPeriod(5)
		return 1
	}
	var tok uint32
	name := g.S("feed")
	st := g.ProxyRegisterSharedQueue(name.A(), name.N(), g.Ptr(&tok))
	runtime.KeepAlive(name.B)
	if st != 0 {
		g.Log(fmt.Sprintf("register_shared_queue: %d", st))
	}
	return 1
}

//go:wasmexport proxy_on_request_headers
func onRequestHeaders(id, n, eos uint32) uint32 {
	g.Reset()
	if _, st := g.Header(abi.MapHttpRequestHeaders, "x-trap"); st == 0 {
		panic("trap requested")
	}
	root := parentOf[id]
	var b strings.Builder
	fmt.Fprintf(&b, "vm=%s\n", vmSeq)
	fmt.Fprintf(&b, "vmid=%s\n", vmID)
	fmt.Fprintf(&b, "root=%d\n", root)
	fmt.Fprintf(&b, "plugin=%s\n", rootPlugin[root])
	ids := make([]int, 0, len(rootPlugin))
	for r := range rootPlugin {
		ids = append(ids, int(r))
	}
	sort.Ints(ids)
	var roots []string
	for _, r := range ids {
		roots = append(roots, fmt.Sprintf("%d:%s", r, rootPlugin[uint32(r)]))
	}
	fmt.Fprintf(&b, "roots=%s\n", strings.Join(roots, ","))
	fmt.Fprintf(&b, "vm_starts=%d\n", vmStarts)
	fmt.Fprintf(&b, "configures=%d\n", configures)
	for _, p := range otherPlugin {
		v, _ := getShared("plugin-" + p)
		fmt.Fprintf(&b, "shared_%s=%s\n", p, v)
	}
	body := g.S(b.String())
	st := g.ProxySendLocalResponse(200, 0, 0, body.A(), body.N(), 0, 0, 0xffffffff)
	runtime.KeepAlive(body.B)
	if st != 0 {
		g.Log(fmt.Sprintf("send_local_response: %d", st))
	}
	return 1
}

// onTick feeds the "feed" queue of feedVM once it exists.
//
//go:wasmexport proxy_on_tick
func onTick(root uint32) {
	g.Reset()
	vm, name := g.S(feedVM), g.S("feed")
	var tok uint32
	st := g.ProxyResolveSharedQueue(vm.A(), vm.N(), name.A(), name.N(), g.Ptr(&tok))
	runtime.KeepAlive(vm.B)
	runtime.KeepAlive(name.B)
	if st != 0 {
		return // no filter registered it yet
	}
	ticks++
	item := g.S(fmt.Sprintf("tick-%d-from-root-%d", ticks, root))
	g.ProxyEnqueueSharedQueue(tok, item.A(), item.N())
	runtime.KeepAlive(item.B)
	if ticks == 3 {
		g.ProxySetTickPeriod(0)
	}
}

// onQueueReady drains the queue, logging each item as "fed <item> on root
// <id>".
//
//go:wasmexport proxy_on_queue_ready
func onQueueReady(root, tok uint32) {
	g.Reset()
	for {
		v, st := g.Out1(func(d, s uint32) uint32 { return g.ProxyDequeueSharedQueue(tok, d, s) })
		if st != 0 {
			return
		}
		g.Log(fmt.Sprintf("fed %s on root %d", v, root))
	}
}

//go:wasmexport proxy_on_done
func onDone(id uint32) uint32 {
	g.Reset()
	p, ok := rootPlugin[id]
	if !ok {
		return 1
	}
	g.Log(fmt.Sprintf("root %d (%s) done", id, p))
	if p != "deferred" {
		return 1
	}
	g.Log(fmt.Sprintf("proxy_done before deferring: %d", g.ProxyDone()))
	up := g.S("gated")
	h := abi.EncodePairs([][2]string{{":method", "POST"}, {":path", "/bye"}, {":authority", "host"}})
	var token uint32
	st := g.ProxyHTTPCall(up.A(), up.N(), g.Addr(h), uint32(len(h)), 0, 0, 0, 0, 5000, g.Ptr(&token))
	runtime.KeepAlive(up.B)
	runtime.KeepAlive(h)
	if st != 0 {
		g.Log(fmt.Sprintf("http_call: %d", st))
		return 1
	}
	return 0
}

//go:wasmexport proxy_on_http_call_response
func onHTTPCallResponse(root, token, headers, body, trailers uint32) {
	g.Reset()
	g.Log(fmt.Sprintf("root %d answered", root))
	g.Log(fmt.Sprintf("root %d proxy_done: %d", root, g.ProxyDone()))
	g.Log(fmt.Sprintf("root %d proxy_done again: %d", root, g.ProxyDone()))
}

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	g.Reset()
	if p, ok := rootPlugin[id]; ok {
		g.Log(fmt.Sprintf("root %d (%s) deleted", id, p))
	}
	delete(parentOf, id)
	delete(rootPlugin, id)
}
