// Package proxytest is a small in-memory proxy-wasm host for native unit
// tests of plugins written with package proxywasm. It follows Envoy's
// semantics where a filter can observe them (docs/local-runtime.md): Pause from a body
// callback buffers, so the next body callback sees the whole buffered size;
// http_call requires :method, :path and :authority and answers through
// CallOnHttpCallResponse; continue_stream acts on the effective context.
//
// Like Envoy, it lends a stream's header maps and bodies to the guest only
// while their callback runs or while the filter is paused in it: request
// headers are gone (BAD_ARGUMENT) once they continued, e.g. in response
// callbacks. During proxy_on_log (the access-log phase) the request and
// response headers are readable again.
//
// It is not concurrency-safe, like the guest it drives.
package proxytest

import (
	"fmt"
	"slices"
	"strings"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/internal/bridge"
)

// Options configure a Host.
type Options struct {
	VMContext           proxywasm.VMContext
	VMConfiguration     []byte
	PluginConfiguration []byte
	// Clusters, when non-nil, are the only upstreams http_call accepts
	// (others get BAD_ARGUMENT, as Envoy does for an unknown cluster).
	Clusters []string
	// Properties maps a property path joined with "." to its value.
	Properties map[string][]byte
	LogLevel   proxywasm.LogLevel
}

// logEntry is one proxy_log call.
type logEntry struct {
	level   proxywasm.LogLevel
	message string
}

// HttpCall is one proxy_http_call the guest made.
type HttpCall struct {
	ID        uint32
	Upstream  string
	Headers   [][2]string
	Body      []byte
	Trailers  [][2]string
	TimeoutMs uint32
	// ContextID is the effective context that dispatched the call.
	ContextID uint32
}

// LocalResponse is a proxy_send_local_response.
type LocalResponse struct {
	StatusCode uint32
	Details    string
	Headers    [][2]string
	Body       []byte
	GrpcStatus int32
}

type stream struct {
	maps         map[abi.MapType][][2]string
	bodies       map[abi.BufferType][]byte // what the guest sees: the buffered body
	sent         map[abi.BufferType][]byte // body forwarded past the filter
	resumed      map[abi.StreamType]int    // continue_stream calls per stream type
	local        *LocalResponse
	pausedBodies map[abi.BufferType]bool
	// heldMaps and heldBodies are the header maps and body buffers lent to
	// the guest right now.
	heldMaps   map[abi.MapType]bool
	heldBodies map[abi.BufferType]bool
	accessLog  bool
}

type metric struct {
	kind  abi.MetricType
	name  string
	value uint64
}

// Host is the in-memory host. Create it with NewHost.
type Host struct {
	opts      Options
	rootID    uint32
	nextID    uint32
	effective uint32
	streams   map[uint32]*stream
	logs      []logEntry

	calls        []HttpCall
	nextCallID   uint32
	callHeaders  [][2]string
	callTrailers [][2]string
	callBody     []byte

	tickPeriod uint32
	// stopped: StopPlugin ran; pendingDone: its OnPluginDone returned
	// false and PluginDone has not come yet; deleteAfter: PluginDone came
	// and proxy_on_delete follows the guest call it came from.
	pendingDone, stopped, deleteAfter bool
	shared                            map[string]sharedValue
	queues                            map[string]uint32
	queueItems                        map[uint32][][]byte
	metrics                           []metric
	foreign                           []string // foreign function calls by name, in order
}

type sharedValue struct {
	data []byte
	cas  uint32
}

// NewHost installs a fresh host and plugin state (SetVMContext with
// opts.VMContext). It does not start the plugin: call StartPlugin.
func NewHost(opts Options) *Host {
	h := &Host{
		opts:       opts,
		rootID:     1,
		nextID:     2,
		streams:    map[uint32]*stream{},
		shared:     map[string]sharedValue{},
		queues:     map[string]uint32{},
		queueItems: map[uint32][][]byte{},
	}
	proxywasm.SetVMContext(opts.VMContext)
	bridge.SetHost((*abiHost)(h))
	return h
}

func (h *Host) guest() bridge.Guest { return bridge.CurrentGuest() }

