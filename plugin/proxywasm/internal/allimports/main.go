// Command allimports is a test module that links every proxywasm host
// binding, so tests can check all import signatures against Envoy's ABI
// (the linker drops bindings a real plugin does not use).
package main

import (
	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/internal/bridge"
)

func init() { proxywasm.SetVMContext(proxywasm.DefaultVMContext{}) }

// touch calls every host method so each import is linked. No host calls it.
//
//lint:ignore U1000 exported to the wasm host by go:wasmexport
//go:wasmexport allimports_touch
func touch() {
	h := bridge.CurrentHost()
	h.Log(0, "")
	h.GetLogLevel()
	h.GetProperty(nil)
	h.SetProperty(nil, nil)
	h.GetBufferBytes(0, 0, 0)
	h.GetBufferStatus(0)
	h.SetBufferBytes(0, 0, 0, nil)
	h.GetHeaderMapPairs(0)
	h.SetHeaderMapPairs(0, nil)
	h.GetHeaderMapValue(0, "")
	h.ReplaceHeaderMapValue(0, "", "")
	h.RemoveHeaderMapValue(0, "")
	h.AddHeaderMapValue(0, "", "")
	h.ContinueStream(0)
	h.CloseStream(0)
	h.SendLocalResponse(0, "", nil, nil, 0)
	h.HttpCall("", nil, nil, nil, 0)
	h.SetTickPeriodMilliseconds(0)
	h.SetSharedData("", nil, 0)
	h.GetSharedData("")
	h.RegisterSharedQueue("")
	h.ResolveSharedQueue("", "")
	h.EnqueueSharedQueue(0, nil)
	h.DequeueSharedQueue(0)
	h.DefineMetric(0, "")
	h.IncrementMetric(0, 0)
	h.RecordMetric(0, 0)
	h.GetMetric(0)
	h.SetEffectiveContext(0)
	h.Done()
	h.CallForeignFunction("", nil)
}

func main() {}
