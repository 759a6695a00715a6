//lint:file-ignore SA1019 Envoy still accepts the deprecated header matchers and fail_open, so the local runtime must too (docs/local-runtime.md).

package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	udpav1 "github.com/cncf/xds/go/udpa/type/v1"
	xdsv3 "github.com/cncf/xds/go/xds/type/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	wasmfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/wasm/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	wasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/wasm/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// RouterFilterName is the router http filter name.
const (
	RouterFilterName = "envoy.filters.http.router"
)

func translate(bs *bootstrapv3.Bootstrap) (*Config, error) {
	if err := checkSupported(bs.ProtoReflect(), bootstrapFields, "", ""); err != nil {
		return nil, err
	}
	cfg := &Config{NodeID: bs.GetNode().GetId(), NodeCluster: bs.GetNode().GetCluster()}
	if a := bs.GetAdmin(); a != nil && a.GetAddress() != nil {
		sa := a.GetAddress().GetSocketAddress()
		cfg.Admin = &Admin{Address: net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue()))}
	}
	for i, c := range bs.GetStaticResources().GetClusters() {
		cl, err := translateCluster(c)
		if err != nil {
			return nil, fmt.Errorf("static_resources.clusters[%d] (%s): %w", i, c.GetName(), err)
		}
		if cfg.Cluster(cl.Name) != nil {
			return nil, fmt.Errorf("static_resources.clusters[%d]: cluster manager: duplicate cluster '%s' found", i, cl.Name)
		}
		cfg.Clusters = append(cfg.Clusters, cl)
	}
	for i, l := range bs.GetStaticResources().GetListeners() {
		where := fmt.Sprintf("static_resources.listeners[%d]", i)
		ln, err := translateListener(l, where)
		if err != nil {
			return nil, err
		}
		if ln.Name == "" {
			ln.Name = fmt.Sprintf("listener_%d", i)
		}
		if cfg.Listener(ln.Name) != nil {
			return nil, fmt.Errorf("%s: error adding listener: duplicate listener name '%s'", where, ln.Name)
		}
		for _, vh := range ln.VirtualHosts {
			for _, r := range vh.Routes {
				if r.Cluster != "" && cfg.Cluster(r.Cluster) == nil {
					return nil, fmt.Errorf("%s (%s): route: unknown cluster '%s'", where, ln.Name, r.Cluster)
				}
			}
		}
		cfg.Listeners = append(cfg.Listeners, ln)
	}
	for i, ext := range bs.GetBootstrapExtensions() {
		where := fmt.Sprintf("bootstrap_extensions[%d]", i)
		m, err := unpackTyped(ext.GetTypedConfig(), ext.GetName(), where)
		if err != nil {
			return nil, err
		}
		ws, ok := m.(*wasmv3.WasmService)
		if !ok {
			return nil, fmt.Errorf("%s (%s): extension %s is not supported by the chime proxy (only envoy.extensions.wasm.v3.WasmService)", where, ext.GetName(), m.ProtoReflect().Descriptor().FullName())
		}
		if err := checkSupported(ws.ProtoReflect(), wasmServiceFields, "", where+".typed_config"); err != nil {
			return nil, err
		}
		wc, err := translateWasm(ws.GetConfig(), where+".typed_config.config")
		if err != nil {
			return nil, err
		}
		wc.FilterName = ext.GetName()
		cfg.Services = append(cfg.Services, WasmService{Name: ext.GetName(), Singleton: ws.GetSingleton(), Wasm: wc})
	}
	for i, ts := range bs.GetStatsConfig().GetStatsTags() {
		st := StatsTag{Name: ts.GetTagName(), FixedValue: ts.GetFixedValue()}
		where := fmt.Sprintf("stats_config.stats_tags[%d] (%s)", i, st.Name)
		switch {
		case ts.GetRegex() != "":
			re, err := regexp.Compile(ts.GetRegex())
			if err != nil {
				return nil, fmt.Errorf("%s: invalid regex: %w", where, err)
			}
			if re.NumSubexp() < 1 {
				return nil, fmt.Errorf("%s: the regex needs a capture group (the part cut from the stat name)", where)
			}
			st.Regex = re
		case ts.GetTagValue() == nil:
			return nil, fmt.Errorf("%s: no regex or fixed_value (Envoy's default tag regexes are not offered by the chime proxy)", where)
		}
		cfg.StatsTags = append(cfg.StatsTags, st)
	}
	return cfg, nil
}