// StartPlugin runs the host's start sequence for the plugin context:
// context create, vm start, configure. It reports whether both the VM and
// the plugin accepted their configuration.
func (h *Host) StartPlugin() bool {
	h.effective = h.rootID
	h.guest().OnContextCreate(h.rootID, 0)
	if !h.guest().OnVMStart(h.rootID, uint32(len(h.opts.VMConfiguration))) {
		return false
	}
	h.effective = h.rootID
	return h.guest().OnConfigure(h.rootID, uint32(len(h.opts.PluginConfiguration)))
}

// RootContextID is the plugin context's id.
func (h *Host) RootContextID() uint32 { return h.rootID }

// InitializeHttpContext creates a stream context and returns its id.
func (h *Host) InitializeHttpContext() uint32 {
	id := h.nextID
	h.nextID++
	h.streams[id] = &stream{
		maps: map[abi.MapType][][2]string{}, bodies: map[abi.BufferType][]byte{}, sent: map[abi.BufferType][]byte{},
		resumed: map[abi.StreamType]int{}, pausedBodies: map[abi.BufferType]bool{},
		heldMaps: map[abi.MapType]bool{}, heldBodies: map[abi.BufferType]bool{},
	}
	h.effective = id
	h.guest().OnContextCreate(id, h.rootID)
	return id
}

func (h *Host) stream(id uint32) *stream {
	s, ok := h.streams[id]
	if !ok {
		panic(fmt.Sprintf("proxytest: unknown stream %d", id))
	}
	return s
}

// CallOnRequestHeaders delivers request headers.
func (h *Host) CallOnRequestHeaders(id uint32, headers [][2]string, endOfStream bool) proxywasm.Action {
	return h.headers(id, abi.MapHttpRequestHeaders, headers, func() abi.Action {
		return h.guest().OnRequestHeaders(id, uint32(len(headers)), endOfStream)
	})
}

// CallOnResponseHeaders delivers response headers.
func (h *Host) CallOnResponseHeaders(id uint32, headers [][2]string, endOfStream bool) proxywasm.Action {
	return h.headers(id, abi.MapHttpResponseHeaders, headers, func() abi.Action {
		return h.guest().OnResponseHeaders(id, uint32(len(headers)), endOfStream)
	})
}

// headers lends a header map to the guest for cb and keeps it lent while
// the guest pauses.
func (h *Host) headers(id uint32, mapType abi.MapType, headers [][2]string, cb func() abi.Action) proxywasm.Action {
	s := h.stream(id)
	s.maps[mapType] = slices.Clone(headers)
	s.heldMaps[mapType] = true
	h.effective = id
	action := proxywasm.Action(cb())
	if action == proxywasm.ActionContinue {
		s.heldMaps[mapType] = false
	}
	return action
}

// CallOnRequestBody delivers a request body chunk. While the filter pauses,
// chunks accumulate and each callback sees everything buffered so far; on
// Continue the buffered body is forwarded (see GetSentRequestBody).
func (h *Host) CallOnRequestBody(id uint32, chunk []byte, endOfStream bool) proxywasm.Action {
	return h.body(id, abi.BufferHttpRequestBody, chunk, endOfStream, h.guest().OnRequestBody)
}

// CallOnResponseBody delivers a response body chunk, like CallOnRequestBody.
func (h *Host) CallOnResponseBody(id uint32, chunk []byte, endOfStream bool) proxywasm.Action {
	return h.body(id, abi.BufferHttpResponseBody, chunk, endOfStream, h.guest().OnResponseBody)
}

func (h *Host) body(id uint32, buffer abi.BufferType, chunk []byte, eos bool, cb func(uint32, uint32, bool) abi.Action) proxywasm.Action {
	s := h.stream(id)
	s.bodies[buffer] = append(s.bodies[buffer], chunk...)
	s.heldBodies[buffer] = true
	h.effective = id
	action := proxywasm.Action(cb(id, uint32(len(s.bodies[buffer])), eos))
	if action == proxywasm.ActionContinue {
		h.flush(s, buffer)
		s.heldBodies[buffer] = false
	} else {
		s.pausedBodies[buffer] = true
	}
	return action
}

