// Package proxywasmabi is chime's one catalogue of the proxy-wasm ABI
// v0.2.x as Envoy implements it (docs/local-runtime.md): status codes, the buffer, map,
// stream, metric and log-level enums, the header-map (pairs) codec, the
// signatures of every host function and guest callback, and the WASI
// functions each Envoy release provides.
//
// Both sides import it: the guest layer (plugin/, built for GOOS=wasip1)
// and the local runtime (envoy/). It therefore depends on nothing but the
// standard library's pure packages, and is free of OS and network code.
package proxywasmabi

// Status is proxy_status_t, what every host function returns (numbering
// from proxy-wasm-cpp-host's WasmResult, which Envoy returns verbatim).
type Status uint32

// Statuses of ABI v0.2.1. 5 and 9 are unused by the ABI.
const (
	StatusOK                   Status = 0
	StatusNotFound             Status = 1
	StatusBadArgument          Status = 2
	StatusSerializationFailure Status = 3
	StatusParseFailure         Status = 4
	StatusInvalidMemoryAccess  Status = 6
	StatusEmpty                Status = 7
	StatusCasMismatch          Status = 8
	StatusInternalFailure      Status = 10
	// StatusBrokenConnection is what proxy_get_status reports for an
	// HTTP call that was reset.
	StatusBrokenConnection Status = 11
	StatusUnimplemented    Status = 12
)

// BufferType is proxy_buffer_type_t.
type BufferType uint32

// Buffer types.
const (
	BufferHttpRequestBody          BufferType = 0
	BufferHttpResponseBody         BufferType = 1
	BufferDownstreamData           BufferType = 2
	BufferUpstreamData             BufferType = 3
	BufferHttpCallResponseBody     BufferType = 4
	BufferGrpcReceiveBuffer        BufferType = 5
	BufferVMConfiguration          BufferType = 6
	BufferPluginConfiguration      BufferType = 7
	BufferForeignFunctionArguments BufferType = 8

	// BufferTypeMax is the largest valid buffer type; hosts answer
	// BAD_ARGUMENT above it.
	BufferTypeMax = BufferForeignFunctionArguments
)

// MapType is proxy_map_type_t.
type MapType uint32

// Header map types.
const (
	MapHttpRequestHeaders       MapType = 0
	MapHttpRequestTrailers      MapType = 1
	MapHttpResponseHeaders      MapType = 2
	MapHttpResponseTrailers     MapType = 3
	MapGrpcInitialMetadata      MapType = 4
	MapGrpcTrailingMetadata     MapType = 5
	MapHttpCallResponseHeaders  MapType = 6
	MapHttpCallResponseTrailers MapType = 7

	// MapTypeMax is the largest valid map type; hosts answer BAD_ARGUMENT
	// above it.
	MapTypeMax = MapHttpCallResponseTrailers
)

// StreamType is proxy_stream_type_t (proxy_continue_stream,
// proxy_close_stream).
type StreamType uint32

// Stream types.
const (
	StreamHttpRequest  StreamType = 0
	StreamHttpResponse StreamType = 1
	StreamDownstream   StreamType = 2
	StreamUpstream     StreamType = 3
)

// PeerType is proxy_peer_type_t, the closing side passed to
// proxy_on_downstream_connection_close and proxy_on_upstream_connection_close.
type PeerType uint32

// Peer types.
const (
	PeerUnknown PeerType = 0
	PeerLocal   PeerType = 1
	PeerRemote  PeerType = 2
)

// MetricType is proxy_metric_type_t.
type MetricType uint32

// Metric types.
const (
	MetricCounter   MetricType = 0
	MetricGauge     MetricType = 1
	MetricHistogram MetricType = 2
)

// LogLevel is proxy_log_level_t.
type LogLevel uint32

// Log levels, lowest first.
const (
	LogLevelTrace    LogLevel = 0
	LogLevelDebug    LogLevel = 1
	LogLevelInfo     LogLevel = 2
	LogLevelWarn     LogLevel = 3
	LogLevelError    LogLevel = 4
	LogLevelCritical LogLevel = 5
)

// Action is proxy_action_t, what an HTTP stream callback returns. Envoy
// reads other values with ABI 0.2.0's filter-status meaning (2 continues
// and ends the stream, larger values stop).
type Action uint32

// Actions.
const (
	ActionContinue Action = 0
	ActionPause    Action = 1
)