func translateCluster(c *clusterv3.Cluster) (*Cluster, error) {
	cl := &Cluster{
		Name:           c.GetName(),
		Type:           c.GetType().String(),
		LBPolicy:       c.GetLbPolicy().String(),
		ConnectTimeout: durationOr(c.GetConnectTimeout(), DefaultConnectTimeout),
		BufferLimit:    uint32Or(c.GetPerConnectionBufferLimitBytes(), DefaultBufferLimit),
		MaxRequests:    DefaultMaxRequests,
	}
	for _, th := range c.GetCircuitBreakers().GetThresholds() {
		if th.GetPriority() != corev3.RoutingPriority_DEFAULT {
			continue // only the default priority is used here
		}
		if v := th.GetMaxRequests(); v != nil {
			cl.MaxRequests = int(v.GetValue())
		}
	}
	if c.GetClusterType() != nil {
		return nil, errors.New("cluster_type (custom cluster): not supported by the chime proxy")
	}
	switch cl.Type {
	case "STATIC", "STRICT_DNS", "LOGICAL_DNS":
	default:
		return nil, fmt.Errorf("type %s: not supported by the chime proxy (STATIC, STRICT_DNS, LOGICAL_DNS are)", cl.Type)
	}
	switch cl.LBPolicy {
	case "ROUND_ROBIN", "RANDOM":
	default:
		return nil, fmt.Errorf("lb_policy %s: not supported by the chime proxy (ROUND_ROBIN, RANDOM are)", cl.LBPolicy)
	}
	switch c.GetDnsLookupFamily() {
	case clusterv3.Cluster_V4_ONLY:
		cl.Network = "tcp4"
	case clusterv3.Cluster_V6_ONLY:
		cl.Network = "tcp6"
	default:
		cl.Network = "tcp"
	}
	la := c.GetLoadAssignment()
	for _, lle := range la.GetEndpoints() {
		for _, le := range lle.GetLbEndpoints() {
			sa := le.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil {
				return nil, errors.New("load_assignment: endpoint without socket_address")
			}
			if cl.Type == "STATIC" && net.ParseIP(sa.GetAddress()) == nil {
				return nil, fmt.Errorf("load_assignment: malformed IP address: %s (STATIC clusters need IPs)", sa.GetAddress())
			}
			cl.Endpoints = append(cl.Endpoints, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
			hostname := le.GetEndpoint().GetHostname()
			if hostname == "" && cl.Type != "STATIC" {
				hostname = sa.GetAddress()
			}
			cl.Hostnames = append(cl.Hostnames, hostname)
		}
	}
	if cl.Type == "LOGICAL_DNS" && len(cl.Endpoints) != 1 {
		return nil, errors.New("LOGICAL_DNS clusters must have a single locality_lb_endpoint and a single lb_endpoint")
	}
	if len(cl.Endpoints) == 0 {
		return nil, errors.New("load_assignment: no endpoints")
	}
	if ts := c.GetTransportSocket(); ts != nil {
		var err error
		if cl.TLS, err = translateTransportSocket(ts); err != nil {
			return nil, err
		}
	}
	return cl, nil
}

func translateListener(l *listenerv3.Listener, where string) (*Listener, error) {
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil {
		return nil, fmt.Errorf("%s.address: only socket_address is supported by the chime proxy", where)
	}
	ln := &Listener{
		Name:        l.GetName(),
		Host:        sa.GetAddress(),
		Port:        int(sa.GetPortValue()),
		BufferLimit: uint32Or(l.GetPerConnectionBufferLimitBytes(), DefaultBufferLimit),
	}
	if err := translateFilterChain(l, ln, where); err != nil {
		return nil, err
	}
	return ln, nil
}

// unpackTyped resolves a typed_config, given directly or wrapped in a
// udpa.type.v1 / xds.type.v3 TypedStruct, and validates it as Envoy does
// when it instantiates the extension.
func unpackTyped(a *anypb.Any, name, where string) (proto.Message, error) {
	if a == nil {
		return nil, fmt.Errorf("%s: Didn't find a registered implementation for '%s' with type URL: ''", where, name)
	}
	msg, err := a.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("%s.typed_config: %w", where, err)
	}
	var url string
	var value *structpb.Struct
	switch ts := msg.(type) {
	case *udpav1.TypedStruct:
		url, value = ts.GetTypeUrl(), ts.GetValue()
	case *xdsv3.TypedStruct:
		url, value = ts.GetTypeUrl(), ts.GetValue()
	}
	if url != "" || value != nil {
		mt, err := protoregistry.GlobalTypes.FindMessageByURL(url)
		if err != nil {
			return nil, fmt.Errorf("%s.typed_config: Didn't find a registered implementation for '%s' with type URL: '%s'", where, name, url)
		}
		msg = mt.New().Interface()
		js, err := protojson.Marshal(value)
		if err != nil {
			return nil, err
		}
		var tree any
		if err := json.Unmarshal(js, &tree); err != nil {
			return nil, err
		}
		if err := unmarshalJSONTree(tree, msg); err != nil {
			return nil, fmt.Errorf("%s.typed_config.value (%s): %s", where, mt.Descriptor().FullName(), cleanProtoErr(err))
		}
	}
	if v, ok := msg.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			return nil, fmt.Errorf("%s.typed_config: %w", where, err)
		}
	}
	return msg, nil
}