func (h *Host) flush(s *stream, buffer abi.BufferType) {
	s.sent[buffer] = append(s.sent[buffer], s.bodies[buffer]...)
	s.bodies[buffer] = nil
	s.pausedBodies[buffer] = false
}

// CallOnRequestTrailers delivers request trailers.
func (h *Host) CallOnRequestTrailers(id uint32, trailers [][2]string) proxywasm.Action {
	return h.headers(id, abi.MapHttpRequestTrailers, trailers, func() abi.Action {
		return h.guest().OnRequestTrailers(id, uint32(len(trailers)))
	})
}

// CallOnResponseTrailers delivers response trailers.
func (h *Host) CallOnResponseTrailers(id uint32, trailers [][2]string) proxywasm.Action {
	return h.headers(id, abi.MapHttpResponseTrailers, trailers, func() abi.Action {
		return h.guest().OnResponseTrailers(id, uint32(len(trailers)))
	})
}

// CompleteHttpContext ends a stream as Envoy does: on_log, on_done, on_delete.
func (h *Host) CompleteHttpContext(id uint32) {
	h.effective = id
	s := h.stream(id)
	s.accessLog = true
	h.guest().OnLog(id)
	s.accessLog = false
	clear(s.heldMaps)
	clear(s.heldBodies)
	h.guest().OnDone(id)
	h.guest().OnDelete(id)
	delete(h.streams, id)
}

// StopPlugin tears the plugin context down as Envoy does when its
// configuration goes or its VM is replaced: proxy_on_done, then, unless
// that returned false (the plugin calls PluginDone when it has finished),
// proxy_on_delete. It reports whether the teardown finished at once.
func (h *Host) StopPlugin() bool {
	h.effective = h.rootID
	h.stopped = true
	if !h.guest().OnDone(h.rootID) {
		h.pendingDone = true
		return false
	}
	h.guest().OnDelete(h.rootID)
	return true
}

// PluginDeleted reports whether a stopped plugin context was deleted: at
// once, or when it called PluginDone.
func (h *Host) PluginDeleted() bool { return h.stopped && !h.pendingDone && !h.deleteAfter }

// Tick calls OnTick on the plugin context.
func (h *Host) Tick() {
	h.effective = h.rootID
	h.guest().OnTick(h.rootID)
	h.afterCall()
}

// SetLogLevel changes the level the host reports, as Envoy's admin
// /logging does at runtime.
func (h *Host) SetLogLevel(l proxywasm.LogLevel) { h.opts.LogLevel = l }

// TickPeriod is the last period set by the guest.
func (h *Host) TickPeriod() uint32 { return h.tickPeriod }

// ForeignCalls returns the names of the foreign functions called, in order.
func (h *Host) ForeignCalls() []string { return slices.Clone(h.foreign) }

// GetHttpCalls returns the HTTP calls dispatched so far.
func (h *Host) GetHttpCalls() []HttpCall { return slices.Clone(h.calls) }

// CallOnHttpCallResponse answers the HTTP call id. Pass nil headers to
// report a failed call (num_headers = 0), as Envoy does on timeout or reset.
func (h *Host) CallOnHttpCallResponse(id uint32, headers [][2]string, body []byte, trailers [][2]string) {
	h.callHeaders, h.callBody, h.callTrailers = headers, body, trailers
	defer func() { h.callHeaders, h.callBody, h.callTrailers = nil, nil, nil }()
	h.effective = h.rootID
	h.guest().OnHttpCallResponse(h.rootID, id, uint32(len(headers)), uint32(len(body)), uint32(len(trailers)))
	h.afterCall()
}

// afterCall runs what a host call deferred past the guest call it came
// from: the plugin context's proxy_on_delete after PluginDone.
func (h *Host) afterCall() {
	if h.deleteAfter {
		h.deleteAfter = false
		h.guest().OnDelete(h.rootID)
	}
}

// GetLogs returns the messages logged at level or above.
func (h *Host) GetLogs(level proxywasm.LogLevel) []string {
	var out []string
	for _, e := range h.logs {
		if e.level >= level {
			out = append(out, e.message)
		}
	}
	return out
}

