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
// (SPEC §13). Path segments are NUL-separated ("request\x00path"). s is nil
// for the root context, which has no stream info.
func (vm *vmInstance) property(s *stream, path string) ([]byte, abi.Status) {
	parts := abi.SplitPropertyPath(path)
	if len(parts) == 0 || parts[0] == "" {
		return nil, abi.StatusNotFound
	}
	top, rest := parts[0], parts[1:]
	leaf := func(v []byte, ok bool) ([]byte, abi.Status) {
		if !ok || len(rest) > 1 {
			return nil, abi.StatusNotFound
		}
		return v, abi.StatusOK
	}
	cfg := vm.f.cfg
	switch top {
	case "plugin_name":
		return leaf([]byte(cfg.PluginName), len(rest) == 0)
	case "plugin_root_id":
		return leaf([]byte(cfg.RootID), len(rest) == 0)
	case "plugin_vm_id":
		return leaf([]byte(cfg.VMID), len(rest) == 0)
	case "xds":
		if len(rest) == 0 {
			return nil, abi.StatusSerializationFailure
		}
		return vm.xdsProperty(s, rest[0], rest[1:])
	case "node", "cluster_name", "route_name", "listener_direction":
		// Pre-xds top-level names, kept for older plugins.
		return vm.xdsProperty(s, top, rest)
	}
	var info *httpfilter.StreamInfo
	if s != nil {
		info = s.cb.Info()
	}
	if info == nil {
		if v, ok := s.customProperty(top, rest); ok {
			return v, abi.StatusOK
		}
		return nil, abi.StatusNotFound
	}
	if len(rest) == 0 {
		switch top {
		case "request", "response", "connection", "source", "destination", "upstream":
			return nil, abi.StatusSerializationFailure // a map wrapper, not a value
		case "connection_id":
			return propUint(info.ConnectionID), abi.StatusOK
		}
		if v, ok := s.customProperty(top, nil); ok {
			return v, abi.StatusOK
		}
		return nil, abi.StatusNotFound
	}
	field := rest[0]
	switch top {
	case "request":
		return s.requestProperty(info, field, rest[1:])
	case "response":
		return s.responseProperty(info, field, rest[1:])
	case "connection":
		switch field {
		case "id":
			return leaf(propUint(info.ConnectionID), true)
		case "mtls":
			return leaf(propBool(false), true)
		case "requested_server_name":
			return leaf(nil, true)
		}
		return nil, abi.StatusNotFound
	case "source", "destination":
		addr := info.SourceAddress
		if top == "destination" {
			addr = info.DestinationAddr
		}
		switch field {
		case "address":
			return leaf([]byte(addr), addr != "")
		case "port":
			_, p, err := net.SplitHostPort(addr)
			port, err2 := strconv.Atoi(p)
			return leaf(propInt(int64(port)), err == nil && err2 == nil)
		}
		return nil, abi.StatusNotFound
	}
	if v, ok := s.customProperty(top, rest); ok {
		return v, abi.StatusOK
	}
	return nil, abi.StatusNotFound
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

func (s *stream) requestProperty(info *httpfilter.StreamInfo, field string, rest []string) ([]byte, abi.Status) {
	h := s.activeRequestHeaders()
	if field == "headers" {
		return headerMapProperty(h, rest)
	}
	if len(rest) > 0 {
		return nil, abi.StatusNotFound
	}
	header := func(name string) ([]byte, abi.Status) {
		if h == nil {
			return nil, abi.StatusNotFound
		}
		v, ok := h.Get(name)
		if !ok {
			return nil, abi.StatusNotFound
		}
		return []byte(v), abi.StatusOK
	}
	switch field {
	case "path":
		return header(":path")
	case "url_path", "query":
		if h == nil {
			return nil, abi.StatusNotFound
		}
		p, _ := h.Get(":path")
		before, after, hasQuery := strings.Cut(p, "?")
		if field == "url_path" {
			return []byte(before), abi.StatusOK
		}
		if !hasQuery {
			return []byte{}, abi.StatusOK
		}
		q, _, _ := strings.Cut(after, "#")
		return []byte(q), abi.StatusOK
	case "host":
		return header(":authority")
	case "scheme":
		return header(":scheme")
	case "method":
		return header(":method")
	case "referer":
		return header("referer")
	case "useragent":
		return header("user-agent")
	case "id":
		return header("x-request-id")
	case "protocol":
		if info.Protocol == "" {
			return nil, abi.StatusNotFound
		}
		return []byte(info.Protocol), abi.StatusOK
	case "time":
		return propInt(info.StartTime.UnixNano()), abi.StatusOK
	case "duration":
		if !s.accessLogPhase || info.StartTime.IsZero() {
			return nil, abi.StatusNotFound
		}
		return propInt(int64(time.Since(info.StartTime))), abi.StatusOK
	case "size":
		if h != nil {
			if cl, ok := h.Get("content-length"); ok {
				n, err := strconv.ParseInt(cl, 10, 64)
				if err != nil {
					return nil, abi.StatusNotFound
				}
				return propInt(n), abi.StatusOK
			}
		}
		return propInt(info.RequestSize), abi.StatusOK
	case "total_size":
		n := info.RequestSize
		if h != nil {
			n += int64(headersByteSize(*h))
		}
		return propInt(n), abi.StatusOK
	case "headers_bytes":
		if h == nil {
			return propInt(0), abi.StatusOK
		}
		return propInt(int64(headersByteSize(*h))), abi.StatusOK
	}
	return nil, abi.StatusNotFound
}

func (s *stream) responseProperty(info *httpfilter.StreamInfo, field string, rest []string) ([]byte, abi.Status) {
	h, t := s.activeResponseHeaders(), s.activeResponseTrailers()
	switch field {
	case "headers":
		return headerMapProperty(h, rest)
	case "trailers":
		return headerMapProperty(t, rest)
	}
	if len(rest) > 0 {
		return nil, abi.StatusNotFound
	}
	switch field {
	case "code":
		if info.ResponseCode == 0 {
			return nil, abi.StatusNotFound
		}
		return propInt(int64(info.ResponseCode)), abi.StatusOK
	case "code_details":
		if info.ResponseDetails == "" {
			return nil, abi.StatusNotFound
		}
		return []byte(info.ResponseDetails), abi.StatusOK
	case "size":
		return propInt(info.ResponseSize), abi.StatusOK
	case "total_size":
		n := info.ResponseSize
		if h != nil {
			n += int64(headersByteSize(*h))
		}
		if t != nil {
			n += int64(headersByteSize(*t))
		}
		return propInt(n), abi.StatusOK
	case "flags":
		return propInt(0), abi.StatusOK
	case "headers_bytes":
		if h == nil {
			return propInt(0), abi.StatusOK
		}
		return propInt(int64(headersByteSize(*h))), abi.StatusOK
	}
	return nil, abi.StatusNotFound
}

// xdsProperty serves xds.node (a serialized config.core.v3.Node with id and
// cluster), xds.node.{id,cluster}, xds.cluster_name, xds.route_name and
// xds.listener_direction.
func (vm *vmInstance) xdsProperty(s *stream, field string, rest []string) ([]byte, abi.Status) {
	env := vm.f.env
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
	if len(rest) > 0 || s == nil || s.cb.Info() == nil {
		return nil, abi.StatusNotFound
	}
	info := s.cb.Info()
	switch field {
	case "cluster_name":
		if info.ClusterName == "" {
			return nil, abi.StatusNotFound
		}
		return []byte(info.ClusterName), abi.StatusOK
	case "route_name":
		if info.RouteName == "" {
			return nil, abi.StatusNotFound
		}
		return []byte(info.RouteName), abi.StatusOK
	case "listener_direction":
		return propInt(0), abi.StatusOK // UNSPECIFIED: listeners here carry no direction
	case "filter_chain_name":
		return []byte{}, abi.StatusOK
	}
	return nil, abi.StatusNotFound
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

func (f *Factory) stats() httpfilter.Stats {
	if f.env.Stats != nil {
		return f.env.Stats
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
