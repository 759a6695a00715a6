package wasmhost

// status is proxy_status_t (proxy-wasm ABI v0.2.1; numbering from
// proxy-wasm-cpp-host's WasmResult, which Envoy returns verbatim).
type status uint32

const (
	statusOK                   status = 0
	statusNotFound             status = 1
	statusBadArgument          status = 2
	statusSerializationFailure status = 3
	statusParseFailure         status = 4
	statusInvalidMemoryAccess  status = 6
	statusEmpty                status = 7
	statusCasMismatch          status = 8
	statusInternalFailure      status = 10
	statusBrokenConnection     status = 11
	statusUnimplemented        status = 12
)

// Buffer types (proxy_buffer_type_t).
const (
	bufHTTPRequestBody     = 0
	bufHTTPResponseBody    = 1
	bufDownstreamData      = 2
	bufUpstreamData        = 3
	bufHTTPCallResponse    = 4
	bufGrpcReceive         = 5
	bufVMConfiguration     = 6
	bufPluginConfiguration = 7
	bufCallData            = 8
	bufMax                 = 8
)

// Header map types (proxy_map_type_t).
const (
	mapRequestHeaders       = 0
	mapRequestTrailers      = 1
	mapResponseHeaders      = 2
	mapResponseTrailers     = 3
	mapGrpcInitialMetadata  = 4
	mapGrpcTrailingMetadata = 5
	mapHTTPCallHeaders      = 6
	mapHTTPCallTrailers     = 7
	mapMax                  = 7
)

// Stream types (proxy_stream_type_t).
const (
	streamRequest    = 0
	streamResponse   = 1
	streamDownstream = 2
	streamUpstream   = 3
)

// WASI errno values used by the host functions.
const (
	errnoSuccess     = 0
	errnoBadf        = 8
	errnoFault       = 21
	errnoInval       = 28
	errnoNoent       = 44
	errnoNosys       = 52
	errnoNotdir      = 20
	errnoNotsup      = 58
	errnoNotcapable  = 76
	wasiMaxRandomGet = 64 * 1024
)

// Metric ids encode their type in the low two bits, as Envoy does
// (kMetricTypeMask / kMetricIdIncrement in wasm.h).
const (
	metricTypeMask    = 0x3
	metricIDIncrement = 0x4
)

// Callout ids: HTTP calls are 0 mod 4 (kCalloutIncrement, CalloutType::HttpCall).
const calloutIncrement = 4

// Envoy's response_code_details for a stream failed by a VM fault and for
// proxy_close_stream.
const (
	failStreamDetails  = "wasm_fail_stream"
	closeStreamDetails = "wasm_close_stream"
)
