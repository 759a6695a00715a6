// Package filter is the chime HTTP filter that runs inside chime.wasm
// (SPEC §1). At this stage it is nearly a pass-through that exercises the
// real request path: it recognises the three LLM protocols, buffers the
// request body, asks the host to prepare (proxy_http_call) and resumes the
// request when the host answers or fails, failing open. Responses stream
// through untouched.
//
// Everything is callback-driven; nothing here may block (see proxywasm).
package filter

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strconv"

	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// Header and path names shared with the host.
const (
	// FollowupHeader marks a host-issued followup request (SPEC §1); such
	// requests pass through untouched. Its value is authenticated later.
	FollowupHeader = "x-chime-followup"
	// PreparePath is the host endpoint asked before forwarding (SPEC §1).
	PreparePath = "/v1/filter/prepare"
	// Metric names (exported on Envoy's Prometheus endpoint).
	MetricRequests         = "chime_requests_total"
	MetricHostCallFailures = "chime_host_call_failures_total"
)

// PrepareRequest is the body of POST /v1/filter/prepare.
type PrepareRequest struct {
	Protocol  string `json:"protocol"`
	Path      string `json:"path"`
	RequestID string `json:"requestId"`
}

// NewVMContext returns the filter's VM context for proxywasm.SetVMContext.
func NewVMContext() proxywasm.VMContext { return vmContext{} }

type vmContext struct{ proxywasm.DefaultVMContext }

func (vmContext) NewPluginContext(uint32) proxywasm.PluginContext { return &pluginContext{} }

type pluginContext struct {
	proxywasm.DefaultPluginContext
	cfg          Config
	requests     counter
	hostFailures counter
}

// counter is a metric that may be missing (a host without metrics must not
// break the filter).
type counter struct {
	m  proxywasm.MetricCounter
	ok bool
}

func defineCounter(name string) counter {
	m, err := proxywasm.DefineCounterMetric(name)
	if err != nil {
		proxywasm.LogWarnf("chime: metric %s unavailable: %v", name, err)
		return counter{}
	}
	return counter{m: m, ok: true}
}

func (c counter) inc() {
	if c.ok {
		_ = c.m.Increment(1)
	}
}

func (p *pluginContext) OnPluginStart(int) bool {
	raw, err := proxywasm.GetPluginConfiguration()
	if err != nil && !errors.Is(err, proxywasm.ErrNotFound) {
		proxywasm.LogErrorf("chime: cannot read plugin configuration: %v", err)
		return false
	}
	cfg, warnings, err := ParseConfig(raw)
	for _, w := range warnings {
		proxywasm.LogWarn("chime: " + w)
	}
	if err != nil {
		proxywasm.LogErrorf("chime: rejecting %v", err)
		return false
	}
	p.cfg = cfg
	p.requests = defineCounter(MetricRequests)
	p.hostFailures = defineCounter(MetricHostCallFailures)
	proxywasm.LogInfof("chime: filter started (host cluster %q, failOpen %v)", cfg.HostCluster, cfg.FailOpen)
	return true
}

func (p *pluginContext) NewHttpContext(contextID uint32) proxywasm.HttpContext {
	return &httpContext{plugin: p, contextID: contextID}
}

// httpContext is one stream. Only requests on a known protocol path are
// handled; everything else continues at once.
type httpContext struct {
	proxywasm.DefaultHttpContext
	plugin    *pluginContext
	contextID uint32

	handled    bool // a known protocol, not a followup
	protocol   llm.Protocol
	path       string
	requestID  string
	body       []byte // the whole request body, once buffered
	dispatched bool
	streamDone bool
}

func (h *httpContext) OnHttpRequestHeaders(_ int, endOfStream bool) proxywasm.Action {
	if _, err := proxywasm.GetHttpRequestHeader(FollowupHeader); err == nil {
		return proxywasm.ActionContinue
	}
	method, _ := proxywasm.GetHttpRequestHeader(":method")
	path, err := proxywasm.GetHttpRequestHeader(":path")
	if err != nil || method != "POST" {
		return proxywasm.ActionContinue // SPEC §14: unknown path or method passes through
	}
	proto := llm.DetectProtocol(path)
	if proto == llm.Unknown {
		return proxywasm.ActionContinue
	}
	h.handled, h.protocol, h.path = true, proto, path
	h.plugin.requests.inc()
	// The body may change later, so its length must not be pinned (SPEC §1).
	if err := proxywasm.RemoveHttpRequestHeader("content-length"); err != nil {
		proxywasm.LogDebugf("chime: remove content-length: %v", err)
	}
	if id, err := proxywasm.GetHttpRequestHeader("x-request-id"); err == nil && id != "" {
		h.requestID = id
	} else {
		h.requestID = newRequestID()
	}
	if endOfStream {
		return h.prepare() // no body: ask the host now
	}
	return proxywasm.ActionContinue
}

