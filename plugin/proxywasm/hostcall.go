package proxywasm

import (
	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/proxywasm/internal/bridge"
	"github.com/chimehq/chime/plugin/proxywasm/internal/hostcall"
)

// Configuration.

// GetVMConfiguration returns the VM configuration; call it in OnVMStart.
func GetVMConfiguration() ([]byte, error) {
	return hostcall.GetBuffer(abi.BufferVMConfiguration, 0, hostcall.WholeBuffer)
}

// GetPluginConfiguration returns the plugin configuration; call it in
// OnPluginStart.
func GetPluginConfiguration() ([]byte, error) {
	return hostcall.GetBuffer(abi.BufferPluginConfiguration, 0, hostcall.WholeBuffer)
}

// Request headers. The host lends them to the guest during the request
// headers callback (and while it pauses there) and in OnHttpStreamDone.

// GetHttpRequestHeaders returns all request headers, pseudo-headers included.
func GetHttpRequestHeaders() ([][2]string, error) { return hostcall.GetMap(abi.MapHttpRequestHeaders) }

// GetHttpRequestHeader returns one request header; ErrNotFound if absent.
func GetHttpRequestHeader(key string) (string, error) {
	return hostcall.GetMapValue(abi.MapHttpRequestHeaders, key)
}

// ReplaceHttpRequestHeader sets a request header, adding it if absent.
func ReplaceHttpRequestHeader(key, value string) error {
	return hostcall.ReplaceMapValue(abi.MapHttpRequestHeaders, key, value)
}

// AddHttpRequestHeader appends a request header value.
func AddHttpRequestHeader(key, value string) error {
	return hostcall.AddMapValue(abi.MapHttpRequestHeaders, key, value)
}

// RemoveHttpRequestHeader removes a request header (absent is not an error).
func RemoveHttpRequestHeader(key string) error {
	return hostcall.RemoveMapValue(abi.MapHttpRequestHeaders, key)
}

// Response headers.

// GetHttpResponseHeaders returns all response headers, :status included.
func GetHttpResponseHeaders() ([][2]string, error) {
	return hostcall.GetMap(abi.MapHttpResponseHeaders)
}

// GetHttpResponseHeader returns one response header; ErrNotFound if absent.
func GetHttpResponseHeader(key string) (string, error) {
	return hostcall.GetMapValue(abi.MapHttpResponseHeaders, key)
}

// ReplaceHttpResponseHeader sets a response header, adding it if absent.
func ReplaceHttpResponseHeader(key, value string) error {
	return hostcall.ReplaceMapValue(abi.MapHttpResponseHeaders, key, value)
}

// AddHttpResponseHeader appends a response header value.
func AddHttpResponseHeader(key, value string) error {
	return hostcall.AddMapValue(abi.MapHttpResponseHeaders, key, value)
}

// RemoveHttpResponseHeader removes a response header.
func RemoveHttpResponseHeader(key string) error {
	return hostcall.RemoveMapValue(abi.MapHttpResponseHeaders, key)
}

// Bodies.

// GetHttpRequestBody returns up to maxSize bytes of the request body from
// start. In OnHttpRequestBody the body holds what the host has buffered.
func GetHttpRequestBody(start, maxSize int) ([]byte, error) {
	return hostcall.GetBuffer(abi.BufferHttpRequestBody, start, maxSize)
}

// BodyBuffer returns an empty buffer with room for n bytes, reused from
// RecycleBuffer when one fits, to build a large body in.
func BodyBuffer(n int) []byte { return bridge.Spare(n) }

// RecycleBuffer hands back a buffer that GetHttpRequestBody (or
// another Get*) or BodyBuffer returned, for a later body to reuse. The
// caller must keep no reference to it. Never recycling is always safe.
func RecycleBuffer(b []byte) { bridge.Recycle(b) }

// ReplaceHttpRequestBody replaces the whole request body.
func ReplaceHttpRequestBody(data []byte) error {
	return hostcall.ReplaceBuffer(abi.BufferHttpRequestBody, data)
}

// GetHttpResponseBody returns up to maxSize bytes of the response body.
func GetHttpResponseBody(start, maxSize int) ([]byte, error) {
	return hostcall.GetBuffer(abi.BufferHttpResponseBody, start, maxSize)
}

// ReplaceHttpResponseBody replaces the whole response body.
func ReplaceHttpResponseBody(data []byte) error {
	return hostcall.ReplaceBuffer(abi.BufferHttpResponseBody, data)
}

// HTTP call responses; call these inside an HttpCallCallback.

// GetHttpCallResponseHeaders returns the headers of the HTTP call response
// being delivered.
func GetHttpCallResponseHeaders() ([][2]string, error) {
	return hostcall.GetMap(abi.MapHttpCallResponseHeaders)
}

// GetHttpCallResponseBody returns up to maxSize bytes of the HTTP call
// response body.
func GetHttpCallResponseBody(start, maxSize int) ([]byte, error) {
	return hostcall.GetBuffer(abi.BufferHttpCallResponseBody, start, maxSize)
}

// Stream control.

// SendHttpResponse answers the stream locally with statusCode, headers and
// body instead of (or before) the upstream's response. grpcStatus is -1 for
// non-gRPC responses.
func SendHttpResponse(statusCode uint32, headers [][2]string, body []byte, grpcStatus int32) error {
	return hostcall.SendLocalResponse(statusCode, headers, body, grpcStatus)
}

// ResumeHttpRequest resumes a request paused by ActionPause.
func ResumeHttpRequest() error { return hostcall.ContinueStream(abi.StreamHttpRequest) }

// ResumeHttpResponse resumes a response paused by ActionPause.
func ResumeHttpResponse() error { return hostcall.ContinueStream(abi.StreamHttpResponse) }

// PluginDone finishes a teardown the plugin deferred by returning false
// from OnPluginDone (proxy_done); the host then deletes the plugin
// context. ErrNotFound when none is pending.
func PluginDone() error { return hostcall.Done() }

// SetTickPeriodMilliSeconds makes the host call OnTick every period; 0 stops it.
func SetTickPeriodMilliSeconds(period uint32) error { return hostcall.SetTickPeriod(period) }

// GetProperty reads a host property, e.g. []string{"request", "id"}.
func GetProperty(path []string) ([]byte, error) { return hostcall.GetProperty(path) }

// GetSharedData returns the value stored under key, shared by every VM of
// the same vm_id (all workers), and its CAS token; ErrNotFound when unset.
func GetSharedData(key string) (value []byte, cas uint32, err error) {
	return hostcall.GetSharedData(key)
}

// SetSharedData stores value under key for every VM of the same vm_id. A
// non-zero cas must match the token GetSharedData returned, or
// ErrCasMismatch tells the caller another VM wrote first.
func SetSharedData(key string, value []byte, cas uint32) error {
	return hostcall.SetSharedData(key, value, cas)
}

// CallForeignFunction calls a host extension function by name (Envoy's
// clear_route_cache, compress, …); an unknown name is ErrNotFound.
func CallForeignFunction(name string, args []byte) ([]byte, error) {
	return hostcall.CallForeignFunction(name, args)
}