func translateHCM(hcm *hcmv3.HttpConnectionManager, ln *Listener, where string) error {
	switch hcm.GetCodecType() {
	case hcmv3.HttpConnectionManager_AUTO, hcmv3.HttpConnectionManager_HTTP1:
	default:
		return fmt.Errorf("%s.codec_type %s: not supported by the chime proxy (AUTO, HTTP1 are)", where, hcm.GetCodecType())
	}
	ln.StatPrefix = hcm.GetStatPrefix()
	ln.StreamIdleTimeout = durationOr(hcm.GetStreamIdleTimeout(), DefaultStreamIdleTimeout)
	ln.GenerateRequestID = hcm.GetGenerateRequestId() == nil || hcm.GetGenerateRequestId().GetValue()
	ln.ServerName = hcm.GetServerName()
	if ln.ServerName == "" {
		ln.ServerName = "envoy"
	}
	rc := hcm.GetRouteConfig()
	if rc == nil {
		return fmt.Errorf("%s: route_config is required by the chime proxy (rds and scoped_routes are not supported)", where)
	}
	ln.RouteConfigName = rc.GetName()
	if err := translateRoutes(rc, ln, where+".route_config"); err != nil {
		return err
	}
	filters := hcm.GetHttpFilters()
	for i, hf := range filters {
		fw := fmt.Sprintf("%s.http_filters[%d]", where, i)
		msg, err := unpackTyped(hf.GetTypedConfig(), hf.GetName(), fw)
		if err != nil {
			return err
		}
		last := i == len(filters)-1
		switch m := msg.(type) {
		case *routerv3.Router:
			if err := checkSupported(m.ProtoReflect(), routerFields, "", fw+".typed_config"); err != nil {
				return err
			}
			if !last {
				//lint:ignore ST1005 Envoy's own message, copied so both reject a config alike
				return fmt.Errorf("%s: Error: terminal filter named %s of type %s must be the last filter in a http filter chain.", fw, hf.GetName(), RouterFilterName)
			}
		case *wasmfilterv3.Wasm:
			if last {
				//lint:ignore ST1005 Envoy's own message, copied so both reject a config alike
				return fmt.Errorf("%s: Error: non-terminal filter named %s of type envoy.filters.http.wasm is the last filter in a http filter chain.", fw, hf.GetName())
			}
			if err := checkSupported(m.ProtoReflect(), wasmFields, "", fw+".typed_config"); err != nil {
				return err
			}
			wc, err := translateWasm(m.GetConfig(), fw+".typed_config.config")
			if err != nil {
				return err
			}
			wc.FilterName = hf.GetName()
			wc.ListenerName = ln.Name
			ln.HTTPFilters = append(ln.HTTPFilters, wc)
		default:
			return fmt.Errorf("%s: http filter %q (%s): not supported by the chime proxy (wasm and router are)", fw, hf.GetName(), msg.ProtoReflect().Descriptor().FullName())
		}
	}
	if len(filters) == 0 {
		return fmt.Errorf("%s.http_filters: the chime proxy needs the router filter (%s) last", where, RouterFilterName)
	}
	return nil
}

