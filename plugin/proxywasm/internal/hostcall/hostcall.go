// Package hostcall is every proxy-wasm host call in Go types, over the
// installed bridge.Host: header maps as [][2]string, statuses as errors.
// Package proxywasm exports the part an HTTP filter needs; the rest
// (trailers, shared data and queues, gauges and histograms, foreign
// functions, proxy_done, ...) stays here, bound and tested but not part of
// the filter author's API.
package hostcall

import (
	"fmt"
	"math"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/proxywasm/internal/bridge"
)

// Status is a non-OK proxy_status_t returned by a host function. It is an
// error; compare with errors.Is(err, ErrNotFound) or ==.
type Status uint32

// Host statuses (proxy_status_t) as errors.
const (
	ErrNotFound             = Status(abi.StatusNotFound)
	ErrBadArgument          = Status(abi.StatusBadArgument)
	ErrSerializationFailure = Status(abi.StatusSerializationFailure)
	ErrParseFailure         = Status(abi.StatusParseFailure)
	ErrInvalidMemoryAccess  = Status(abi.StatusInvalidMemoryAccess)
	ErrEmpty                = Status(abi.StatusEmpty)
	ErrCasMismatch          = Status(abi.StatusCasMismatch)
	ErrInternalFailure      = Status(abi.StatusInternalFailure)
	ErrUnimplemented        = Status(abi.StatusUnimplemented)
)

func (s Status) Error() string {
	switch s {
	case ErrNotFound:
		return "proxy-wasm: not found"
	case ErrBadArgument:
		return "proxy-wasm: bad argument"
	case ErrSerializationFailure:
		return "proxy-wasm: serialization failure"
	case ErrParseFailure:
		return "proxy-wasm: parse failure"
	case ErrInvalidMemoryAccess:
		return "proxy-wasm: invalid memory access"
	case ErrEmpty:
		return "proxy-wasm: empty"
	case ErrCasMismatch:
		return "proxy-wasm: CAS mismatch"
	case ErrInternalFailure:
		return "proxy-wasm: internal failure"
	case ErrUnimplemented:
		return "proxy-wasm: unimplemented"
	}
	return fmt.Sprintf("proxy-wasm: status %d", uint32(s))
}

// Err maps a proxy_status_t to nil or a Status error.
func Err(s abi.Status) error {
	if s == abi.StatusOK {
		return nil
	}
	return Status(s)
}

func host() bridge.Host { return bridge.CurrentHost() }

// WholeBuffer is the max_size that reads a buffer to its end. The host
// clamps it; MaxInt32 keeps hosts that add start+size in 32 bits safe.
const WholeBuffer = math.MaxInt32

// Logging.

// Log logs msg at level (proxy_log).
func Log(level abi.LogLevel, msg string) error { return Err(host().Log(level, msg)) }

// GetLogLevel returns the host's log level for this plugin.
//
// The answer is kept until ForgetLogLevel (the SDK calls it on every
// tick): a host call per message asked about costs more than the rest of
// a request's logging, and a level changed at runtime then takes effect
// within a tick.
func GetLogLevel() (abi.LogLevel, error) {
	h := host()
	if c := &logLevelCache; c.valid && c.host == h {
		return c.level, nil
	}
	l, st := h.GetLogLevel()
	if err := Err(st); err != nil {
		return l, err
	}
	logLevelCache = struct {
		host  bridge.Host
		level abi.LogLevel
		valid bool
	}{h, l, true}
	return l, nil
}

// logLevelCache is GetLogLevel's last answer and the host that gave it.
var logLevelCache struct {
	host  bridge.Host
	level abi.LogLevel
	valid bool
}

// ForgetLogLevel makes the next GetLogLevel ask the host again.
func ForgetLogLevel() { logLevelCache.valid = false }

// Header maps.

// GetMap returns a whole header map.
func GetMap(t abi.MapType) ([][2]string, error) {
	buf, st := host().GetHeaderMapPairs(t)
	if err := Err(st); err != nil {
		return nil, err
	}
	pairs, err := abi.DecodePairs(buf)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSerializationFailure, err)
	}
	// The pairs are one copy of the text (abi.DecodePairs): the buffer is
	// free again, for the next header map.
	bridge.Recycle(buf)
	return pairs, nil
}

// SetMap replaces a whole header map.
func SetMap(t abi.MapType, pairs [][2]string) error {
	return Err(host().SetHeaderMapPairs(t, abi.EncodePairs(pairs)))
}

// GetMapValue returns one value; ErrNotFound if absent.
func GetMapValue(t abi.MapType, key string) (string, error) {
	v, st := host().GetHeaderMapValue(t, key)
	if err := Err(st); err != nil {
		return "", err
	}
	return string(v), nil
}

// ReplaceMapValue sets key, adding it if absent.
func ReplaceMapValue(t abi.MapType, key, value string) error {
	return Err(host().ReplaceHeaderMapValue(t, key, value))
}

// AddMapValue appends a value for key.
func AddMapValue(t abi.MapType, key, value string) error {
	return Err(host().AddHeaderMapValue(t, key, value))
}

// RemoveMapValue removes key (absent is not an error).
func RemoveMapValue(t abi.MapType, key string) error {
	return Err(host().RemoveHeaderMapValue(t, key))
}

// Buffers.

