package proxywasm

import (
	"fmt"
	"math"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/proxywasm/internal/bridge"
)

func host() bridge.Host { return bridge.CurrentHost() }

// wholeBuffer is the max_size used to read a buffer to its end. The host
// clamps it; MaxInt32 keeps hosts that add start+size in 32 bits safe.
const wholeBuffer = math.MaxInt32

// Configuration.

// GetVMConfiguration returns the VM configuration; call it in OnVMStart.
func GetVMConfiguration() ([]byte, error) {
	return getBuffer(abi.BufferVMConfiguration, 0, wholeBuffer)
}

// GetPluginConfiguration returns the plugin configuration; call it in
// OnPluginStart.
func GetPluginConfiguration() ([]byte, error) {
	return getBuffer(abi.BufferPluginConfiguration, 0, wholeBuffer)
}

// Header maps.

func getMap(mapType abi.MapType) ([][2]string, error) {
	buf, st := host().GetHeaderMapPairs(mapType)
	if err := statusErr(st); err != nil {
		return nil, err
	}
	pairs, err := abi.DecodePairs(buf)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSerializationFailure, err)
	}
	return pairs, nil
}

func setMap(mapType abi.MapType, pairs [][2]string) error {
	return statusErr(host().SetHeaderMapPairs(mapType, abi.EncodePairs(pairs)))
}

func getMapValue(mapType abi.MapType, key string) (string, error) {
	v, st := host().GetHeaderMapValue(mapType, key)
	if err := statusErr(st); err != nil {
		return "", err
	}
	return string(v), nil
}

// GetHttpRequestHeaders returns all request headers, pseudo-headers included.
func GetHttpRequestHeaders() ([][2]string, error) { return getMap(abi.MapHttpRequestHeaders) }

// ReplaceHttpRequestHeaders replaces all request headers.
func ReplaceHttpRequestHeaders(headers [][2]string) error {
	return setMap(abi.MapHttpRequestHeaders, headers)
}

// GetHttpRequestHeader returns one request header; ErrNotFound if absent.
func GetHttpRequestHeader(key string) (string, error) {
	return getMapValue(abi.MapHttpRequestHeaders, key)
}

// RemoveHttpRequestHeader removes a request header (absent is not an error).
func RemoveHttpRequestHeader(key string) error {
	return statusErr(host().RemoveHeaderMapValue(abi.MapHttpRequestHeaders, key))
}

// ReplaceHttpRequestHeader sets a request header, adding it if absent.
func ReplaceHttpRequestHeader(key, value string) error {
	return statusErr(host().ReplaceHeaderMapValue(abi.MapHttpRequestHeaders, key, value))
}

// AddHttpRequestHeader appends a request header value.
func AddHttpRequestHeader(key, value string) error {
	return statusErr(host().AddHeaderMapValue(abi.MapHttpRequestHeaders, key, value))
}

// GetHttpRequestTrailers returns all request trailers.
func GetHttpRequestTrailers() ([][2]string, error) { return getMap(abi.MapHttpRequestTrailers) }

// ReplaceHttpRequestTrailers replaces all request trailers.
func ReplaceHttpRequestTrailers(trailers [][2]string) error {
	return setMap(abi.MapHttpRequestTrailers, trailers)
}

// GetHttpRequestTrailer returns one request trailer; ErrNotFound if absent.
func GetHttpRequestTrailer(key string) (string, error) {
	return getMapValue(abi.MapHttpRequestTrailers, key)
}

// RemoveHttpRequestTrailer removes a request trailer.
func RemoveHttpRequestTrailer(key string) error {
	return statusErr(host().RemoveHeaderMapValue(abi.MapHttpRequestTrailers, key))
}

// ReplaceHttpRequestTrailer sets a request trailer.
func ReplaceHttpRequestTrailer(key, value string) error {
	return statusErr(host().ReplaceHeaderMapValue(abi.MapHttpRequestTrailers, key, value))
}

// AddHttpRequestTrailer appends a request trailer value.
func AddHttpRequestTrailer(key, value string) error {
	return statusErr(host().AddHeaderMapValue(abi.MapHttpRequestTrailers, key, value))
}

// GetHttpResponseHeaders returns all response headers, :status included.
func GetHttpResponseHeaders() ([][2]string, error) { return getMap(abi.MapHttpResponseHeaders) }

// ReplaceHttpResponseHeaders replaces all response headers.
func ReplaceHttpResponseHeaders(headers [][2]string) error {
	return setMap(abi.MapHttpResponseHeaders, headers)
}

// GetHttpResponseHeader returns one response header; ErrNotFound if absent.
func GetHttpResponseHeader(key string) (string, error) {
	return getMapValue(abi.MapHttpResponseHeaders, key)
}