func translateRoutes(rc *routev3.RouteConfiguration, ln *Listener, where string) error {
	seen := map[string]bool{}
	for i, vh := range rc.GetVirtualHosts() {
		vw := fmt.Sprintf("%s.virtual_hosts[%d]", where, i)
		v := &VirtualHost{Name: vh.GetName(), Domains: vh.GetDomains()}
		for _, d := range v.Domains {
			d = strings.ToLower(d)
			if seen[d] {
				return fmt.Errorf("%s: Only unique values for domains are permitted. Duplicate entry of domain %s in route %s", vw, d, rc.GetName())
			}
			seen[d] = true
		}
		for j, r := range vh.GetRoutes() {
			rw := fmt.Sprintf("%s.routes[%d]", vw, j)
			route, err := translateRoute(r, rw)
			if err != nil {
				return err
			}
			v.Routes = append(v.Routes, route)
		}
		ln.VirtualHosts = append(ln.VirtualHosts, v)
	}
	return nil
}

func translateRoute(r *routev3.Route, where string) (*Route, error) {
	m := r.GetMatch()
	out := &Route{Name: r.GetName()}
	if md := r.GetMetadata(); md != nil {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(md)
		if err != nil {
			return nil, fmt.Errorf("%s.metadata: %w", where, err)
		}
		out.Metadata = b
	}
	out.Match.CaseSensitive = m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()
	switch ps := m.GetPathSpecifier().(type) {
	case *routev3.RouteMatch_Prefix:
		out.Match.Kind, out.Match.Value = PathPrefix, ps.Prefix
	case *routev3.RouteMatch_Path:
		out.Match.Kind, out.Match.Value = PathExact, ps.Path
	case *routev3.RouteMatch_SafeRegex:
		re, err := compileRE2(ps.SafeRegex)
		if err != nil {
			return nil, fmt.Errorf("%s.match.safe_regex: %w", where, err)
		}
		out.Match.Kind, out.Match.Value, out.Match.regex = PathRegex, ps.SafeRegex.GetRegex(), re
	default:
		return nil, fmt.Errorf("%s.match: one of prefix, path or safe_regex is required", where)
	}
	for k, h := range m.GetHeaders() {
		hm, err := translateHeaderMatcher(h)
		if err != nil {
			return nil, fmt.Errorf("%s.match.headers[%d]: %w", where, k, err)
		}
		out.Match.Headers = append(out.Match.Headers, hm)
	}
	switch {
	case r.GetRoute() != nil:
		ra := r.GetRoute()
		if ra.GetCluster() == "" {
			return nil, fmt.Errorf("%s.route: only cluster is supported by the chime proxy", where)
		}
		out.Cluster = ra.GetCluster()
		out.Timeout = durationOr(ra.GetTimeout(), DefaultRouteTimeout)
		out.HostRewrite = ra.GetHostRewriteLiteral()
		out.AutoHostRewrite = ra.GetAutoHostRewrite().GetValue()
	case r.GetDirectResponse() != nil:
		dr := r.GetDirectResponse()
		body, err := dataSource(dr.GetBody())
		if err != nil {
			return nil, fmt.Errorf("%s.direct_response.body: %w", where, err)
		}
		out.Direct = &DirectResponse{Status: int(dr.GetStatus()), Body: body}
	default:
		return nil, fmt.Errorf("%s: only route and direct_response actions are supported by the chime proxy", where)
	}
	return out, nil
}

