package config

import (
	"fmt"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// allowlist holds the field paths (proto names joined by ".") this runtime
// implements. A path marks a whole subtree as handled; its prefixes are
// recorded so the walk knows to descend into them.
type allowlist map[string]bool // path → true if a handled leaf/subtree

func newAllowlist(paths ...string) allowlist {
	a := allowlist{}
	for _, p := range paths {
		a[p] = true
		for i := strings.LastIndexByte(p, '.'); i > 0; i = strings.LastIndexByte(p[:i], '.') {
			if _, ok := a[p[:i]]; !ok {
				a[p[:i]] = false
			}
		}
	}
	return a
}

// checkSupported fails on the first populated field of m that is not in
// allow, naming it by its position in the file (display).
func checkSupported(m protoreflect.Message, allow allowlist, path, display string) error {
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := joinPath(path, string(fd.Name()))
		d := joinPath(display, string(fd.Name()))
		leaf, known := allow[p]
		if !known {
			err = fmt.Errorf("%s: not supported by the chime proxy", d)
			return false
		}
		if leaf {
			return true
		}
		switch {
		case fd.IsMap():
			err = fmt.Errorf("%s: not supported by the chime proxy", d)
		case fd.IsList():
			if fd.Message() == nil {
				return true
			}
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = checkSupported(l.Get(i).Message(), allow, p, fmt.Sprintf("%s[%d]", d, i))
			}
		case fd.Message() != nil:
			err = checkSupported(v.Message(), allow, p, d)
		}
		return err == nil
	})
	return err
}

func joinPath(a, b string) string {
	if a == "" {
		return b
	}
	return a + "." + b
}

var bootstrapFields = newAllowlist(
	"node.id",
	"node.cluster",
	"static_resources.listeners.name",
	"static_resources.listeners.address.socket_address.address",
	"static_resources.listeners.address.socket_address.port_value",
	"static_resources.listeners.per_connection_buffer_limit_bytes",
	"static_resources.listeners.filter_chains.name",
	"static_resources.listeners.filter_chains.filters.name",
	"static_resources.listeners.filter_chains.filters.typed_config", // checked on its own
	"static_resources.clusters.name",
	"static_resources.clusters.type",
	"static_resources.clusters.connect_timeout",
	"static_resources.clusters.lb_policy",
	"static_resources.clusters.dns_lookup_family",
	"static_resources.clusters.per_connection_buffer_limit_bytes",
	// max_requests is enforced on http_call; the others are accepted.
	"static_resources.clusters.circuit_breakers.thresholds.priority",
	"static_resources.clusters.circuit_breakers.thresholds.max_requests",
	"static_resources.clusters.circuit_breakers.thresholds.max_connections",
	"static_resources.clusters.circuit_breakers.thresholds.max_pending_requests",
	"static_resources.clusters.circuit_breakers.thresholds.max_retries",
	"static_resources.clusters.load_assignment.cluster_name",
	"static_resources.clusters.load_assignment.endpoints.lb_endpoints.endpoint.address.socket_address.address",
	"static_resources.clusters.load_assignment.endpoints.lb_endpoints.endpoint.address.socket_address.port_value",
	"static_resources.clusters.load_assignment.endpoints.lb_endpoints.endpoint.hostname",
	"static_resources.clusters.transport_socket.name",
	"static_resources.clusters.transport_socket.typed_config", // checked on its own
	"admin.address.socket_address.address",
	"admin.address.socket_address.port_value",
	"admin.access_log_path", // admin access log: accepted, not written
	"stats_config.stats_tags.tag_name",
	"stats_config.stats_tags.regex",
	"stats_config.stats_tags.fixed_value",
	"stats_config.use_all_default_tags", // the built-in stats' tags are always Envoy's defaults
	"bootstrap_extensions.name",
	"bootstrap_extensions.typed_config", // checked on its own (WasmService)
)

var hcmFields = func() allowlist {
	base := []string{
		"stat_prefix", "codec_type", "stream_idle_timeout", "generate_request_id", "server_name",
		"http_filters.name", "http_filters.typed_config", // checked on its own
		"route_config.name",
		"route_config.virtual_hosts.name",
		"route_config.virtual_hosts.domains",
		"route_config.virtual_hosts.routes.name",
		"route_config.virtual_hosts.routes.metadata", // served as the route_metadata property
		"route_config.virtual_hosts.routes.match.prefix",
		"route_config.virtual_hosts.routes.match.path",
		"route_config.virtual_hosts.routes.match.safe_regex.regex",
		"route_config.virtual_hosts.routes.match.safe_regex.google_re2",
		"route_config.virtual_hosts.routes.match.case_sensitive",
		"route_config.virtual_hosts.routes.route.cluster",
		"route_config.virtual_hosts.routes.route.timeout",
		"route_config.virtual_hosts.routes.route.host_rewrite_literal",
		"route_config.virtual_hosts.routes.route.auto_host_rewrite",
		"route_config.virtual_hosts.routes.direct_response.status",
		"route_config.virtual_hosts.routes.direct_response.body.inline_string",
		"route_config.virtual_hosts.routes.direct_response.body.inline_bytes",
		"route_config.virtual_hosts.routes.direct_response.body.filename",
	}
	for _, h := range []string{
		"name", "exact_match", "prefix_match", "suffix_match", "contains_match", "present_match",
		"safe_regex_match.regex", "safe_regex_match.google_re2",
		"string_match.exact", "string_match.prefix", "string_match.suffix", "string_match.contains",
		"string_match.safe_regex.regex", "string_match.safe_regex.google_re2", "string_match.ignore_case",
		"invert_match", "treat_missing_header_as_empty",
	} {
		base = append(base, "route_config.virtual_hosts.routes.match.headers."+h)
	}
	return newAllowlist(base...)
}()

var wasmFields = newAllowlist(
	"config.name",
	"config.root_id",
	"config.configuration",
	"config.fail_open",
	"config.failure_policy",
	"config.allow_on_headers_stop_iteration",
	"config.vm_config.vm_id",
	"config.vm_config.runtime",
	"config.vm_config.configuration",
	"config.vm_config.allow_precompiled", // no precompiled form exists for wazero; harmless
	"config.vm_config.code.local.filename",
	"config.vm_config.code.local.inline_bytes",
	"config.vm_config.code.local.inline_string",
	"config.vm_config.code.local.environment_variable",
	"config.vm_config.environment_variables.host_env_keys",
	"config.vm_config.environment_variables.key_values",
)

// wasmServiceFields is envoy.extensions.wasm.v3.WasmService: singleton
// plus the same PluginConfig fields as the HTTP filter.
var wasmServiceFields = func() allowlist {
	a := allowlist{"singleton": true}
	for k, v := range wasmFields {
		if k == "config.allow_on_headers_stop_iteration" {
			continue // an HTTP filter setting
		}
		a[k] = v
	}
	return a
}()

var routerFields = newAllowlist()