// GetRequestHeaders returns the stream's current request headers.
func (h *Host) GetRequestHeaders(id uint32) [][2]string {
	return h.stream(id).maps[abi.MapHttpRequestHeaders]
}

// GetResponseHeaders returns the stream's current response headers.
func (h *Host) GetResponseHeaders(id uint32) [][2]string {
	return h.stream(id).maps[abi.MapHttpResponseHeaders]
}

// GetBufferedRequestBody returns the request body held by the filter.
func (h *Host) GetBufferedRequestBody(id uint32) []byte {
	return h.stream(id).bodies[abi.BufferHttpRequestBody]
}

// GetSentRequestBody returns the request body forwarded upstream so far.
func (h *Host) GetSentRequestBody(id uint32) []byte {
	return h.stream(id).sent[abi.BufferHttpRequestBody]
}

// GetSentResponseBody returns the response body forwarded downstream so far.
func (h *Host) GetSentResponseBody(id uint32) []byte {
	return h.stream(id).sent[abi.BufferHttpResponseBody]
}

// ResumedRequest is how many times the request was resumed.
func (h *Host) ResumedRequest(id uint32) int {
	return h.stream(id).resumed[abi.StreamHttpRequest]
}

// ResumedResponse is how many times the response was resumed.
func (h *Host) ResumedResponse(id uint32) int {
	return h.stream(id).resumed[abi.StreamHttpResponse]
}

// GetLocalResponse returns the local response sent on the stream, if any.
func (h *Host) GetLocalResponse(id uint32) *LocalResponse { return h.stream(id).local }

// GetCounterValue returns a metric's value by name.
func (h *Host) GetCounterValue(name string) (uint64, bool) {
	for _, m := range h.metrics {
		if m.name == name {
			return m.value, true
		}
	}
	return 0, false
}

// abiHost is the Host seen by the guest: the bridge.Host methods live on this
// separate type so they do not clutter Host's test API.
type abiHost Host

func (h *abiHost) Log(level abi.LogLevel, msg string) abi.Status {
	if level > abi.LogLevelCritical {
		return abi.StatusBadArgument
	}
	h.logs = append(h.logs, logEntry{proxywasm.LogLevel(level), msg})
	return abi.StatusOK
}

func (h *abiHost) GetLogLevel() (abi.LogLevel, abi.Status) {
	return abi.LogLevel(h.opts.LogLevel), abi.StatusOK
}

func (h *abiHost) GetProperty(path []byte) ([]byte, abi.Status) {
	v, ok := h.opts.Properties[strings.ReplaceAll(string(path), "\x00", ".")]
	if !ok {
		return nil, abi.StatusNotFound
	}
	return slices.Clone(v), abi.StatusOK
}

func (h *abiHost) SetProperty(path, value []byte) abi.Status {
	if h.opts.Properties == nil {
		h.opts.Properties = map[string][]byte{}
	}
	h.opts.Properties[strings.ReplaceAll(string(path), "\x00", ".")] = slices.Clone(value)
	return abi.StatusOK
}

// buffer returns a pointer to the named buffer, or nil when it is not
// available in the effective context.
func (h *abiHost) buffer(buffer abi.BufferType) *[]byte {
	switch buffer {
	case abi.BufferVMConfiguration:
		return &h.opts.VMConfiguration
	case abi.BufferPluginConfiguration:
		return &h.opts.PluginConfiguration
	case abi.BufferHttpCallResponseBody:
		return &h.callBody
	case abi.BufferHttpRequestBody, abi.BufferHttpResponseBody:
		if s, ok := h.streams[h.effective]; ok && s.heldBodies[buffer] {
			b := s.bodies[buffer]
			return &b
		}
	}
	return nil
}

func (h *abiHost) GetBufferBytes(buffer abi.BufferType, start, maxSize uint32) ([]byte, abi.Status) {
	if buffer > abi.BufferForeignFunctionArguments {
		return nil, abi.StatusBadArgument
	}
	b := h.buffer(buffer)
	if b == nil {
		return nil, abi.StatusNotFound
	}
	n := uint64(len(*b))
	lo, hi := min(uint64(start), n), min(uint64(start)+uint64(maxSize), n)
	return slices.Clone((*b)[lo:hi]), abi.StatusOK
}

