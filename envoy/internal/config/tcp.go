package config

import (
	"fmt"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	netwasmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/wasm/v3"
	"google.golang.org/protobuf/proto"
)

// Envoy's names for the network filters the chime proxy runs, used in its
// terminal-filter messages.
const (
	TCPProxyFilterName    = "envoy.filters.network.tcp_proxy"
	NetworkWasmFilterName = "envoy.filters.network.wasm"
)

// TCPProxy is a listener's envoy.filters.network.tcp_proxy: every accepted
// connection is piped to one endpoint of Cluster.
type TCPProxy struct {
	StatPrefix string
	// Cluster is the upstream. Like Envoy, a name not in the config is not
	// an error at load: such connections are closed (downstream_cx_no_route).
	Cluster string
}

// translateFilterChain reads the single filter chain of a listener: either
// one http_connection_manager, or wasm network filters followed by
// tcp_proxy (docs/local-runtime.md "TCP listeners").
func translateFilterChain(l *listenerv3.Listener, ln *Listener, where string) error {
	chains := l.GetFilterChains()
	if len(chains) != 1 || len(chains[0].GetFilters()) == 0 {
		return fmt.Errorf("%s (%s): the chime proxy needs exactly one filter chain, ending in http_connection_manager or tcp_proxy", where, ln.Name)
	}
	filters := chains[0].GetFilters()
	for i, f := range filters {
		fw := fmt.Sprintf("%s.filter_chains[0].filters[%d]", where, i)
		msg, err := unpackTyped(f.GetTypedConfig(), f.GetName(), fw)
		if err != nil {
			return err
		}
		last := i == len(filters)-1
		switch m := msg.(type) {
		case *hcmv3.HttpConnectionManager:
			if len(filters) != 1 {
				return fmt.Errorf("%s: network filter %q: the chime proxy runs http_connection_manager only as the one filter of its chain", fw, f.GetName())
			}
			fw += ".typed_config"
			if err := checkSupported(m.ProtoReflect(), hcmFields, "", fw); err != nil {
				return err
			}
			return translateHCM(m, ln, fw)
		case *tcpproxyv3.TcpProxy:
			if !last {
				//lint:ignore ST1005 Envoy's own message, copied so both reject a config alike
				return fmt.Errorf("%s: Error: terminal filter named %s of type %s must be the last filter in a network filter chain.", fw, f.GetName(), TCPProxyFilterName)
			}
			if err := checkSupported(m.ProtoReflect(), tcpProxyFields, "", fw+".typed_config"); err != nil {
				return err
			}
			ln.TCPProxy = &TCPProxy{StatPrefix: m.GetStatPrefix(), Cluster: m.GetCluster()}
		case *netwasmv3.Wasm:
			if last {
				//lint:ignore ST1005 Envoy's own message, copied so both reject a config alike
				return fmt.Errorf("%s: Error: non-terminal filter named %s of type %s is the last filter in a network filter chain.", fw, f.GetName(), NetworkWasmFilterName)
			}
			if err := checkSupported(m.ProtoReflect(), networkWasmFields, "", fw+".typed_config"); err != nil {
				return err
			}
			wc, err := translateWasm(m.GetConfig(), fw+".typed_config.config")
			if err != nil {
				return err
			}
			wc.FilterName = f.GetName()
			wc.ListenerName = ln.Name
			ln.NetworkFilters = append(ln.NetworkFilters, wc)
		default:
			return fmt.Errorf("%s: network filter %q (%s): not supported by the chime proxy (http_connection_manager, tcp_proxy and wasm are)", fw, f.GetName(), protoName(msg))
		}
	}
	return nil
}

func protoName(m proto.Message) string { return string(m.ProtoReflect().Descriptor().FullName()) }

// tcpProxyFields is what the runtime implements of TcpProxy.
var tcpProxyFields = newAllowlist("stat_prefix", "cluster")

// networkWasmFields is envoy.extensions.filters.network.wasm.v3.Wasm: the
// HTTP filter's PluginConfig fields without the HTTP-only setting.
var networkWasmFields = func() allowlist {
	a := allowlist{}
	for k, v := range wasmFields {
		if k != "config.allow_on_headers_stop_iteration" {
			a[k] = v
		}
	}
	return a
}()
