// Package abi is the seam between the proxywasm guest API and whatever host
// runs it (SPEC §1: the filter is a proxy-wasm v0.2.1 guest). Guest→host
// calls go through the Host interface (implemented with //go:wasmimport on
// wasip1, and by proxytest's in-memory host natively); host→guest callbacks go
// through the Guest interface (called by //go:wasmexport shims on wasip1, and
// by proxytest natively). Keeping both behind interfaces lets the dispatch
// logic be unit-tested without a wasm runtime.
package abi

// Status values of proxy_status_t (ABI v0.2.1).
const (
	StatusOK                   uint32 = 0
	StatusNotFound             uint32 = 1
	StatusBadArgument          uint32 = 2
	StatusSerializationFailure uint32 = 3
	StatusParseFailure         uint32 = 4
	StatusInvalidMemoryAccess  uint32 = 6
	StatusEmpty                uint32 = 7
	StatusCasMismatch          uint32 = 8
	StatusInternalFailure      uint32 = 10
	StatusUnimplemented        uint32 = 12
)

// Buffer types (proxy_buffer_type_t).
const (
	BufferHttpRequestBody          uint32 = 0
	BufferHttpResponseBody         uint32 = 1
	BufferDownstreamData           uint32 = 2
	BufferUpstreamData             uint32 = 3
	BufferHttpCallResponseBody     uint32 = 4
	BufferGrpcCallMessage          uint32 = 5
	BufferVMConfiguration          uint32 = 6
	BufferPluginConfiguration      uint32 = 7
	BufferForeignFunctionArguments uint32 = 8
)

// Header map types (proxy_map_type_t).
const (
	MapHttpRequestHeaders       uint32 = 0
	MapHttpRequestTrailers      uint32 = 1
	MapHttpResponseHeaders      uint32 = 2
	MapHttpResponseTrailers     uint32 = 3
	MapGrpcInitialMetadata      uint32 = 4
	MapGrpcTrailingMetadata     uint32 = 5
	MapHttpCallResponseHeaders  uint32 = 6
	MapHttpCallResponseTrailers uint32 = 7
)

// Stream types (proxy_stream_type_t).
const (
	StreamHttpRequest  uint32 = 0
	StreamHttpResponse uint32 = 1
)

// Metric types (proxy_metric_type_t).
const (
	MetricCounter   uint32 = 0
	MetricGauge     uint32 = 1
	MetricHistogram uint32 = 2
)

// Host is every proxy_* host function the guest uses, at the level of byte
// slices: header maps travel in the serialized pairs format, property paths
// NUL-separated. Every method returns a proxy_status_t.
type Host interface {
	Log(level uint32, msg string) uint32
	GetLogLevel() (uint32, uint32)
	GetProperty(path []byte) ([]byte, uint32)
	SetProperty(path, value []byte) uint32
	GetBufferBytes(buffer, start, maxSize uint32) ([]byte, uint32)
	GetBufferStatus(buffer uint32) (size uint32, status uint32)
	SetBufferBytes(buffer, start, size uint32, value []byte) uint32
	GetHeaderMapPairs(mapType uint32) ([]byte, uint32)
	SetHeaderMapPairs(mapType uint32, pairs []byte) uint32
	GetHeaderMapValue(mapType uint32, key string) ([]byte, uint32)
	ReplaceHeaderMapValue(mapType uint32, key, value string) uint32
	RemoveHeaderMapValue(mapType uint32, key string) uint32
	AddHeaderMapValue(mapType uint32, key, value string) uint32
	ContinueStream(stream uint32) uint32
	CloseStream(stream uint32) uint32
	SendLocalResponse(statusCode uint32, details string, body, headers []byte, grpcStatus int32) uint32
	HttpCall(upstream string, headers, body, trailers []byte, timeoutMs uint32) (calloutID uint32, status uint32)
	SetTickPeriodMilliseconds(ms uint32) uint32
	SetSharedData(key string, value []byte, cas uint32) uint32
	GetSharedData(key string) (value []byte, cas uint32, status uint32)
	RegisterSharedQueue(name string) (uint32, uint32)
	ResolveSharedQueue(vmID, name string) (uint32, uint32)
	EnqueueSharedQueue(queueID uint32, value []byte) uint32
	DequeueSharedQueue(queueID uint32) ([]byte, uint32)
	DefineMetric(metricType uint32, name string) (uint32, uint32)
	IncrementMetric(metricID uint32, delta int64) uint32
	RecordMetric(metricID uint32, value uint64) uint32
	GetMetric(metricID uint32) (uint64, uint32)
	SetEffectiveContext(contextID uint32) uint32
	Done() uint32
	CallForeignFunction(name string, args []byte) ([]byte, uint32)
}

// Guest is every proxy_on_* callback, in Go types. Actions are
// proxy_action_t values; booleans are the ABI's i32 bools.
type Guest interface {
	OnContextCreate(contextID, parentID uint32)
	OnVMStart(rootID, vmConfigurationSize uint32) bool
	OnConfigure(rootID, pluginConfigurationSize uint32) bool
	OnRequestHeaders(contextID, numHeaders uint32, endOfStream bool) uint32
	OnRequestBody(contextID, bodySize uint32, endOfStream bool) uint32
	OnRequestTrailers(contextID, numTrailers uint32) uint32
	OnResponseHeaders(contextID, numHeaders uint32, endOfStream bool) uint32
	OnResponseBody(contextID, bodySize uint32, endOfStream bool) uint32
	OnResponseTrailers(contextID, numTrailers uint32) uint32
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
