//go:build wasip1

// Command tcpfilter is a conformance guest written the way a third-party
// network filter is: plain Go for wasip1 with its own small proxy-wasm
// binding (no test helpers), a root context and one context per TCP
// connection. It counts the bytes of each connection in both directions
// (metrics tcpfilter.bytes_in / tcpfilter.bytes_out, and the close log) and
// logs every callback, so a test can compare the order with Envoy's.
//
// Its plugin configuration is a list of words:
//
//	upper          upper-cases the client's bytes before they go upstream
//	line           holds the client's bytes until a newline arrived
//	gate           holds a new connection and its first bytes until the
//	               root context's tick lets it go (proxy_continue_stream)
//	close-on=WORD  closes the connection when the client sends WORD
//	trap-on=WORD   panics (traps the VM) when the client sends WORD
//	banner=TEXT    prepends TEXT to the first bytes sent to the client
package main

import (
	"bytes"
	"fmt"
	"strings"
	"unsafe"
)

func main() {}

// --- binding ---------------------------------------------------------------

//go:wasmimport env proxy_log
func proxyLog(level uint32, msg unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxyGetBufferBytes(typ, start, max uint32, data unsafe.Pointer, size unsafe.Pointer) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxySetBufferBytes(typ, start, max uint32, data unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxyContinueStream(typ uint32) uint32

//go:wasmimport env proxy_close_stream
func proxyCloseStream(typ uint32) uint32

//go:wasmimport env proxy_set_effective_context
func proxySetEffectiveContext(id uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxySetTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_define_metric
func proxyDefineMetric(kind uint32, name unsafe.Pointer, size uint32, id unsafe.Pointer) uint32

//go:wasmimport env proxy_increment_metric
func proxyIncrementMetric(id uint32, delta int64) uint32

const (
	bufferDownstream   = 2
	bufferUpstream     = 3
	bufferPluginConfig = 7
	streamDownstream   = 2
	metricCounter      = 0
	logInfo            = 2
	actionContinue     = 0
	actionPause        = 1
)

// Memory the host asks for stays reachable until the next callback.
var pinned [][]byte

//go:wasmexport proxy_on_memory_allocate
func onMemoryAllocate(size uint32) unsafe.Pointer {
	b := make([]byte, size+1)
	pinned = append(pinned, b)
	return unsafe.Pointer(&b[0])
}

func enter() { pinned = pinned[:0] }

func logf(format string, args ...any) {
	b := []byte(fmt.Sprintf(format, args...))
	if len(b) == 0 {
		return
	}
	proxyLog(logInfo, unsafe.Pointer(&b[0]), uint32(len(b)))
}

func getBuffer(typ uint32, size int) []byte {
	if size == 0 {
		return nil
	}
	var p *byte
	var n uint32
	if proxyGetBufferBytes(typ, 0, uint32(size), unsafe.Pointer(&p), unsafe.Pointer(&n)) != 0 || n == 0 {
		return nil
	}
	return bytes.Clone(unsafe.Slice(p, n))
}

// setBuffer replaces the first size bytes of the buffer with data.
func setBuffer(typ uint32, size int, data []byte) {
	var p unsafe.Pointer
	if len(data) > 0 {
		p = unsafe.Pointer(&data[0])
	}
	proxySetBufferBytes(typ, 0, uint32(size), p, uint32(len(data)))
}

func defineCounter(name string) uint32 {
	b := []byte(name)
	var id uint32
	proxyDefineMetric(metricCounter, unsafe.Pointer(&b[0]), uint32(len(b)), unsafe.Pointer(&id))
	return id
}

// --- the filter --------------------------------------------------------------

type settings struct {
	upper, line, gate bool
	closeOn, trapOn   string
	banner            string
}

type connection struct {
	id            uint32
	in, out       int
	sawData, open bool // gate: bytes arrived / the tick let it go
	bannerSent    bool
}

var (
	cfg               settings
	rootID            uint32
	conns             = map[uint32]*connection{}
	bytesIn, bytesOut uint32
)

//go:wasmexport proxy_abi_version_0_2_1
func abiVersion() {}

//go:wasmexport proxy_on_context_create
func onContextCreate(id, parent uint32) {
	enter()
	if parent == 0 {
		rootID = id
		return
	}
	conns[id] = &connection{id: id}
}

//go:wasmexport proxy_on_vm_start
func onVMStart(id, size uint32) uint32 {
	enter()
	bytesIn = defineCounter("tcpfilter.bytes_in")
	bytesOut = defineCounter("tcpfilter.bytes_out")
	return 1
}

//go:wasmexport proxy_on_configure
func onConfigure(id, size uint32) uint32 {
	enter()
	cfg = settings{}
	for _, w := range strings.Fields(string(getBuffer(bufferPluginConfig, int(size)))) {
		k, v, _ := strings.Cut(w, "=")
		switch k {
		case "upper":
			cfg.upper = true
		case "line":
			cfg.line = true
		case "gate":
			cfg.gate = true
		case "close-on":
			cfg.closeOn = v
		case "trap-on":
			cfg.trapOn = v
		case "banner":
			cfg.banner = v
		default:
			logf("unknown setting %q", w)
			return 0
		}
	}
	if cfg.gate {
		proxySetTickPeriod(1)
	}
	return 1
}

//go:wasmexport proxy_on_tick
func onTick(root uint32) {
	enter()
	for _, c := range conns {
		if c.sawData && !c.open {
			c.open = true
			proxySetEffectiveContext(c.id)
			logf("gate %d opened", c.id)
			proxyContinueStream(streamDownstream)
		}
	}
	proxySetEffectiveContext(root)
}

//go:wasmexport proxy_on_new_connection
func onNewConnection(id uint32) uint32 {
	enter()
	logf("new connection %d", id)
	if cfg.gate {
		return actionPause
	}
	return actionContinue
}

//go:wasmexport proxy_on_downstream_data
func onDownstreamData(id, size, end uint32) uint32 {
	enter()
	c := conns[id]
	data := getBuffer(bufferDownstream, int(size))
	logf("downstream data %d len=%d end=%t data=%q", id, size, end != 0, data)
	if cfg.trapOn != "" && bytes.Contains(data, []byte(cfg.trapOn)) {
		panic("tcpfilter: trap requested")
	}
	if cfg.closeOn != "" && bytes.Contains(data, []byte(cfg.closeOn)) {
		logf("closing %d", id)
		proxyCloseStream(streamDownstream)
		return actionPause
	}
	if cfg.gate && !c.open {
		c.sawData = true
		return actionPause
	}
	if cfg.line && end == 0 && !bytes.Contains(data, []byte("\n")) {
		return actionPause
	}
	if cfg.upper && len(data) > 0 {
		setBuffer(bufferDownstream, len(data), bytes.ToUpper(data))
	}
	c.in += len(data)
	if len(data) > 0 {
		proxyIncrementMetric(bytesIn, int64(len(data)))
	}
	return actionContinue
}

//go:wasmexport proxy_on_upstream_data
func onUpstreamData(id, size, end uint32) uint32 {
	enter()
	c := conns[id]
	logf("upstream data %d len=%d end=%t", id, size, end != 0)
	if cfg.banner != "" && !c.bannerSent && size > 0 {
		c.bannerSent = true
		b := []byte(cfg.banner)
		setBuffer(bufferUpstream, 0, b)
		size += uint32(len(b))
	}
	c.out += int(size)
	if size > 0 {
		proxyIncrementMetric(bytesOut, int64(size))
	}
	return actionContinue
}

//go:wasmexport proxy_on_downstream_connection_close
func onDownstreamClose(id, peer uint32) {
	enter()
	logf("downstream close %d peer=%d", id, peer)
}

//go:wasmexport proxy_on_upstream_connection_close
func onUpstreamClose(id, peer uint32) {
	enter()
	logf("upstream close %d peer=%d", id, peer)
}

//go:wasmexport proxy_on_done
func onDone(id uint32) uint32 {
	enter()
	if id != rootID {
		logf("done %d", id)
	}
	return 1
}

//go:wasmexport proxy_on_log
func onLog(id uint32) {
	enter()
	if c := conns[id]; c != nil {
		logf("log %d in=%d out=%d", id, c.in, c.out)
	}
}

//go:wasmexport proxy_on_delete
func onDelete(id uint32) {
	enter()
	if conns[id] != nil {
		logf("delete %d", id)
		delete(conns, id)
	}
}
