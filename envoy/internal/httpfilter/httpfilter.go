// Package httpfilter is the contract between the HTTP connection manager
// (envoy/internal/proxy) and the HTTP filters it runs (the wasm filter in
// envoy/internal/wasmhost). It mirrors Envoy's StreamDecoderFilter /
// StreamEncoderFilter model closely enough that proxy-wasm semantics
// (docs/local-runtime.md) can be expressed exactly:
//
//   - Filter methods are called from the stream's own goroutine, one at a
//     time, in Envoy's order.
//   - Callbacks are signals, never re-entrant calls: ContinueDecoding,
//     ContinueEncoding, SendLocalReply and ResetStream may be called from
//     any goroutine (an http_call response, a tick) and only enqueue work
//     that the stream goroutine performs after the current filter call has
//     returned. This is how Envoy defers a wasm send_local_response until
//     the VM call returns (addAfterVmCallAction), and it keeps a VM lock from
//     ever being taken twice.
package httpfilter

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

// Header is one header entry. Keys are lower-case; HTTP/2-style
// pseudo-headers (":method", ":path", ":authority", ":scheme", ":status")
// come first, as Envoy presents them to proxy-wasm.
type Header struct{ Key, Value string }

// Headers is an ordered header map (proxy-wasm get_header_map_pairs order).
type Headers []Header

// Get returns the first value for key (case-insensitive) and whether it exists.
func (h Headers) Get(key string) (string, bool) {
	key = strings.ToLower(key)
	for _, e := range h {
		if e.Key == key {
			return e.Value, true
		}
	}
	return "", false
}

// Set replaces every value of key with one value, appending it if absent.
func (h *Headers) Set(key, value string) {
	key = strings.ToLower(key)
	h.Del(key)
	*h = append(*h, Header{key, value})
}

// Add appends a value for key, keeping existing ones.
func (h *Headers) Add(key, value string) { *h = append(*h, Header{strings.ToLower(key), value}) }

// Del removes every value of key.
func (h *Headers) Del(key string) {
	key = strings.ToLower(key)
	out := (*h)[:0]
	for _, e := range *h {
		if e.Key != key {
			out = append(out, e)
		}
	}
	*h = out
}

// Buffer is a stream body buffer: the whole body buffered so far for the
// current filter (proxy-wasm body_size is len(Bytes)). Filters may replace
// it in place; the connection manager forwards whatever it holds when
// iteration continues. After DataStopAndBuffer the *Buffer last passed
// stays live until iteration continues: a filter may still edit its Bytes
// from a background callback (a wasm http_call response doing
// proxy_set_buffer_bytes) before calling Continue*, so the manager must
// forward that Buffer's Bytes, not a copy taken when the call returned.
type Buffer struct{ Bytes []byte }

// HeadersStatus is what a filter returns from a headers callback.
type HeadersStatus int

const (
	// HeadersContinue passes the headers to the next filter.
	HeadersContinue HeadersStatus = iota
	// HeadersStopAll is proxy-wasm's PAUSE from a headers callback. Envoy
	// maps it to StopAllIterationAndWatermark: neither headers nor data nor
	// trailers reach later filters, and data is not delivered to this filter
	// either, until Continue{De,En}coding is called. Body bytes that arrive
	// meanwhile are buffered (subject to the buffer limit).
	HeadersStopAll
	// HeadersStopIteration is Envoy's StopIteration (proxy-wasm PAUSE with
	// allow_on_headers_stop_iteration, docs/local-runtime.md): the headers stop at this
	// filter but body and trailers still reach it. DataContinue or
	// TrailersContinue from it, or Continue{De,En}coding, sends the headers
	// on, then what it buffered.
	HeadersStopIteration
)

// DataStatus is what a filter returns from a data callback.
type DataStatus int

const (
	// DataContinue passes the buffered body on and clears this filter's buffer.
	DataContinue DataStatus = iota
	// DataStopAndBuffer is proxy-wasm's PAUSE from a body callback: keep
	// buffering; the next data callback sees the whole buffered body. If the
	// buffer exceeds the limit, the request gets 413 and the response gets
	// 500 (headers not yet sent) or a reset (already sent).
	DataStopAndBuffer
	// DataStopNoBuffer stops iteration without buffering (Envoy's
	// StopIterationNoBuffer; used when a filter failed).
	DataStopNoBuffer
)

