package proxywasm

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestStreamTable holds streamTable to a map over random puts, gets and
// deletes of ids that collide in the ring.
func TestStreamTable(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var tab streamTable
	ref := map[uint32]*streamEntry{}
	for i := 0; i < 200000; i++ {
		id := uint32(r.IntN(4 * streamSlots))
		switch r.IntN(3) {
		case 0:
			e := &streamEntry{pluginID: uint32(i)}
			tab.put(id, e)
			ref[id] = e
		case 1:
			tab.del(id)
			delete(ref, id)
		}
		got, ok := tab.get(id)
		want, wok := ref[id]
		if ok != wok || got != want {
			t.Fatalf("step %d: get(%d) = %p %v, want %p %v", i, id, got, ok, want, wok)
		}
	}
	for id, want := range ref {
		if got, ok := tab.get(id); !ok || got != want {
			t.Fatalf("get(%d) = %p %v, want %p", id, got, ok, want)
		}
	}
}

type rootsVM struct {
	DefaultVMContext
	made int
}

type rootPlugin struct {
	DefaultPluginContext
	name    int
	streams []uint32
}

type rootStream struct{ DefaultHttpContext }

func (vm *rootsVM) NewPluginContext(uint32) PluginContext {
	vm.made++
	return &rootPlugin{name: vm.made}
}

func (p *rootPlugin) NewHttpContext(id uint32) HttpContext {
	p.streams = append(p.streams, id)
	return &rootStream{}
}

// Streams are made by their own root context, whichever was looked up
// last, and never by one deleted or replaced under the same id.
func TestStreamsFindTheirRootContext(t *testing.T) {
	defer SetVMContext(nil)
	SetVMContext(&rootsVM{})
	g := guest{}
	g.OnContextCreate(1, 0)
	g.OnContextCreate(2, 0)
	first, second := state.plugins[1].ctx.(*rootPlugin), state.plugins[2].ctx.(*rootPlugin)
	g.OnContextCreate(10, 1)
	g.OnContextCreate(11, 2)
	g.OnContextCreate(12, 1)
	g.OnDelete(1)
	g.OnContextCreate(13, 1) // its root context is gone: no stream
	if _, ok := state.streams.get(13); ok {
		t.Fatal("a stream of a deleted root context was made")
	}
	g.OnContextCreate(1, 0) // a new root context under the old id
	again := state.plugins[1].ctx.(*rootPlugin)
	g.OnContextCreate(14, 1)
	g.OnContextCreate(1, 0) // and replaced again, while it was the last found
	last := state.plugins[1].ctx.(*rootPlugin)
	g.OnContextCreate(15, 1)
	for _, c := range []struct {
		p    *rootPlugin
		want []uint32
	}{{first, []uint32{10, 12}}, {second, []uint32{11}}, {again, []uint32{14}}, {last, []uint32{15}}} {
		if !slices.Equal(c.p.streams, c.want) {
			t.Errorf("root context %d made streams %v, want %v", c.p.name, c.p.streams, c.want)
		}
	}
	if !g.OnDone(14) || !g.OnDone(1) {
		t.Fatal("OnDone deferred")
	}
}