func translateHeaderMatcher(h *routev3.HeaderMatcher) (HeaderMatcher, error) {
	hm := HeaderMatcher{
		Name:                strings.ToLower(h.GetName()),
		Invert:              h.GetInvertMatch(),
		TreatMissingAsEmpty: h.GetTreatMissingHeaderAsEmpty(),
	}
	var err error
	switch s := h.GetHeaderMatchSpecifier().(type) {
	case nil:
		hm.Kind, hm.Present = MatchPresent, true // no specifier: header must be present
	case *routev3.HeaderMatcher_PresentMatch:
		hm.Kind, hm.Present = MatchPresent, s.PresentMatch
	case *routev3.HeaderMatcher_ExactMatch:
		hm.Kind, hm.Value = MatchExact, s.ExactMatch
	case *routev3.HeaderMatcher_PrefixMatch:
		hm.Kind, hm.Value = MatchPrefix, s.PrefixMatch
	case *routev3.HeaderMatcher_SuffixMatch:
		hm.Kind, hm.Value = MatchSuffix, s.SuffixMatch
	case *routev3.HeaderMatcher_ContainsMatch:
		hm.Kind, hm.Value = MatchContains, s.ContainsMatch
	case *routev3.HeaderMatcher_SafeRegexMatch:
		hm.Kind, hm.Value = MatchRegex, s.SafeRegexMatch.GetRegex()
		hm.regex, err = compileRE2(s.SafeRegexMatch)
	case *routev3.HeaderMatcher_StringMatch:
		sm := s.StringMatch
		hm.IgnoreCase = sm.GetIgnoreCase()
		switch p := sm.GetMatchPattern().(type) {
		case *matcherv3.StringMatcher_Exact:
			hm.Kind, hm.Value = MatchExact, p.Exact
		case *matcherv3.StringMatcher_Prefix:
			hm.Kind, hm.Value = MatchPrefix, p.Prefix
		case *matcherv3.StringMatcher_Suffix:
			hm.Kind, hm.Value = MatchSuffix, p.Suffix
		case *matcherv3.StringMatcher_Contains:
			hm.Kind, hm.Value = MatchContains, p.Contains
		case *matcherv3.StringMatcher_SafeRegex:
			hm.Kind, hm.Value = MatchRegex, p.SafeRegex.GetRegex()
			hm.regex, err = compileRE2(p.SafeRegex)
		default:
			return hm, errors.New("string_match: this pattern is not supported by the chime proxy")
		}
	default:
		return hm, errors.New("this header match is not supported by the chime proxy")
	}
	return hm, err
}

// compileRE2 compiles a safe_regex for a full match (Go's regexp is RE2).
func compileRE2(m *matcherv3.RegexMatcher) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + m.GetRegex() + `)$`)
}

