// Package bridge is the seam between the proxywasm guest API and whatever
// host runs it (docs/architecture.md: the filter is a proxy-wasm v0.2.1 guest).
// Guest→host calls go through the Host interface (implemented with
// //go:wasmimport on wasip1, and by proxytest's in-memory host natively);
// host→guest callbacks go through the Guest interface (called by
// //go:wasmexport shims on wasip1, and by proxytest natively). Keeping
// both behind interfaces lets the dispatch logic be unit-tested without a
// wasm runtime. The ABI's numbers and encodings come from the shared
// catalogue, internal/proxywasmabi.
package bridge

import abi "github.com/chimehq/chime/internal/proxywasmabi"

// Host is every proxy_* host function the guest uses, at the level of byte
// slices: header maps travel in the serialized pairs format, property paths
// NUL-separated.
type Host interface {
	Log(level abi.LogLevel, msg string) abi.Status
	GetLogLevel() (abi.LogLevel, abi.Status)
	GetProperty(path []byte) ([]byte, abi.Status)
	SetProperty(path, value []byte) abi.Status
	GetBufferBytes(buffer abi.BufferType, start, maxSize uint32) ([]byte, abi.Status)
	GetBufferStatus(buffer abi.BufferType) (size uint32, status abi.Status)
	SetBufferBytes(buffer abi.BufferType, start, size uint32, value []byte) abi.Status
	GetHeaderMapPairs(mapType abi.MapType) ([]byte, abi.Status)
	SetHeaderMapPairs(mapType abi.MapType, pairs []byte) abi.Status
	GetHeaderMapValue(mapType abi.MapType, key string) ([]byte, abi.Status)
	ReplaceHeaderMapValue(mapType abi.MapType, key, value string) abi.Status
	RemoveHeaderMapValue(mapType abi.MapType, key string) abi.Status
	AddHeaderMapValue(mapType abi.MapType, key, value string) abi.Status
	ContinueStream(stream abi.StreamType) abi.Status
	CloseStream(stream abi.StreamType) abi.Status
	SendLocalResponse(statusCode uint32, details string, body, headers []byte, grpcStatus int32) abi.Status
	HttpCall(upstream string, headers, body, trailers []byte, timeoutMs uint32) (calloutID uint32, status abi.Status)
	SetTickPeriodMilliseconds(ms uint32) abi.Status
	SetSharedData(key string, value []byte, cas uint32) abi.Status
	GetSharedData(key string) (value []byte, cas uint32, status abi.Status)
	RegisterSharedQueue(name string) (uint32, abi.Status)
	ResolveSharedQueue(vmID, name string) (uint32, abi.Status)
	EnqueueSharedQueue(queueID uint32, value []byte) abi.Status
	DequeueSharedQueue(queueID uint32) ([]byte, abi.Status)
	DefineMetric(metricType abi.MetricType, name string) (uint32, abi.Status)
	IncrementMetric(metricID uint32, delta int64) abi.Status
	RecordMetric(metricID uint32, value uint64) abi.Status
	GetMetric(metricID uint32) (uint64, abi.Status)
	SetEffectiveContext(contextID uint32) abi.Status
	Done() abi.Status
	CallForeignFunction(name string, args []byte) ([]byte, abi.Status)
}

// Guest is every proxy_on_* callback, in Go types. Booleans are the ABI's
// i32 bools.
type Guest interface {
	OnContextCreate(contextID, parentID uint32)
	OnVMStart(rootID, vmConfigurationSize uint32) bool
	OnConfigure(rootID, pluginConfigurationSize uint32) bool
	OnRequestHeaders(contextID, numHeaders uint32, endOfStream bool) abi.Action
	OnRequestBody(contextID, bodySize uint32, endOfStream bool) abi.Action
	OnRequestTrailers(contextID, numTrailers uint32) abi.Action
	OnResponseHeaders(contextID, numHeaders uint32, endOfStream bool) abi.Action
	OnResponseBody(contextID, bodySize uint32, endOfStream bool) abi.Action
	OnResponseTrailers(contextID, numTrailers uint32) abi.Action
	OnHttpCallResponse(rootID, calloutID, numHeaders, bodySize, numTrailers uint32)
	OnTick(rootID uint32)
	OnQueueReady(rootID, queueID uint32)
	OnForeignFunction(rootID, functionID, argumentsSize uint32)
	OnLog(contextID uint32)
	OnDone(contextID uint32) bool
	OnDelete(contextID uint32)
}

var (
	host  Host
	guest Guest
)

// SetHost installs the host implementation (wasip1 imports, or a test fake).
func SetHost(h Host) { host = h }

// CurrentHost returns the installed host. Natively, without proxytest, there
// is none: calling into it is a programming error, reported clearly.
func CurrentHost() Host {
	if host == nil {
		panic("proxywasm: no host installed (outside wasm, use proxytest.NewHost)")
	}
	return host
}

// SetGuest installs the callback dispatcher (done by package proxywasm).
func SetGuest(g Guest) { guest = g }

// CurrentGuest returns the callback dispatcher.
func CurrentGuest() Guest { return guest }
