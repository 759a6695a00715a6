//go:build wasip1

package bridge

import (
	"unsafe"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

// memory keeps buffers given to the host by proxy_on_memory_allocate alive
// until a hostcall's result is read back.
var memory Allocations

func init() { SetHost(wasmHost{}) }

func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
func strPtr(s string) unsafe.Pointer   { return unsafe.Pointer(unsafe.StringData(s)) }

// result reads back a buffer the host filled through proxy_on_memory_allocate.
func result(ptr, size, status uint32) ([]byte, abi.Status) {
	if st := abi.Status(status); st != abi.StatusOK {
		return nil, st
	}
	if size == 0 {
		if ptr != 0 {
			memory.Take(uintptr(ptr), 0)
		}
		return nil, abi.StatusOK
	}
	b, ok := memory.Take(uintptr(ptr), size)
	if !ok {
		return nil, abi.StatusInvalidMemoryAccess
	}
	return b, abi.StatusOK
}

// Out-parameters. A pointer passed to a wasmimport escapes, so a local
// the host writes its answer into is a heap allocation per call: with
// every hostcall it was a dozen allocations a request. Calls take their
// out-parameters from this ring of 4-word slots instead. The guest runs
// one call at a time, and a call made while another is in the host (the
// host's proxy_on_memory_allocate, or a callback the host runs inline)
// takes a later slot, so nesting up to 16 deep never shares one.
var outSlots [64]uint32

var outNext uint32

func outSlot() *[4]uint32 {
	i := outNext
	outNext = (i + 4) & 63
	return (*[4]uint32)(outSlots[i : i+4])
}

// wasmHost implements Host with the proxy_* imports of ABI v0.2.1.
type wasmHost struct{}

func (wasmHost) Log(level abi.LogLevel, msg string) abi.Status {
	return abi.Status(proxy_log(uint32(level), strPtr(msg), uint32(len(msg))))
}

func (wasmHost) GetLogLevel() (abi.LogLevel, abi.Status) {
	o := outSlot()
	st := proxy_get_log_level(&o[0])
	return abi.LogLevel(o[0]), abi.Status(st)
}

func (wasmHost) GetProperty(path []byte) ([]byte, abi.Status) {
	o := outSlot()
	st := proxy_get_property(bytesPtr(path), uint32(len(path)), &o[0], &o[1])
	return result(o[0], o[1], st)
}

func (wasmHost) SetProperty(path, value []byte) abi.Status {
	return abi.Status(proxy_set_property(bytesPtr(path), uint32(len(path)), bytesPtr(value), uint32(len(value))))
}

func (wasmHost) GetBufferBytes(buffer abi.BufferType, start, maxSize uint32) ([]byte, abi.Status) {
	o := outSlot()
	st := proxy_get_buffer_bytes(uint32(buffer), start, maxSize, &o[0], &o[1])
	return result(o[0], o[1], st)
}

func (wasmHost) GetBufferStatus(buffer abi.BufferType) (uint32, abi.Status) {
	o := outSlot()
	st := proxy_get_buffer_status(uint32(buffer), &o[0], &o[1])
	return o[0], abi.Status(st)
}

func (wasmHost) SetBufferBytes(buffer abi.BufferType, start, size uint32, value []byte) abi.Status {
	return abi.Status(proxy_set_buffer_bytes(uint32(buffer), start, size, bytesPtr(value), uint32(len(value))))
}

func (wasmHost) GetHeaderMapPairs(mapType abi.MapType) ([]byte, abi.Status) {
	o := outSlot()
	st := proxy_get_header_map_pairs(uint32(mapType), &o[0], &o[1])
	return result(o[0], o[1], st)
}

func (wasmHost) SetHeaderMapPairs(mapType abi.MapType, pairs []byte) abi.Status {
	return abi.Status(proxy_set_header_map_pairs(uint32(mapType), bytesPtr(pairs), uint32(len(pairs))))
}

func (wasmHost) GetHeaderMapValue(mapType abi.MapType, key string) ([]byte, abi.Status) {
	o := outSlot()
	st := proxy_get_header_map_value(uint32(mapType), strPtr(key), uint32(len(key)), &o[0], &o[1])
	return result(o[0], o[1], st)
}

func (wasmHost) ReplaceHeaderMapValue(mapType abi.MapType, key, value string) abi.Status {
	return abi.Status(proxy_replace_header_map_value(uint32(mapType), strPtr(key), uint32(len(key)), strPtr(value), uint32(len(value))))
}

func (wasmHost) RemoveHeaderMapValue(mapType abi.MapType, key string) abi.Status {
	return abi.Status(proxy_remove_header_map_value(uint32(mapType), strPtr(key), uint32(len(key))))
}

func (wasmHost) AddHeaderMapValue(mapType abi.MapType, key, value string) abi.Status {
	return abi.Status(proxy_add_header_map_value(uint32(mapType), strPtr(key), uint32(len(key)), strPtr(value), uint32(len(value))))
}

func (wasmHost) ContinueStream(stream abi.StreamType) abi.Status {
	return abi.Status(proxy_continue_stream(uint32(stream)))
}

func (wasmHost) CloseStream(stream abi.StreamType) abi.Status {
	return abi.Status(proxy_close_stream(uint32(stream)))
}

func (wasmHost) SendLocalResponse(statusCode uint32, details string, body, headers []byte, grpcStatus int32) abi.Status {
	return abi.Status(proxy_send_local_response(statusCode, strPtr(details), uint32(len(details)),
		bytesPtr(body), uint32(len(body)), bytesPtr(headers), uint32(len(headers)), grpcStatus))
}

func (wasmHost) HttpCall(upstream string, headers, body, trailers []byte, timeoutMs uint32) (uint32, abi.Status) {
	o := outSlot()
	st := proxy_http_call(strPtr(upstream), uint32(len(upstream)), bytesPtr(headers), uint32(len(headers)),
		bytesPtr(body), uint32(len(body)), bytesPtr(trailers), uint32(len(trailers)), timeoutMs, &o[0])
	return o[0], abi.Status(st)
}

func (wasmHost) SetTickPeriodMilliseconds(ms uint32) abi.Status {
	return abi.Status(proxy_set_tick_period_milliseconds(ms))
}

func (wasmHost) SetSharedData(key string, value []byte, cas uint32) abi.Status {
	return abi.Status(proxy_set_shared_data(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), cas))
}

