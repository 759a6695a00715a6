package wasmhost

// Host-side constants of Envoy's implementation. The ABI's own numbers
// (statuses, buffer/map/stream types) come from internal/proxywasmabi.

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