func (h *abiHost) GetBufferStatus(buffer abi.BufferType) (uint32, abi.Status) {
	b := h.buffer(buffer)
	if b == nil {
		return 0, abi.StatusNotFound
	}
	return uint32(len(*b)), abi.StatusOK
}

// SetBufferBytes follows Envoy: (0,0) prepends, start ≥ len appends, start 0
// with size ≥ len replaces; anything else is BAD_ARGUMENT.
func (h *abiHost) SetBufferBytes(buffer abi.BufferType, start, size uint32, value []byte) abi.Status {
	if buffer != abi.BufferHttpRequestBody && buffer != abi.BufferHttpResponseBody {
		return abi.StatusNotFound
	}
	s, ok := h.streams[h.effective]
	if !ok || !s.heldBodies[buffer] {
		return abi.StatusNotFound
	}
	old := s.bodies[buffer]
	n := uint64(len(old))
	switch {
	case start == 0 && size == 0:
		s.bodies[buffer] = append(slices.Clone(value), old...)
	case uint64(start) >= n:
		s.bodies[buffer] = append(old, value...)
	case start == 0 && uint64(size) >= n:
		s.bodies[buffer] = slices.Clone(value)
	default:
		return abi.StatusBadArgument
	}
	return abi.StatusOK
}

func (h *abiHost) headerMap(mapType abi.MapType) ([][2]string, abi.Status) {
	switch mapType {
	case abi.MapHttpCallResponseHeaders:
		return h.callHeaders, abi.StatusOK
	case abi.MapHttpCallResponseTrailers:
		return h.callTrailers, abi.StatusOK
	case abi.MapHttpRequestHeaders, abi.MapHttpRequestTrailers, abi.MapHttpResponseHeaders, abi.MapHttpResponseTrailers:
		s, ok := h.streams[h.effective]
		if !ok {
			return nil, abi.StatusNotFound
		}
		if s.accessLog && (mapType == abi.MapHttpRequestHeaders || mapType == abi.MapHttpResponseHeaders) {
			return s.maps[mapType], abi.StatusOK
		}
		if !s.heldMaps[mapType] {
			return nil, abi.StatusBadArgument
		}
		return s.maps[mapType], abi.StatusOK
	}
	return nil, abi.StatusBadArgument
}

func (h *abiHost) setMap(mapType abi.MapType, pairs [][2]string) abi.Status {
	switch mapType {
	case abi.MapHttpRequestHeaders, abi.MapHttpRequestTrailers, abi.MapHttpResponseHeaders, abi.MapHttpResponseTrailers:
		s, ok := h.streams[h.effective]
		if !ok {
			return abi.StatusNotFound
		}
		if !s.heldMaps[mapType] {
			return abi.StatusBadArgument
		}
		s.maps[mapType] = pairs
		return abi.StatusOK
	}
	return abi.StatusBadArgument // HTTP call responses are read-only
}

func (h *abiHost) GetHeaderMapPairs(mapType abi.MapType) ([]byte, abi.Status) {
	m, st := h.headerMap(mapType)
	if st != abi.StatusOK {
		return nil, st
	}
	return abi.EncodePairs(m), abi.StatusOK
}

func (h *abiHost) SetHeaderMapPairs(mapType abi.MapType, pairs []byte) abi.Status {
	decoded, err := abi.DecodePairs(pairs)
	if err != nil {
		return abi.StatusBadArgument
	}
	return h.setMap(mapType, decoded)
}

func (h *abiHost) GetHeaderMapValue(mapType abi.MapType, key string) ([]byte, abi.Status) {
	m, st := h.headerMap(mapType)
	if st != abi.StatusOK {
		return nil, st
	}
	for _, p := range m {
		if strings.EqualFold(p[0], key) {
			return []byte(p[1]), abi.StatusOK
		}
	}
	return nil, abi.StatusNotFound
}

func (h *abiHost) edit(mapType abi.MapType, f func([][2]string) [][2]string) abi.Status {
	m, st := h.headerMap(mapType)
	if st != abi.StatusOK {
		return st
	}
	return h.setMap(mapType, f(slices.Clone(m)))
}