// GetBuffer returns up to maxSize bytes of a buffer from start.
func GetBuffer(t abi.BufferType, start, maxSize int) ([]byte, error) {
	if start < 0 || maxSize < 0 {
		return nil, fmt.Errorf("proxywasm: negative buffer range %d+%d: %w", start, maxSize, ErrBadArgument)
	}
	b, st := host().GetBufferBytes(t, clamp32(start), clamp32(maxSize))
	return b, Err(st)
}

func clamp32(n int) uint32 {
	if uint64(n) > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(n)
}

// set_buffer_bytes (start, size) conventions: (0, 0) prepends, a start past
// the end appends, (0, ≥len) replaces everything.

// AppendBuffer appends data to a buffer.
func AppendBuffer(t abi.BufferType, data []byte) error {
	return Err(host().SetBufferBytes(t, WholeBuffer, 0, data))
}

// PrependBuffer prepends data to a buffer.
func PrependBuffer(t abi.BufferType, data []byte) error {
	return Err(host().SetBufferBytes(t, 0, 0, data))
}

// ReplaceBuffer replaces a whole buffer.
func ReplaceBuffer(t abi.BufferType, data []byte) error {
	return Err(host().SetBufferBytes(t, 0, WholeBuffer, data))
}

// Streams.

// SendLocalResponse answers the stream locally. grpcStatus is -1 for
// non-gRPC responses.
func SendLocalResponse(statusCode uint32, headers [][2]string, body []byte, grpcStatus int32) error {
	return Err(host().SendLocalResponse(statusCode, "", body, abi.EncodePairs(headers), grpcStatus))
}

// ContinueStream resumes a stream direction paused by ActionPause.
func ContinueStream(s abi.StreamType) error { return Err(host().ContinueStream(s)) }

// CloseStream resets the stream from one direction.
func CloseStream(s abi.StreamType) error { return Err(host().CloseStream(s)) }

// HttpCall sends an HTTP request to cluster (proxy_http_call) and returns
// its callout id; the answer arrives as proxy_on_http_call_response.
func HttpCall(cluster string, headers [][2]string, body []byte, trailers [][2]string, timeoutMs uint32) (uint32, error) {
	id, st := host().HttpCall(cluster, abi.EncodePairs(headers), body, abi.EncodePairs(trailers), timeoutMs)
	return id, Err(st)
}

// Done completes a plugin teardown the plugin deferred (proxy_done).
func Done() error { return Err(host().Done()) }

// Timers.

// SetTickPeriod makes the host tick the plugin context every ms; 0 stops it.
func SetTickPeriod(ms uint32) error { return Err(host().SetTickPeriodMilliseconds(ms)) }

// Properties.

// GetProperty reads a host property, e.g. []string{"request", "id"}.
func GetProperty(path []string) ([]byte, error) {
	v, st := host().GetProperty(abi.EncodePropertyPath(path))
	return v, Err(st)
}

// SetProperty writes a host property.
func SetProperty(path []string, value []byte) error {
	return Err(host().SetProperty(abi.EncodePropertyPath(path), value))
}

// Shared data and queues.

// GetSharedData returns the VM-wide value for key and its CAS token.
func GetSharedData(key string) (value []byte, cas uint32, err error) {
	v, c, st := host().GetSharedData(key)
	return v, c, Err(st)
}

// SetSharedData stores value under key. A non-zero cas must match the
// current token (from GetSharedData) or ErrCasMismatch is returned.
func SetSharedData(key string, value []byte, cas uint32) error {
	return Err(host().SetSharedData(key, value, cas))
}

// RegisterSharedQueue creates (or opens) a queue owned by this VM.
func RegisterSharedQueue(name string) (uint32, error) {
	id, st := host().RegisterSharedQueue(name)
	return id, Err(st)
}

// ResolveSharedQueue finds a queue registered by the VM vmID.
func ResolveSharedQueue(vmID, name string) (uint32, error) {
	id, st := host().ResolveSharedQueue(vmID, name)
	return id, Err(st)
}

// EnqueueSharedQueue appends data to a queue.
func EnqueueSharedQueue(queueID uint32, data []byte) error {
	return Err(host().EnqueueSharedQueue(queueID, data))
}

// DequeueSharedQueue pops the oldest item; ErrEmpty when there is none.
func DequeueSharedQueue(queueID uint32) ([]byte, error) {
	v, st := host().DequeueSharedQueue(queueID)
	return v, Err(st)
}

// Metrics. The host owns the values and exports them (Envoy: the admin's
// Prometheus endpoint).

// DefineMetric defines (or finds) the metric name of type t.
func DefineMetric(t abi.MetricType, name string) (uint32, error) {
	id, st := host().DefineMetric(t, name)
	return id, Err(st)
}

// IncrementMetric adds delta to a counter or gauge.
func IncrementMetric(id uint32, delta int64) error { return Err(host().IncrementMetric(id, delta)) }

// RecordMetric sets a gauge or records a histogram observation.
func RecordMetric(id uint32, value uint64) error { return Err(host().RecordMetric(id, value)) }

// GetMetric returns a counter's or gauge's value.
func GetMetric(id uint32) (uint64, error) {
	v, st := host().GetMetric(id)
	return v, Err(st)
}

// Foreign functions.

// CallForeignFunction calls a host-specific extension function.
func CallForeignFunction(name string, args []byte) ([]byte, error) {
	v, st := host().CallForeignFunction(name, args)
	return v, Err(st)
}
