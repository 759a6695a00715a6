//go:build wasip1

// Package guestabi is a minimal raw proxy-wasm v0.2.1 binding for the
// wasmhost test guests. Pointers are passed as plain uint32 addresses so a
// guest can also hand the host deliberately bad ones; the helpers take the
// catalogue's enums and the pairs codec is the catalogue's
// (internal/proxywasmabi).
package guestabi

import (
	"runtime"
	"unsafe"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

//go:wasmimport env proxy_log
func ProxyLog(level, msg, size uint32) uint32

//go:wasmimport env proxy_get_log_level
func ProxyGetLogLevel(ret uint32) uint32

//go:wasmimport env proxy_get_property
func ProxyGetProperty(path, pathSize, retData, retSize uint32) uint32

//go:wasmimport env proxy_set_property
func ProxySetProperty(path, pathSize, value, valueSize uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func ProxyGetBufferBytes(typ, start, maxSize, retData, retSize uint32) uint32

//go:wasmimport env proxy_get_buffer_status
func ProxyGetBufferStatus(typ, retSize, retFlags uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func ProxySetBufferBytes(typ, start, size, data, dataSize uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func ProxyGetHeaderMapPairs(typ, retData, retSize uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
func ProxySetHeaderMapPairs(typ, data, size uint32) uint32

//go:wasmimport env proxy_get_header_map_size
func ProxyGetHeaderMapSize(typ, retSize uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func ProxyGetHeaderMapValue(typ, key, keySize, retData, retSize uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func ProxyAddHeaderMapValue(typ, key, keySize, value, valueSize uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func ProxyReplaceHeaderMapValue(typ, key, keySize, value, valueSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func ProxyRemoveHeaderMapValue(typ, key, keySize uint32) uint32

//go:wasmimport env proxy_continue_stream
func ProxyContinueStream(typ uint32) uint32

//go:wasmimport env proxy_close_stream
func ProxyCloseStream(typ uint32) uint32

//go:wasmimport env proxy_send_local_response
func ProxySendLocalResponse(code, details, detailsSize, body, bodySize, headers, headersSize, grpc uint32) uint32

//go:wasmimport env proxy_http_call
func ProxyHTTPCall(up, upSize, headers, headersSize, body, bodySize, trailers, trailersSize, timeout, retToken uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func ProxySetTickPeriod(ms uint32) uint32

//go:wasmimport env proxy_get_shared_data
func ProxyGetSharedData(key, keySize, retData, retSize, retCas uint32) uint32

//go:wasmimport env proxy_set_shared_data
func ProxySetSharedData(key, keySize, value, valueSize, cas uint32) uint32

//go:wasmimport env proxy_register_shared_queue
func ProxyRegisterSharedQueue(name, nameSize, retToken uint32) uint32

//go:wasmimport env proxy_resolve_shared_queue
func ProxyResolveSharedQueue(vmID, vmIDSize, name, nameSize, retToken uint32) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func ProxyEnqueueSharedQueue(token, data, size uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func ProxyDequeueSharedQueue(token, retData, retSize uint32) uint32

//go:wasmimport env proxy_define_metric
func ProxyDefineMetric(typ, name, nameSize, retID uint32) uint32

//go:wasmimport env proxy_increment_metric
func ProxyIncrementMetric(id uint32, delta int64) uint32

//go:wasmimport env proxy_record_metric
func ProxyRecordMetric(id uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
func ProxyGetMetric(id, retValue uint32) uint32

//go:wasmimport env proxy_set_effective_context
func ProxySetEffectiveContext(id uint32) uint32

//go:wasmimport env proxy_done
func ProxyDone() uint32

//go:wasmimport env proxy_call_foreign_function
func ProxyCallForeignFunction(name, nameSize, args, argsSize, retData, retSize uint32) uint32

// pinned keeps host-requested allocations alive until the next callback.
var pinned [][]byte

// Alloc backs proxy_on_memory_allocate (exported by each guest's main).
func Alloc(size uint32) uint32 {
	if size == 0 {
		size = 1
	}
	b := make([]byte, size)
	pinned = append(pinned, b)
	return Addr(b)
}

// Reset drops allocations from earlier callbacks; call it on entry.
func Reset() { pinned = pinned[:0] }

// Addr is the linear-memory address of b (0 for empty).
func Addr(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

// Ptr is the address of a uint32/uint64 out-parameter.
func Ptr[T uint32 | uint64](v *T) uint32 { return uint32(uintptr(unsafe.Pointer(v))) }

// Bytes copies size bytes at addr.
func Bytes(addr, size uint32) []byte {
	if size == 0 {
		return nil
	}
	return append([]byte(nil), unsafe.Slice((*byte)(unsafe.Pointer(uintptr(addr))), size)...)
}

// Log logs at info.
func Log(msg string) { LogAt(abi.LogLevelInfo, msg) }

// LogAt logs at a proxy-wasm level.
func LogAt(level abi.LogLevel, msg string) uint32 {
	b := []byte(msg)
	st := ProxyLog(uint32(level), Addr(b), uint32(len(b)))
	runtime.KeepAlive(b)
	return st
}

// Out1 calls f with two out-parameters (data, size) and returns the data.
func Out1(f func(retData, retSize uint32) uint32) ([]byte, uint32) {
	var p, n uint32
	st := f(Ptr(&p), Ptr(&n))
	if st != 0 {
		return nil, st
	}
	return Bytes(p, n), st
}

// Str is a byte slice plus its address and length for a host call.
type Str struct {
	B []byte
}

// S wraps a string for passing to the host.
func S(s string) Str { return Str{B: []byte(s)} }

// A is the address.
func (s Str) A() uint32 { return Addr(s.B) }

// N is the length.
func (s Str) N() uint32 { return uint32(len(s.B)) }

// GetBuffer reads a whole buffer.
func GetBuffer(typ abi.BufferType) ([]byte, uint32) {
	return Out1(func(d, s uint32) uint32 { return ProxyGetBufferBytes(uint32(typ), 0, 0xffffffff, d, s) })
}

// SetBuffer calls proxy_set_buffer_bytes.
func SetBuffer(typ abi.BufferType, start, size uint32, data string) uint32 {
	d := S(data)
	st := ProxySetBufferBytes(uint32(typ), start, size, d.A(), d.N())
	runtime.KeepAlive(d.B)
	return st
}

// Header reads one header value.
func Header(typ abi.MapType, key string) (string, uint32) {
	k := S(key)
	v, st := Out1(func(d, s uint32) uint32 { return ProxyGetHeaderMapValue(uint32(typ), k.A(), k.N(), d, s) })
	runtime.KeepAlive(k.B)
	return string(v), st
}

// EditHeader calls add (op 'a'), replace ('r') or remove ('d').
func EditHeader(op byte, mapType abi.MapType, key, value string) uint32 {
	typ := uint32(mapType)
	k, v := S(key), S(value)
	defer runtime.KeepAlive(k.B)
	defer runtime.KeepAlive(v.B)
	switch op {
	case 'a':
		return ProxyAddHeaderMapValue(typ, k.A(), k.N(), v.A(), v.N())
	case 'r':
		return ProxyReplaceHeaderMapValue(typ, k.A(), k.N(), v.A(), v.N())
	default:
		return ProxyRemoveHeaderMapValue(typ, k.A(), k.N())
	}
}

// Property reads a property given its path segments.
func Property(parts ...string) ([]byte, uint32) {
	path := abi.EncodePropertyPath(parts)
	v, st := Out1(func(d, s uint32) uint32 { return ProxyGetProperty(Addr(path), uint32(len(path)), d, s) })
	runtime.KeepAlive(path)
	return v, st
}