func without(m [][2]string, key string) [][2]string {
	return slices.DeleteFunc(m, func(p [2]string) bool { return strings.EqualFold(p[0], key) })
}

func (h *abiHost) ReplaceHeaderMapValue(mapType abi.MapType, key, value string) abi.Status {
	return h.edit(mapType, func(m [][2]string) [][2]string {
		for i, p := range m {
			if strings.EqualFold(p[0], key) {
				m[i][1] = value
				return append(m[:i+1], without(m[i+1:], key)...)
			}
		}
		return append(m, [2]string{strings.ToLower(key), value})
	})
}

func (h *abiHost) RemoveHeaderMapValue(mapType abi.MapType, key string) abi.Status {
	return h.edit(mapType, func(m [][2]string) [][2]string { return without(m, key) })
}

func (h *abiHost) AddHeaderMapValue(mapType abi.MapType, key, value string) abi.Status {
	return h.edit(mapType, func(m [][2]string) [][2]string {
		return append(m, [2]string{strings.ToLower(key), value})
	})
}

func (h *abiHost) ContinueStream(streamType abi.StreamType) abi.Status {
	s, ok := h.streams[h.effective]
	if !ok {
		return abi.StatusNotFound
	}
	if streamType > abi.StreamHttpResponse {
		return abi.StatusBadArgument
	}
	s.resumed[streamType]++
	// Resuming releases a body and the header maps the filter held.
	buffer, maps := abi.BufferHttpRequestBody, []abi.MapType{abi.MapHttpRequestHeaders, abi.MapHttpRequestTrailers}
	if streamType == abi.StreamHttpResponse {
		buffer, maps = abi.BufferHttpResponseBody, []abi.MapType{abi.MapHttpResponseHeaders, abi.MapHttpResponseTrailers}
	}
	if s.pausedBodies[buffer] {
		(*Host)(h).flush(s, buffer)
	}
	s.heldBodies[buffer] = false
	for _, m := range maps {
		s.heldMaps[m] = false
	}
	return abi.StatusOK
}

func (h *abiHost) CloseStream(streamType abi.StreamType) abi.Status {
	if _, ok := h.streams[h.effective]; !ok {
		return abi.StatusNotFound
	}
	return abi.StatusOK
}

func (h *abiHost) SendLocalResponse(statusCode uint32, details string, body, headers []byte, grpcStatus int32) abi.Status {
	s, ok := h.streams[h.effective]
	if !ok {
		return abi.StatusNotFound
	}
	pairs, err := abi.DecodePairs(headers)
	if err != nil {
		return abi.StatusBadArgument
	}
	s.local = &LocalResponse{statusCode, details, pairs, slices.Clone(body), grpcStatus}
	return abi.StatusOK
}

func (h *abiHost) HttpCall(upstream string, headers, body, trailers []byte, timeoutMs uint32) (uint32, abi.Status) {
	hs, err := abi.DecodePairs(headers)
	if err != nil {
		return 0, abi.StatusBadArgument
	}
	ts, err := abi.DecodePairs(trailers)
	if err != nil {
		return 0, abi.StatusBadArgument
	}
	if h.opts.Clusters != nil && !slices.Contains(h.opts.Clusters, upstream) {
		return 0, abi.StatusBadArgument
	}
	for _, required := range []string{":method", ":path", ":authority"} {
		if !slices.ContainsFunc(hs, func(p [2]string) bool { return p[0] == required && p[1] != "" }) {
			return 0, abi.StatusBadArgument
		}
	}
	h.nextCallID++
	h.calls = append(h.calls, HttpCall{h.nextCallID, upstream, hs, slices.Clone(body), ts, timeoutMs, h.effective})
	return h.nextCallID, abi.StatusOK
}

func (h *abiHost) SetTickPeriodMilliseconds(ms uint32) abi.Status {
	h.tickPeriod = ms
	return abi.StatusOK
}