// RemoveHttpResponseHeader removes a response header.
func RemoveHttpResponseHeader(key string) error {
	return statusErr(host().RemoveHeaderMapValue(abi.MapHttpResponseHeaders, key))
}

// ReplaceHttpResponseHeader sets a response header, adding it if absent.
func ReplaceHttpResponseHeader(key, value string) error {
	return statusErr(host().ReplaceHeaderMapValue(abi.MapHttpResponseHeaders, key, value))
}

// AddHttpResponseHeader appends a response header value.
func AddHttpResponseHeader(key, value string) error {
	return statusErr(host().AddHeaderMapValue(abi.MapHttpResponseHeaders, key, value))
}

// GetHttpResponseTrailers returns all response trailers.
func GetHttpResponseTrailers() ([][2]string, error) { return getMap(abi.MapHttpResponseTrailers) }

// ReplaceHttpResponseTrailers replaces all response trailers.
func ReplaceHttpResponseTrailers(trailers [][2]string) error {
	return setMap(abi.MapHttpResponseTrailers, trailers)
}

// GetHttpResponseTrailer returns one response trailer; ErrNotFound if absent.
func GetHttpResponseTrailer(key string) (string, error) {
	return getMapValue(abi.MapHttpResponseTrailers, key)
}

// RemoveHttpResponseTrailer removes a response trailer.
func RemoveHttpResponseTrailer(key string) error {
	return statusErr(host().RemoveHeaderMapValue(abi.MapHttpResponseTrailers, key))
}

// ReplaceHttpResponseTrailer sets a response trailer.
func ReplaceHttpResponseTrailer(key, value string) error {
	return statusErr(host().ReplaceHeaderMapValue(abi.MapHttpResponseTrailers, key, value))
}

// AddHttpResponseTrailer appends a response trailer value.
func AddHttpResponseTrailer(key, value string) error {
	return statusErr(host().AddHeaderMapValue(abi.MapHttpResponseTrailers, key, value))
}

// GetHttpCallResponseHeaders returns the headers of the HTTP call response
// being delivered; call it inside an HttpCallCallback.
func GetHttpCallResponseHeaders() ([][2]string, error) {
	return getMap(abi.MapHttpCallResponseHeaders)
}

// GetHttpCallResponseTrailers returns the trailers of the HTTP call response.
func GetHttpCallResponseTrailers() ([][2]string, error) {
	return getMap(abi.MapHttpCallResponseTrailers)
}

// Bodies.

func getBuffer(buffer abi.BufferType, start, maxSize int) ([]byte, error) {
	if start < 0 || maxSize < 0 {
		return nil, fmt.Errorf("proxywasm: negative buffer range %d+%d: %w", start, maxSize, ErrBadArgument)
	}
	b, st := host().GetBufferBytes(buffer, clamp32(start), clamp32(maxSize))
	return b, statusErr(st)
}

