package wasmhost

import (
	"encoding/binary"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	abi "github.com/chimehq/chime/internal/proxywasmabi"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// Property values are serialized as Envoy's serializeValue does: strings
// and bytes raw, integers (and timestamps/durations, in nanoseconds) as
// 8-byte little endian, bools as one byte, maps as header pairs.
func propInt(v int64) []byte   { return binary.LittleEndian.AppendUint64(nil, uint64(v)) }
func propUint(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
func propBool(v bool) []byte {
	if v {
		return []byte{1}
	}
	return []byte{0}
}

// property answers proxy_get_property for the common Envoy attribute paths
// (docs/local-runtime.md). Path segments are NUL-separated ("request\x00path"). s is nil
// for the root context, which has no stream info.
func (vm *vmInstance) property(s *stream, path string) ([]byte, abi.Status) {
	parts := abi.SplitPropertyPath(path)
	if len(parts) == 0 || parts[0] == "" {
		return nil, abi.StatusNotFound
	}
	top, rest := parts[0], parts[1:]
	if fn, ok := pluginProperties[top]; ok {
		return fn(propQuery{vm: vm, s: s, top: top, rest: rest})
	}
	var info *httpfilter.StreamInfo
	if s != nil {
		info = s.cb.Info()
	}
	fields, isMap := streamProperties[top]
	switch {
	case info == nil:
	case len(rest) == 0 && isMap:
		return nil, abi.StatusSerializationFailure // a map wrapper, not a value
	case len(rest) == 0 && top == "connection_id":
		return propUint(info.ConnectionID), abi.StatusOK
	case top == "metadata":
		// The stream's dynamic metadata, a serialized core.v3.Metadata.
		// Nothing here sets dynamic metadata (Envoy's wasm ABI has no call
		// for it), so it is always the empty message, and any field below
		// it is absent.
		if len(rest) == 0 {
			return []byte{}, abi.StatusOK
		}
		return nil, abi.StatusNotFound
	case isMap:
		fn, ok := fields[rest[0]]
		if !ok {
			return nil, abi.StatusNotFound
		}
		return fn(propQuery{vm: vm, s: s, info: info, top: top, rest: rest[1:]})
	}
	if v, ok := s.customProperty(top, rest); ok {
		return v, abi.StatusOK
	}
	return nil, abi.StatusNotFound
}

// propQuery is one lookup: top is the path's first segment and rest what
// follows the segment the table matched.
type propQuery struct {
	vm   *vmInstance
	s    *stream
	info *httpfilter.StreamInfo // nil for pluginProperties
	top  string
	rest []string
}

type propFunc func(q propQuery) ([]byte, abi.Status)

// leaf is a property that takes no further path segments.
func leaf(fn func(q propQuery) ([]byte, abi.Status)) propFunc {
	return func(q propQuery) ([]byte, abi.Status) {
		if len(q.rest) > 0 {
			return nil, abi.StatusNotFound
		}
		return fn(q)
	}
}

func found(v []byte, ok bool) ([]byte, abi.Status) {
	if !ok {
		return nil, abi.StatusNotFound
	}
	return v, abi.StatusOK
}

// pluginProperties answer on any context, stream or not.
var pluginProperties = map[string]propFunc{
	"plugin_name":    leaf(func(q propQuery) ([]byte, abi.Status) { return []byte(q.vm.pluginCfg().PluginName), abi.StatusOK }),
	"plugin_root_id": leaf(func(q propQuery) ([]byte, abi.Status) { return []byte(q.vm.pluginCfg().RootID), abi.StatusOK }),
	"plugin_vm_id":   leaf(func(q propQuery) ([]byte, abi.Status) { return []byte(q.vm.g.cfg.VMID), abi.StatusOK }),
	"xds": func(q propQuery) ([]byte, abi.Status) {
		if len(q.rest) == 0 {
			return nil, abi.StatusSerializationFailure
		}
		return q.vm.xdsProperty(q.s, q.rest[0], q.rest[1:])
	},
	// Pre-xds top-level names, kept for older plugins.
	"node":               preXDS,
	"cluster_name":       preXDS,
	"route_name":         preXDS,
	"listener_direction": preXDS,
	"route_metadata":     preXDS,
}

func preXDS(q propQuery) ([]byte, abi.Status) { return q.vm.xdsProperty(q.s, q.top, q.rest) }

// streamProperties are the maps of stream attributes, by field. A bare
// map name is SERIALIZATION_FAILURE; an unknown field NOT_FOUND.
var streamProperties = map[string]map[string]propFunc{
	"request":     requestProperties,
	"response":    responseProperties,
	"connection":  connectionProperties,
	"source":      addressProperties(func(i *httpfilter.StreamInfo) string { return i.SourceAddress }),
	"destination": addressProperties(func(i *httpfilter.StreamInfo) string { return i.DestinationAddr }),
	"upstream":    {},
}

var connectionProperties = map[string]propFunc{
	"id":                    leaf(func(q propQuery) ([]byte, abi.Status) { return propUint(q.info.ConnectionID), abi.StatusOK }),
	"mtls":                  leaf(func(propQuery) ([]byte, abi.Status) { return propBool(false), abi.StatusOK }),
	"requested_server_name": leaf(func(propQuery) ([]byte, abi.Status) { return nil, abi.StatusOK }),
}

func addressProperties(addr func(*httpfilter.StreamInfo) string) map[string]propFunc {
	return map[string]propFunc{
		"address": leaf(func(q propQuery) ([]byte, abi.Status) {
			a := addr(q.info)
			return found([]byte(a), a != "")
		}),
		"port": leaf(func(q propQuery) ([]byte, abi.Status) {
			_, p, err := net.SplitHostPort(addr(q.info))
			port, err2 := strconv.Atoi(p)
			return found(propInt(int64(port)), err == nil && err2 == nil)
		}),
	}
}

// customProperty is a value stored by proxy_set_property (Envoy keeps it as
// filter state "wasm.<path>" and serves it back raw).
func (s *stream) customProperty(name string, rest []string) ([]byte, bool) {
	if s == nil || len(rest) > 0 {
		return nil, false
	}
	v, ok := s.props[name]
	return v, ok
}

// activeRequestHeaders is the header map property lookups see: the one held
// by the current callback, or in proxy_on_log the final one.
func (s *stream) activeRequestHeaders() *httpfilter.Headers {
	if s.reqHeaders != nil {
		return s.reqHeaders
	}
	if s.accessLogPhase {
		return s.cb.RequestHeaders()
	}
	return nil
}

func (s *stream) activeResponseHeaders() *httpfilter.Headers {
	if s.respHeaders != nil {
		return s.respHeaders
	}
	if s.accessLogPhase {
		return s.cb.ResponseHeaders()
	}
	return nil
}

func (s *stream) activeResponseTrailers() *httpfilter.Headers {
	if s.respTrailers != nil {
		return s.respTrailers
	}
	if s.accessLogPhase {
		return s.cb.ResponseTrailers()
	}
	return nil
}

// headerMapProperty serves "<x>.headers" (the whole map as pairs) and
// "<x>.headers.<name>" (all values joined by ",").
func headerMapProperty(h *httpfilter.Headers, rest []string) ([]byte, abi.Status) {
	switch len(rest) {
	case 0:
		if h == nil {
			return encodePairs(nil), abi.StatusOK
		}
		return encodePairs(*h), abi.StatusOK
	case 1:
		if h == nil {
			return nil, abi.StatusNotFound
		}
		key := strings.ToLower(rest[0])
		var vals []string
		for _, e := range *h {
			if e.Key == key {
				vals = append(vals, e.Value)
			}
		}
		if len(vals) == 0 {
			return nil, abi.StatusNotFound
		}
		return []byte(strings.Join(vals, ",")), abi.StatusOK
	}
	return nil, abi.StatusNotFound
}

// requestHeader is a request field read from a request header.
func requestHeader(name string) propFunc {
	return leaf(func(q propQuery) ([]byte, abi.Status) {
		h := q.s.activeRequestHeaders()
		if h == nil {
			return nil, abi.StatusNotFound
		}
		v, ok := h.Get(name)
		return found([]byte(v), ok)
	})
}

// requestPath serves url_path (the path without the query) and query.
func requestPath(query bool) propFunc {
	return leaf(func(q propQuery) ([]byte, abi.Status) {
		h := q.s.activeRequestHeaders()
		if h == nil {
			return nil, abi.StatusNotFound
		}
		p, _ := h.Get(":path")
		before, after, hasQuery := strings.Cut(p, "?")
		if !query {
			return []byte(before), abi.StatusOK
		}
		if !hasQuery {
			return []byte{}, abi.StatusOK
		}
		v, _, _ := strings.Cut(after, "#")
		return []byte(v), abi.StatusOK
	})
}

// headersBytes is a map's Envoy byteSize, 0 when there is none.
func headersBytes(h *httpfilter.Headers) int64 {
	if h == nil {
		return 0
	}
	return int64(headersByteSize(*h))
}

var requestProperties = map[string]propFunc{
	"headers":   func(q propQuery) ([]byte, abi.Status) { return headerMapProperty(q.s.activeRequestHeaders(), q.rest) },
	"path":      requestHeader(":path"),
	"url_path":  requestPath(false),
	"query":     requestPath(true),
	"host":      requestHeader(":authority"),
	"scheme":    requestHeader(":scheme"),
	"method":    requestHeader(":method"),
	"referer":   requestHeader("referer"),
	"useragent": requestHeader("user-agent"),
	"id":        requestHeader("x-request-id"),
	"protocol": leaf(func(q propQuery) ([]byte, abi.Status) {
		return found([]byte(q.info.Protocol), q.info.Protocol != "")
	}),
	"time": leaf(func(q propQuery) ([]byte, abi.Status) { return propInt(q.info.StartTime.UnixNano()), abi.StatusOK }),
	"duration": leaf(func(q propQuery) ([]byte, abi.Status) {
		ok := q.s.accessLogPhase && !q.info.StartTime.IsZero()
		return found(propInt(int64(time.Since(q.info.StartTime))), ok)
	}),
	"size": leaf(func(q propQuery) ([]byte, abi.Status) {
		if h := q.s.activeRequestHeaders(); h != nil {
			if cl, ok := h.Get("content-length"); ok {
				n, err := strconv.ParseInt(cl, 10, 64)
				return found(propInt(n), err == nil)
			}
		}
		return propInt(q.info.RequestSize), abi.StatusOK
	}),
	"total_size": leaf(func(q propQuery) ([]byte, abi.Status) {
		return propInt(q.info.RequestSize + headersBytes(q.s.activeRequestHeaders())), abi.StatusOK
	}),
	"headers_bytes": leaf(func(q propQuery) ([]byte, abi.Status) {
		return propInt(headersBytes(q.s.activeRequestHeaders())), abi.StatusOK
	}),
}

var responseProperties = map[string]propFunc{
	"headers":  func(q propQuery) ([]byte, abi.Status) { return headerMapProperty(q.s.activeResponseHeaders(), q.rest) },
	"trailers": func(q propQuery) ([]byte, abi.Status) { return headerMapProperty(q.s.activeResponseTrailers(), q.rest) },
	"code": leaf(func(q propQuery) ([]byte, abi.Status) {
		return found(propInt(int64(q.info.ResponseCode)), q.info.ResponseCode != 0)
	}),
	"code_details": leaf(func(q propQuery) ([]byte, abi.Status) {
		return found([]byte(q.info.ResponseDetails), q.info.ResponseDetails != "")
	}),
	"size": leaf(func(q propQuery) ([]byte, abi.Status) { return propInt(q.info.ResponseSize), abi.StatusOK }),
	"total_size": leaf(func(q propQuery) ([]byte, abi.Status) {
		n := q.info.ResponseSize + headersBytes(q.s.activeResponseHeaders()) + headersBytes(q.s.activeResponseTrailers())
		return propInt(n), abi.StatusOK
	}),
	"flags": leaf(func(propQuery) ([]byte, abi.Status) { return propInt(0), abi.StatusOK }),
	"headers_bytes": leaf(func(q propQuery) ([]byte, abi.Status) {
		return propInt(headersBytes(q.s.activeResponseHeaders())), abi.StatusOK
	}),
}

// xdsProperty serves xds.node (a serialized config.core.v3.Node with id and
// cluster), xds.node.{id,cluster}, and the per-stream xds fields.
func (vm *vmInstance) xdsProperty(s *stream, field string, rest []string) ([]byte, abi.Status) {
	env := vm.g.env
	if field == "node" {
		switch {
		case len(rest) == 0:
			return marshalNode(env.NodeID, env.NodeCluster), abi.StatusOK
		case len(rest) == 1 && rest[0] == "id":
			return []byte(env.NodeID), abi.StatusOK
		case len(rest) == 1 && rest[0] == "cluster":
			return []byte(env.NodeCluster), abi.StatusOK
		}
		return nil, abi.StatusNotFound
	}
	fn, ok := xdsStreamProperties[field]
	if !ok || len(rest) > 0 || s == nil || s.cb.Info() == nil {
		return nil, abi.StatusNotFound
	}
	return fn(s.cb.Info())
}

var xdsStreamProperties = map[string]func(*httpfilter.StreamInfo) ([]byte, abi.Status){
	"cluster_name": func(i *httpfilter.StreamInfo) ([]byte, abi.Status) {
		return found([]byte(i.ClusterName), i.ClusterName != "")
	},
	"route_name": func(i *httpfilter.StreamInfo) ([]byte, abi.Status) {
		return found([]byte(i.RouteName), i.RouteName != "")
	},
	// The picked route's metadata (serialized core.v3.Metadata, empty when
	// the route has none); NOT_FOUND before a route is picked.
	"route_metadata": func(i *httpfilter.StreamInfo) ([]byte, abi.Status) {
		return found(append([]byte{}, i.RouteMetadata...), i.RouteMatched)
	},
	// UNSPECIFIED: listeners here carry no direction.
	"listener_direction": func(*httpfilter.StreamInfo) ([]byte, abi.Status) { return propInt(0), abi.StatusOK },
	"filter_chain_name":  func(*httpfilter.StreamInfo) ([]byte, abi.Status) { return []byte{}, abi.StatusOK },
}

// marshalNode encodes config.core.v3.Node{id: 1, cluster: 2} in protobuf
// wire format.
func marshalNode(id, cluster string) []byte {
	var b []byte
	for i, v := range []string{id, cluster} {
		if v == "" {
			continue
		}
		b = append(b, byte((i+1)<<3|2))
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// --- a stat store for factories built without one ----------------------

func (g *vmGroup) stats() httpfilter.Stats {
	if g.env.Stats != nil {
		return g.env.Stats
	}
	return localStats
}

var localStats = &memStats{m: map[string]*memMetric{}}

type memStats struct {
	mu sync.Mutex
	m  map[string]*memMetric
}

func (s *memStats) Define(kind httpfilter.MetricKind, name string) httpfilter.Metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := strconv.Itoa(int(kind)) + "/" + name
	if m, ok := s.m[key]; ok {
		return m
	}
	m := &memMetric{kind: kind}
	s.m[key] = m
	return m
}

type memMetric struct {
	kind  httpfilter.MetricKind
	v     atomic.Int64
	count atomic.Int64
}

func (m *memMetric) Add(d int64) { m.v.Add(d) }
func (m *memMetric) Set(v int64) {
	if m.kind == httpfilter.MetricHistogram {
		m.count.Add(1)
		return
	}
	m.v.Store(v)
}
func (m *memMetric) Value() int64 {
	if m.kind == httpfilter.MetricHistogram {
		return m.count.Load()
	}
	return m.v.Load()
}