func (h *abiHost) SetSharedData(key string, value []byte, cas uint32) abi.Status {
	cur, ok := h.shared[key]
	if cas != 0 && (!ok || cur.cas != cas) {
		return abi.StatusCasMismatch
	}
	h.shared[key] = sharedValue{slices.Clone(value), cur.cas + 1}
	return abi.StatusOK
}

func (h *abiHost) GetSharedData(key string) ([]byte, uint32, abi.Status) {
	v, ok := h.shared[key]
	if !ok {
		return nil, 0, abi.StatusNotFound
	}
	return slices.Clone(v.data), v.cas, abi.StatusOK
}

func (h *abiHost) RegisterSharedQueue(name string) (uint32, abi.Status) {
	if id, ok := h.queues[name]; ok {
		return id, abi.StatusOK
	}
	id := uint32(len(h.queues) + 1)
	h.queues[name] = id
	return id, abi.StatusOK
}

func (h *abiHost) ResolveSharedQueue(_, name string) (uint32, abi.Status) {
	id, ok := h.queues[name]
	if !ok {
		return 0, abi.StatusNotFound
	}
	return id, abi.StatusOK
}

func (h *abiHost) EnqueueSharedQueue(id uint32, value []byte) abi.Status {
	if !h.queueExists(id) {
		return abi.StatusNotFound
	}
	h.queueItems[id] = append(h.queueItems[id], slices.Clone(value))
	return abi.StatusOK
}

func (h *abiHost) queueExists(id uint32) bool {
	for _, q := range h.queues {
		if q == id {
			return true
		}
	}
	return false
}

func (h *abiHost) DequeueSharedQueue(id uint32) ([]byte, abi.Status) {
	if !h.queueExists(id) {
		return nil, abi.StatusNotFound
	}
	items := h.queueItems[id]
	if len(items) == 0 {
		return nil, abi.StatusEmpty
	}
	h.queueItems[id] = items[1:]
	return items[0], abi.StatusOK
}

func (h *abiHost) DefineMetric(kind abi.MetricType, name string) (uint32, abi.Status) {
	if kind > abi.MetricHistogram {
		return 0, abi.StatusBadArgument
	}
	for i, m := range h.metrics {
		if m.name == name {
			return uint32(i), abi.StatusOK
		}
	}
	h.metrics = append(h.metrics, metric{kind: kind, name: name})
	return uint32(len(h.metrics) - 1), abi.StatusOK
}

func (h *abiHost) IncrementMetric(id uint32, delta int64) abi.Status {
	if int(id) >= len(h.metrics) {
		return abi.StatusNotFound
	}
	m := &h.metrics[id]
	if m.kind == abi.MetricCounter && delta < 0 {
		return abi.StatusBadArgument
	}
	m.value = uint64(int64(m.value) + delta)
	return abi.StatusOK
}

func (h *abiHost) RecordMetric(id uint32, value uint64) abi.Status {
	if int(id) >= len(h.metrics) {
		return abi.StatusNotFound
	}
	h.metrics[id].value = value
	return abi.StatusOK
}

func (h *abiHost) GetMetric(id uint32) (uint64, abi.Status) {
	if int(id) >= len(h.metrics) {
		return 0, abi.StatusNotFound
	}
	return h.metrics[id].value, abi.StatusOK
}

func (h *abiHost) SetEffectiveContext(id uint32) abi.Status {
	if _, ok := h.streams[id]; !ok && id != h.rootID {
		return abi.StatusBadArgument
	}
	h.effective = id
	return abi.StatusOK
}

// Done is proxy_done: NotFound unless the plugin deferred its teardown.
func (h *abiHost) Done() abi.Status {
	if !h.pendingDone {
		return abi.StatusNotFound
	}
	h.pendingDone = false
	h.deleteAfter = true // as cpp-host, once the guest call returns
	return abi.StatusOK
}

// CallForeignFunction records the call; clear_route_cache answers Ok, as
// Envoy's does, any other name NotFound.
func (h *abiHost) CallForeignFunction(name string, _ []byte) ([]byte, abi.Status) {
	h.foreign = append(h.foreign, name)
	if name == "clear_route_cache" {
		return nil, abi.StatusOK
	}
	return nil, abi.StatusNotFound
}

var _ bridge.Host = (*abiHost)(nil)