// TrailersStatus is what a filter returns from a trailers callback.
type TrailersStatus int

const (
	TrailersContinue TrailersStatus = iota
	TrailersStop
)

// Filter is one filter instance bound to one stream.
type Filter interface {
	// Decoder (request) side.
	DecodeHeaders(h *Headers, endStream bool) HeadersStatus
	DecodeData(body *Buffer, endStream bool) DataStatus
	DecodeTrailers(t *Headers) TrailersStatus
	// Encoder (response) side. For a local reply these run too (docs/local-runtime.md:
	// send_local_response goes through the encoder filters).
	EncodeHeaders(h *Headers, endStream bool) HeadersStatus
	EncodeData(body *Buffer, endStream bool) DataStatus
	EncodeTrailers(t *Headers) TrailersStatus
	// OnStreamComplete is called once when the stream has ended, whether
	// normally or by reset: it maps to proxy_on_log, then proxy_on_done,
	// then proxy_on_delete. After it returns, no other method is called;
	// callbacks obtained earlier become no-ops.
	OnStreamComplete()
}

// Callbacks is what a filter may ask of its stream. All methods are safe to
// call from any goroutine and none of them calls back into a Filter before
// returning.
type Callbacks interface {
	ContinueDecoding()
	ContinueEncoding()
	// SendLocalReply ends the decoder chain and answers the client with
	// status/body/headers, passing the reply through the encoder filters.
	// details is Envoy's response_code_details.
	SendLocalReply(status int, body []byte, headers Headers, details string)
	// ResetStream aborts the stream (the client sees a reset connection or
	// a truncated response).
	ResetStream()
	// ClearRouteCache makes the router re-match the route from the current
	// request headers (Envoy clears it when a filter edits request headers).
	ClearRouteCache()

	// Stream state, valid for the stream's lifetime. The pointers are the
	// live maps; nil until that part of the stream exists.
	RequestHeaders() *Headers
	RequestTrailers() *Headers
	ResponseHeaders() *Headers
	ResponseTrailers() *Headers
	Info() *StreamInfo
	// Context is cancelled when the stream ends (client gone, reset or done).
	Context() context.Context
}

// StreamInfo carries what proxy-wasm properties expose about a stream
// (docs/local-runtime.md: the common Envoy attribute paths).
type StreamInfo struct {
	ID              uint64
	Worker          int // worker index this stream's connection is bound to (VM affinity)
	StartTime       time.Time
	Protocol        string // "HTTP/1.1", "HTTP/2"
	SourceAddress   string // ip:port
	DestinationAddr string // local ip:port
	ListenerName    string
	RouteName       string
	RouteMatched    bool   // a route was picked (RouteName may still be "")
	RouteMetadata   []byte // the picked route's serialized Metadata (nil: none)
	ClusterName     string // upstream cluster chosen by the router ("" before)
	ResponseCode    int    // 0 until known
	ResponseDetails string
	RequestSize     int64  // body bytes received from the client
	ResponseSize    int64  // body bytes sent to the client
	ConnectionID    uint64 // downstream connection id (property connection.id); 0 = unknown
}

// Factory creates one Filter per stream. It is built once per filter entry
// in a listener's http_filters.
type Factory interface {
	NewFilter(cb Callbacks) (Filter, error)
	// Close releases VMs and timers.
	Close() error
}

// ClusterChecker may be implemented by an HTTPCaller so that
// proxy_http_call can refuse an unknown cluster synchronously with
// BAD_ARGUMENT, as Envoy does. Without it an unknown cluster surfaces later
// as a failed call (proxy_on_http_call_response with num_headers=0).
type ClusterChecker interface {
	HasCluster(name string) bool
}

// ErrUnknownCluster is returned by HTTPCaller for a cluster not in the config.
var ErrUnknownCluster = errors.New("unknown cluster")

// CallResponse is a completed out-of-band HTTP call.
type CallResponse struct {
	Headers  Headers // includes ":status"
	Body     []byte
	Trailers Headers
}