func (wasmHost) GetSharedData(key string) ([]byte, uint32, abi.Status) {
	o := outSlot()
	st := proxy_get_shared_data(strPtr(key), uint32(len(key)), &o[0], &o[1], &o[2])
	v, status := result(o[0], o[1], st)
	return v, o[2], status
}

func (wasmHost) RegisterSharedQueue(name string) (uint32, abi.Status) {
	o := outSlot()
	st := proxy_register_shared_queue(strPtr(name), uint32(len(name)), &o[0])
	return o[0], abi.Status(st)
}

func (wasmHost) ResolveSharedQueue(vmID, name string) (uint32, abi.Status) {
	o := outSlot()
	st := proxy_resolve_shared_queue(strPtr(vmID), uint32(len(vmID)), strPtr(name), uint32(len(name)), &o[0])
	return o[0], abi.Status(st)
}

func (wasmHost) EnqueueSharedQueue(queueID uint32, value []byte) abi.Status {
	return abi.Status(proxy_enqueue_shared_queue(queueID, bytesPtr(value), uint32(len(value))))
}

func (wasmHost) DequeueSharedQueue(queueID uint32) ([]byte, abi.Status) {
	o := outSlot()
	st := proxy_dequeue_shared_queue(queueID, &o[0], &o[1])
	return result(o[0], o[1], st)
}

func (wasmHost) DefineMetric(metricType abi.MetricType, name string) (uint32, abi.Status) {
	o := outSlot()
	st := proxy_define_metric(uint32(metricType), strPtr(name), uint32(len(name)), &o[0])
	return o[0], abi.Status(st)
}

func (wasmHost) IncrementMetric(id uint32, delta int64) abi.Status {
	return abi.Status(proxy_increment_metric(id, delta))
}

func (wasmHost) RecordMetric(id uint32, value uint64) abi.Status {
	return abi.Status(proxy_record_metric(id, value))
}

func (wasmHost) GetMetric(id uint32) (uint64, abi.Status) {
	var v uint64
	st := proxy_get_metric(id, &v)
	return v, abi.Status(st)
}

func (wasmHost) SetEffectiveContext(id uint32) abi.Status {
	return abi.Status(proxy_set_effective_context(id))
}

func (wasmHost) Done() abi.Status { return abi.Status(proxy_done()) }

func (wasmHost) CallForeignFunction(name string, args []byte) ([]byte, abi.Status) {
	o := outSlot()
	st := proxy_call_foreign_function(strPtr(name), uint32(len(name)), bytesPtr(args), uint32(len(args)), &o[0], &o[1])
	return result(o[0], o[1], st)
}

// Raw ABI v0.2.1 imports. Pointers are guest addresses; out-parameters
// receive addresses of buffers the host got from proxy_on_memory_allocate.