func clamp32(n int) uint32 {
	if uint64(n) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

// set_buffer_bytes (start, size) conventions: (0, 0) prepends, a start past
// the end appends, (0, ≥len) replaces everything.
func appendBuffer(buffer abi.BufferType, data []byte) error {
	return statusErr(host().SetBufferBytes(buffer, wholeBuffer, 0, data))
}

func prependBuffer(buffer abi.BufferType, data []byte) error {
	return statusErr(host().SetBufferBytes(buffer, 0, 0, data))
}

func replaceBuffer(buffer abi.BufferType, data []byte) error {
	return statusErr(host().SetBufferBytes(buffer, 0, wholeBuffer, data))
}

// GetHttpRequestBody returns up to maxSize bytes of the request body from
// start. In OnHttpRequestBody the body holds what the host has buffered.
func GetHttpRequestBody(start, maxSize int) ([]byte, error) {
	return getBuffer(abi.BufferHttpRequestBody, start, maxSize)
}

// AppendHttpRequestBody appends data to the request body.
func AppendHttpRequestBody(data []byte) error { return appendBuffer(abi.BufferHttpRequestBody, data) }

// PrependHttpRequestBody prepends data to the request body.
func PrependHttpRequestBody(data []byte) error {
	return prependBuffer(abi.BufferHttpRequestBody, data)
}

// ReplaceHttpRequestBody replaces the whole request body.
func ReplaceHttpRequestBody(data []byte) error {
	return replaceBuffer(abi.BufferHttpRequestBody, data)
}

// GetHttpResponseBody returns up to maxSize bytes of the response body.
func GetHttpResponseBody(start, maxSize int) ([]byte, error) {
	return getBuffer(abi.BufferHttpResponseBody, start, maxSize)
}

// AppendHttpResponseBody appends data to the response body.
func AppendHttpResponseBody(data []byte) error {
	return appendBuffer(abi.BufferHttpResponseBody, data)
}

// PrependHttpResponseBody prepends data to the response body.
func PrependHttpResponseBody(data []byte) error {
	return prependBuffer(abi.BufferHttpResponseBody, data)
}

// ReplaceHttpResponseBody replaces the whole response body.
func ReplaceHttpResponseBody(data []byte) error {
	return replaceBuffer(abi.BufferHttpResponseBody, data)
}

// GetHttpCallResponseBody returns up to maxSize bytes of the HTTP call
// response body; call it inside an HttpCallCallback.
func GetHttpCallResponseBody(start, maxSize int) ([]byte, error) {
	return getBuffer(abi.BufferHttpCallResponseBody, start, maxSize)
}

// GetForeignFunctionArguments returns the arguments inside OnForeignFunction.
func GetForeignFunctionArguments() ([]byte, error) {
	return getBuffer(abi.BufferForeignFunctionArguments, 0, wholeBuffer)
}

// Stream control.

// SendHttpResponse answers the stream locally with statusCode, headers and
// body instead of (or before) the upstream's response. grpcStatus is -1 for
// non-gRPC responses.
func SendHttpResponse(statusCode uint32, headers [][2]string, body []byte, grpcStatus int32) error {
	return statusErr(host().SendLocalResponse(statusCode, "", body, abi.EncodePairs(headers), grpcStatus))
}

// ResumeHttpRequest resumes a request paused by ActionPause.
func ResumeHttpRequest() error { return statusErr(host().ContinueStream(abi.StreamHttpRequest)) }

// ResumeHttpResponse resumes a response paused by ActionPause.
func ResumeHttpResponse() error { return statusErr(host().ContinueStream(abi.StreamHttpResponse)) }

// CloseHttpRequest resets the stream from the request side.
func CloseHttpRequest() error { return statusErr(host().CloseStream(abi.StreamHttpRequest)) }

// CloseHttpResponse resets the stream from the response side.
func CloseHttpResponse() error { return statusErr(host().CloseStream(abi.StreamHttpResponse)) }

// SetEffectiveContext makes contextID the target of subsequent stream
// calls (e.g. resuming a stream from OnTick).
func SetEffectiveContext(contextID uint32) error {
	err := statusErr(host().SetEffectiveContext(contextID))
	if err == nil {
		state.active = contextID
	}
	return err
}

// PluginDone completes a plugin teardown deferred by OnPluginDone == false.
func PluginDone() error { return statusErr(host().Done()) }

// Timers.

// SetTickPeriodMilliSeconds makes the host call OnTick every period; 0 stops it.
func SetTickPeriodMilliSeconds(period uint32) error {
	return statusErr(host().SetTickPeriodMilliseconds(period))
}

// Properties.

// GetProperty reads a host property, e.g. []string{"request", "id"}.
func GetProperty(path []string) ([]byte, error) {
	v, st := host().GetProperty(abi.EncodePropertyPath(path))
	return v, statusErr(st)
}

// SetProperty writes a host property.
func SetProperty(path []string, value []byte) error {
	return statusErr(host().SetProperty(abi.EncodePropertyPath(path), value))
}

// Shared data and queues.

// GetSharedData returns the VM-wide value for key and its CAS token.
func GetSharedData(key string) (value []byte, cas uint32, err error) {
	v, c, st := host().GetSharedData(key)
	return v, c, statusErr(st)
}

// SetSharedData stores value under key. A non-zero cas must match the
// current token (from GetSharedData) or ErrCasMismatch is returned.
func SetSharedData(key string, value []byte, cas uint32) error {
	return statusErr(host().SetSharedData(key, value, cas))
}

// RegisterSharedQueue creates (or opens) a queue owned by this VM.
func RegisterSharedQueue(name string) (queueID uint32, err error) {
	id, st := host().RegisterSharedQueue(name)
	return id, statusErr(st)
}

// ResolveSharedQueue finds a queue registered by the VM vmID.
func ResolveSharedQueue(vmID, name string) (queueID uint32, err error) {
	id, st := host().ResolveSharedQueue(vmID, name)
	return id, statusErr(st)
}

// EnqueueSharedQueue appends data to a queue.
func EnqueueSharedQueue(queueID uint32, data []byte) error {
	return statusErr(host().EnqueueSharedQueue(queueID, data))
}

// DequeueSharedQueue pops the oldest item; ErrEmpty when there is none.
func DequeueSharedQueue(queueID uint32) ([]byte, error) {
	v, st := host().DequeueSharedQueue(queueID)
	return v, statusErr(st)
}

// Foreign functions.

// CallForeignFunction calls a host-specific extension function.
func CallForeignFunction(name string, args []byte) ([]byte, error) {
	v, st := host().CallForeignFunction(name, args)
	return v, statusErr(st)
}