// HTTPCaller performs proxy_http_call dispatch to a configured cluster. The
// headers must contain ":method", ":path" and ":authority" (the caller
// validates that). It returns ErrUnknownCluster for a cluster not in the
// config, and any other error for connect failure, reset or timeout.
type HTTPCaller interface {
	Call(ctx context.Context, cluster string, headers Headers, body []byte, trailers Headers, timeout time.Duration) (*CallResponse, error)
}

// WasmConfig is one envoy.extensions.filters.http.wasm.v3.Wasm entry,
// already unwrapped from TypedStruct and StringValue/BytesValue.
type WasmConfig struct {
	FilterName          string // the http_filters[].name
	PluginName          string // config.name
	RootID              string // config.root_id
	VMID                string // config.vm_config.vm_id
	Runtime             string // config.vm_config.runtime (any name runs on wazero)
	CodePath            string // config.vm_config.code.local.filename
	CodeInline          []byte // config.vm_config.code.local.inline_bytes (or inline_string)
	VMConfiguration     []byte // config.vm_config.configuration
	PluginConfiguration []byte // config.configuration
	FailOpen            bool   // config.fail_open (or failure_policy FAIL_OPEN)
	// AllowOnHeadersStopIteration is config.allow_on_headers_stop_iteration:
	// PAUSE from a headers callback is StopIteration, not stop-all.
	AllowOnHeadersStopIteration bool
	EnvVars                     map[string]string
	ListenerName                string
}

// Metric kinds, as proxy_define_metric numbers them.
type MetricKind int

const (
	MetricCounter   = MetricKind(abi.MetricCounter)
	MetricGauge     = MetricKind(abi.MetricGauge)
	MetricHistogram = MetricKind(abi.MetricHistogram)
)

// Stats is the runtime's stat store, served by the admin endpoint
// /stats/prometheus.
type Stats interface {
	// Define returns a handle for a named metric, creating it if needed.
	Define(kind MetricKind, name string) Metric
}

// Metric is one counter, gauge or histogram.
type Metric interface {
	Add(delta int64) // counter/gauge increment (may be negative for gauges)
	Set(v int64)     // gauge set; histogram records v
	Value() int64    // counter/gauge current value; histogram: count
}

// Env is what the runtime gives a filter factory at build time.
type Env struct {
	Clusters    HTTPCaller
	Stats       Stats
	Logger      *slog.Logger
	Workers     int    // number of worker VMs to create (Envoy --concurrency)
	WASIProfile string // "envoy-1.38" (default), "envoy-1.39" or its alias "envoy-latest"
	CacheDir    string // on-disk compilation cache ("" = none)
	NodeID      string // bootstrap node.id (for the node property)
	NodeCluster string // bootstrap node.cluster
	// HoldUntilStarted keeps a factory's ticks and http_call dispatches
	// waiting until Starter.Start, which the runtime calls once every
	// listener is bound, as Envoy's workers only run after init (docs/local-runtime.md).
	HoldUntilStarted bool
	// VMScope, when set, lets the wasm filters built with it share VMs:
	// filters with the same vm_id, code and VM configuration (and the same
	// scope, i.e. the same server) run in one VM per worker, each with its
	// own root context, as in Envoy. Nil: every filter gets its own VMs.
	VMScope *VMScope
	// BackgroundWorkers builds the VMs of every worker but the first in the
	// background: the factory is ready once one VM runs, and a stream on a
	// worker whose VM is still being built waits for it. False: every
	// worker's VM is built before the factory returns.
	BackgroundWorkers bool
	// InterpretWhileCompiling starts a module that is not in the
	// compilation cache (CacheDir, or compiled earlier by this process) in
	// the interpreter and compiles it in the background, then moves every
	// worker to a compiled VM: a cold start then waits for the
	// interpreter, not the compiler. False: the factory compiles first.
	InterpretWhileCompiling bool
}

// VMScope is the identity within which wasm VMs are shared (one runtime).
type VMScope struct{ _ byte }

// Starter is a Factory with timers and callouts held until Start
// (Env.HoldUntilStarted).
type Starter interface {
	Start()
}