//go:wasmimport env proxy_log
func proxy_log(level uint32, msg unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_log_level
func proxy_get_log_level(level *uint32) uint32

//go:wasmimport env proxy_get_property
func proxy_get_property(path unsafe.Pointer, pathSize uint32, data, size *uint32) uint32

//go:wasmimport env proxy_set_property
func proxy_set_property(path unsafe.Pointer, pathSize uint32, value unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_get_buffer_bytes
func proxy_get_buffer_bytes(buffer, start, maxSize uint32, data, size *uint32) uint32

//go:wasmimport env proxy_get_buffer_status
func proxy_get_buffer_status(buffer uint32, size, flags *uint32) uint32

//go:wasmimport env proxy_set_buffer_bytes
func proxy_set_buffer_bytes(buffer, start, size uint32, value unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_get_header_map_pairs
func proxy_get_header_map_pairs(mapType uint32, data, size *uint32) uint32

//go:wasmimport env proxy_set_header_map_pairs
func proxy_set_header_map_pairs(mapType uint32, pairs unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_get_header_map_value
func proxy_get_header_map_value(mapType uint32, key unsafe.Pointer, keySize uint32, data, size *uint32) uint32

//go:wasmimport env proxy_replace_header_map_value
func proxy_replace_header_map_value(mapType uint32, key unsafe.Pointer, keySize uint32, value unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_remove_header_map_value
func proxy_remove_header_map_value(mapType uint32, key unsafe.Pointer, keySize uint32) uint32

//go:wasmimport env proxy_add_header_map_value
func proxy_add_header_map_value(mapType uint32, key unsafe.Pointer, keySize uint32, value unsafe.Pointer, valueSize uint32) uint32

//go:wasmimport env proxy_continue_stream
func proxy_continue_stream(stream uint32) uint32

//go:wasmimport env proxy_close_stream
func proxy_close_stream(stream uint32) uint32

//go:wasmimport env proxy_send_local_response
func proxy_send_local_response(statusCode uint32, details unsafe.Pointer, detailsSize uint32,
	body unsafe.Pointer, bodySize uint32, headers unsafe.Pointer, headersSize uint32, grpcStatus int32) uint32

//go:wasmimport env proxy_http_call
func proxy_http_call(upstream unsafe.Pointer, upstreamSize uint32, headers unsafe.Pointer, headersSize uint32,
	body unsafe.Pointer, bodySize uint32, trailers unsafe.Pointer, trailersSize uint32, timeoutMs uint32, calloutID *uint32) uint32

//go:wasmimport env proxy_set_tick_period_milliseconds
func proxy_set_tick_period_milliseconds(ms uint32) uint32

//go:wasmimport env proxy_set_shared_data
func proxy_set_shared_data(key unsafe.Pointer, keySize uint32, value unsafe.Pointer, valueSize uint32, cas uint32) uint32

//go:wasmimport env proxy_get_shared_data
func proxy_get_shared_data(key unsafe.Pointer, keySize uint32, data, size, cas *uint32) uint32

//go:wasmimport env proxy_register_shared_queue
func proxy_register_shared_queue(name unsafe.Pointer, nameSize uint32, queueID *uint32) uint32

//go:wasmimport env proxy_resolve_shared_queue
func proxy_resolve_shared_queue(vmID unsafe.Pointer, vmIDSize uint32, name unsafe.Pointer, nameSize uint32, queueID *uint32) uint32

//go:wasmimport env proxy_enqueue_shared_queue
func proxy_enqueue_shared_queue(queueID uint32, value unsafe.Pointer, size uint32) uint32

//go:wasmimport env proxy_dequeue_shared_queue
func proxy_dequeue_shared_queue(queueID uint32, data, size *uint32) uint32

//go:wasmimport env proxy_define_metric
func proxy_define_metric(metricType uint32, name unsafe.Pointer, nameSize uint32, metricID *uint32) uint32

//go:wasmimport env proxy_increment_metric
func proxy_increment_metric(metricID uint32, delta int64) uint32

//go:wasmimport env proxy_record_metric
func proxy_record_metric(metricID uint32, value uint64) uint32

//go:wasmimport env proxy_get_metric
func proxy_get_metric(metricID uint32, value *uint64) uint32

//go:wasmimport env proxy_set_effective_context
func proxy_set_effective_context(contextID uint32) uint32

//go:wasmimport env proxy_done
func proxy_done() uint32

//go:wasmimport env proxy_call_foreign_function
func proxy_call_foreign_function(name unsafe.Pointer, nameSize uint32, args unsafe.Pointer, argsSize uint32, data, size *uint32) uint32