func translateWasm(pc *wasmv3.PluginConfig, where string) (httpfilter.WasmConfig, error) {
	wc := httpfilter.WasmConfig{PluginName: pc.GetName(), RootID: pc.GetRootId()}
	wc.AllowOnHeadersStopIteration = pc.GetAllowOnHeadersStopIteration().GetValue()
	switch pc.GetFailurePolicy() {
	case wasmv3.FailurePolicy_UNSPECIFIED:
		wc.FailOpen = pc.GetFailOpen()
	case wasmv3.FailurePolicy_FAIL_OPEN:
		wc.FailOpen = true
	}
	vm := pc.GetVmConfig()
	if vm == nil {
		return wc, fmt.Errorf("%s.vm_config: required by the chime proxy", where)
	}
	wc.VMID, wc.Runtime = vm.GetVmId(), vm.GetRuntime()
	local := vm.GetCode().GetLocal()
	if local == nil {
		return wc, fmt.Errorf("%s.vm_config.code.local: required (remote code is not supported by the chime proxy)", where)
	}
	switch s := local.GetSpecifier().(type) {
	case *corev3.DataSource_Filename:
		wc.CodePath = s.Filename
	case *corev3.DataSource_InlineBytes:
		wc.CodeInline = s.InlineBytes
	case *corev3.DataSource_InlineString:
		wc.CodeInline = []byte(s.InlineString)
	case *corev3.DataSource_EnvironmentVariable:
		wc.CodeInline = []byte(os.Getenv(s.EnvironmentVariable))
	}
	if wc.CodePath == "" && len(wc.CodeInline) == 0 {
		return wc, fmt.Errorf("%s.vm_config.code.local: no wasm code given", where)
	}
	var err error
	if wc.VMConfiguration, err = anyToBytes(vm.GetConfiguration()); err != nil {
		return wc, fmt.Errorf("%s.vm_config.configuration: %w", where, err)
	}
	if wc.PluginConfiguration, err = anyToBytes(pc.GetConfiguration()); err != nil {
		return wc, fmt.Errorf("%s.configuration: %w", where, err)
	}
	if ev := vm.GetEnvironmentVariables(); ev != nil {
		wc.EnvVars = map[string]string{}
		for _, k := range ev.GetHostEnvKeys() {
			if v, ok := os.LookupEnv(k); ok {
				wc.EnvVars[k] = v
			}
		}
		for k, v := range ev.GetKeyValues() {
			if contains(ev.GetHostEnvKeys(), k) {
				return wc, fmt.Errorf("%s.vm_config.environment_variables: Key %s is duplicated in envoy.extensions.wasm.v3.VmConfig.environment_variables", where, k)
			}
			wc.EnvVars[k] = v
		}
	}
	return wc, nil
}

// anyToBytes turns a wasm configuration into the bytes the plugin sees:
// StringValue and BytesValue unwrapped, Struct as JSON, anything else as
// its serialized proto (Envoy's rules).
func anyToBytes(a *anypb.Any) ([]byte, error) {
	if a == nil {
		return nil, nil
	}
	msg, err := a.UnmarshalNew()
	if err != nil {
		return nil, err
	}
	switch m := msg.(type) {
	case *wrapperspb.StringValue:
		return []byte(m.GetValue()), nil
	case *wrapperspb.BytesValue:
		return m.GetValue(), nil
	case *structpb.Struct:
		return m.MarshalJSON()
	}
	return a.GetValue(), nil
}

func dataSource(ds *corev3.DataSource) ([]byte, error) {
	switch s := ds.GetSpecifier().(type) {
	case nil:
		return nil, nil
	case *corev3.DataSource_InlineString:
		return []byte(s.InlineString), nil
	case *corev3.DataSource_InlineBytes:
		return s.InlineBytes, nil
	case *corev3.DataSource_Filename:
		return os.ReadFile(s.Filename)
	}
	return nil, errors.New("not supported by the chime proxy")
}

func durationOr(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}

func uint32Or(v *wrapperspb.UInt32Value, def int) int {
	if v == nil {
		return def
	}
	return int(v.GetValue())
}

func contains(list []string, s string) bool {
	for _, e := range list {
		if e == s {
			return true
		}
	}
	return false
}