func (h *httpContext) OnHttpRequestBody(bodySize int, endOfStream bool) proxywasm.Action {
	if !h.handled || h.dispatched {
		return proxywasm.ActionContinue
	}
	if !endOfStream {
		return proxywasm.ActionPause // keep buffering until the whole body is here
	}
	body, err := proxywasm.GetHttpRequestBody(0, bodySize)
	if err != nil {
		proxywasm.LogWarnf("chime: request %s: cannot read body: %v", h.requestID, err)
	}
	h.body = body
	return h.prepare()
}

func (h *httpContext) OnHttpStreamDone() { h.streamDone = true }

// prepare asks the host to prepare this request. It pauses the request
// until the answer; if the call cannot even be sent, it continues at once.
func (h *httpContext) prepare() proxywasm.Action {
	h.dispatched = true
	cfg := h.plugin.cfg
	body, err := json.Marshal(PrepareRequest{Protocol: h.protocol.String(), Path: h.path, RequestID: h.requestID})
	if err != nil { // cannot happen for this struct; stay fail-safe anyway
		return h.hostFailed("encode prepare request: " + err.Error())
	}
	headers := [][2]string{
		{":method", "POST"},
		{":path", PreparePath},
		{":authority", cfg.HostAuthority},
		{"content-type", "application/json"},
		{"x-request-id", h.requestID},
	}
	if cfg.Token != "" {
		headers = append(headers, [2]string{"authorization", "Bearer " + cfg.Token})
	}
	if _, err := proxywasm.DispatchHttpCall(cfg.HostCluster, headers, body, nil,
		uint32(cfg.PrepareTimeoutMs), h.onPrepareResponse); err != nil {
		return h.hostFailed("dispatch prepare: " + err.Error())
	}
	return proxywasm.ActionPause
}

// hostFailed counts and logs a host failure and decides the request's fate
// synchronously: continue (fail open) or answer 503.
func (h *httpContext) hostFailed(reason string) proxywasm.Action {
	h.plugin.hostFailures.inc()
	proxywasm.LogDebugf("chime: request %s: host prepare failed: %s", h.requestID, reason)
	if h.plugin.cfg.FailOpen {
		return proxywasm.ActionContinue
	}
	h.rejectUnavailable()
	return proxywasm.ActionPause
}

func (h *httpContext) rejectUnavailable() {
	err := proxywasm.SendHttpResponse(503, [][2]string{{"content-type", "application/json"}},
		[]byte(`{"error":{"type":"chime_host_unavailable","message":"chime host unavailable"}}`), -1)
	if err != nil {
		proxywasm.LogWarnf("chime: request %s: send 503: %v", h.requestID, err)
	}
}

func (h *httpContext) onPrepareResponse(numHeaders, bodySize, _ int) {
	if h.streamDone {
		return // the client went away; nothing to resume
	}
	failure := ""
	if numHeaders == 0 {
		failure = "no response (timeout, reset or unreachable)"
	} else if status := httpCallStatus(); status < 200 || status > 299 {
		failure = "status " + strconv.Itoa(status)
		if b, err := proxywasm.GetHttpCallResponseBody(0, min(bodySize, 256)); err == nil && len(b) > 0 {
			failure += ": " + string(b)
		}
	}
	if failure != "" {
		h.plugin.hostFailures.inc()
		proxywasm.LogDebugf("chime: request %s: host prepare failed: %s", h.requestID, failure)
		if !h.plugin.cfg.FailOpen {
			h.rejectUnavailable()
			return
		}
	} else {
		proxywasm.LogDebugf("chime: request %s: host prepared (%s, %d body bytes)", h.requestID, h.protocol, len(h.body))
	}
	if err := proxywasm.ResumeHttpRequest(); err != nil {
		proxywasm.LogDebugf("chime: request %s: resume: %v", h.requestID, err)
	}
}

// httpCallStatus is the :status of the HTTP call response being delivered,
// or 0 when absent or malformed.
func httpCallStatus() int {
	hs, err := proxywasm.GetHttpCallResponseHeaders()
	if err != nil {
		return 0
	}
	for _, kv := range hs {
		if kv[0] == ":status" {
			n, err := strconv.Atoi(kv[1])
			if err != nil {
				return 0
			}
			return n
		}
	}
	return 0
}

// newRequestID makes a random 128-bit hex id for requests without
// x-request-id. math/rand/v2's runtime source is seeded from WASI
// random_get, which Envoy provides.
func newRequestID() string {
	var b [16]byte
	for i := 0; i < len(b); i += 8 {
		v := rand.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return hex.EncodeToString(b[:])
}
