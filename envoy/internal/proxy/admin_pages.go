package proxy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Envoy's default circuit breaker thresholds, shown by /clusters.
const (
	defaultMaxConnections     = 1024
	defaultMaxPendingRequests = 1024
	defaultMaxRequests        = 1024
	defaultMaxRetries         = 3
)

// writeListeners is Envoy's /listeners: "name::host:port" per listener, or
// envoy.admin.v3.Listeners with ?format=json. Harnesses poll it to learn
// that the listeners are bound.
func writeListeners(w http.ResponseWriter, r *http.Request, info ServerInfo) {
	if info.Config == nil {
		return
	}
	type bound struct{ name, addr string }
	var ls []bound
	for _, l := range info.Config.Listeners {
		addr := l.Address()
		if info.ListenerAddr != nil {
			if a := info.ListenerAddr(l.Name); a != "" {
				addr = a
			}
		}
		ls = append(ls, bound{l.Name, addr})
	}
	if r.URL.Query().Get("format") == "json" {
		msg := &adminv3.Listeners{}
		for _, l := range ls {
			msg.ListenerStatuses = append(msg.ListenerStatuses, &adminv3.ListenerStatus{Name: l.name, LocalAddress: socketAddress(l.addr)})
		}
		writeProtoJSON(w, msg)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "%s::%s\n", l.name, l.addr)
	}
	_, _ = w.Write([]byte(b.String()))
}

// writeClusters is Envoy's /clusters text page (circuit breakers, then one
// block per host), or envoy.admin.v3.Clusters with ?format=json. Hosts are
// the configured endpoints; DNS names are resolved per connection here, so
// the name is shown where Envoy would show the resolved address.
func writeClusters(w http.ResponseWriter, r *http.Request, info ServerInfo) {
	if info.Config == nil {
		return
	}
	if r.URL.Query().Get("format") == "json" {
		msg := &adminv3.Clusters{}
		for _, c := range info.Config.Clusters {
			cs := &adminv3.ClusterStatus{Name: c.Name, ObservabilityName: c.Name}
			for i, ep := range c.Endpoints {
				hs := &adminv3.HostStatus{
					Address:      socketAddress(ep),
					Weight:       1,
					HealthStatus: &adminv3.HostHealthStatus{EdsHealthStatus: corev3.HealthStatus_HEALTHY},
				}
				if i < len(c.Hostnames) {
					hs.Hostname = c.Hostnames[i]
				}
				cs.HostStatuses = append(cs.HostStatuses, hs)
			}
			msg.ClusterStatuses = append(msg.ClusterStatuses, cs)
		}
		writeProtoJSON(w, msg)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
	var b strings.Builder
	for _, c := range info.Config.Clusters {
		n := c.Name
		fmt.Fprintf(&b, "%s::observability_name::%s\n", n, n)
		for _, prio := range []string{"default", "high"} {
			fmt.Fprintf(&b, "%s::%s_priority::max_connections::%d\n", n, prio, defaultMaxConnections)
			fmt.Fprintf(&b, "%s::%s_priority::max_pending_requests::%d\n", n, prio, defaultMaxPendingRequests)
			fmt.Fprintf(&b, "%s::%s_priority::max_requests::%d\n", n, prio, defaultMaxRequests)
			fmt.Fprintf(&b, "%s::%s_priority::max_retries::%d\n", n, prio, defaultMaxRetries)
		}
		fmt.Fprintf(&b, "%s::added_via_api::false\n", n)
		for i, ep := range c.Endpoints {
			hostname := ""
			if i < len(c.Hostnames) {
				hostname = c.Hostnames[i]
			}
			for _, kv := range [][2]string{
				{"hostname", hostname}, {"health_flags", "healthy"}, {"weight", "1"},
				{"region", ""}, {"zone", ""}, {"sub_zone", ""}, {"canary", "false"},
				{"priority", "0"}, {"success_rate", "-1"}, {"local_origin_success_rate", "-1"},
			} {
				fmt.Fprintf(&b, "%s::%s::%s::%s\n", n, ep, kv[0], kv[1])
			}
		}
	}
	_, _ = w.Write([]byte(b.String()))
}

// writeConfigDump is Envoy's /config_dump for a static bootstrap: the
// bootstrap, then the static clusters and listeners, each as its
// envoy.admin.v3 dump message.
func writeConfigDump(w http.ResponseWriter, info ServerInfo) {
	dump := &adminv3.ConfigDump{}
	if info.Config != nil && info.Config.Bootstrap != nil {
		bs := info.Config.Bootstrap
		add := func(m proto.Message) {
			if a, err := anypb.New(m); err == nil {
				dump.Configs = append(dump.Configs, a)
			}
		}
		add(&adminv3.BootstrapConfigDump{Bootstrap: bs})
		clusters := &adminv3.ClustersConfigDump{}
		for _, c := range bs.GetStaticResources().GetClusters() {
			if a, err := anypb.New(c); err == nil {
				clusters.StaticClusters = append(clusters.StaticClusters, &adminv3.ClustersConfigDump_StaticCluster{Cluster: a})
			}
		}
		add(clusters)
		listeners := &adminv3.ListenersConfigDump{}
		for _, l := range bs.GetStaticResources().GetListeners() {
			if a, err := anypb.New(l); err == nil {
				listeners.StaticListeners = append(listeners.StaticListeners, &adminv3.ListenersConfigDump_StaticListener{Listener: a})
			}
		}
		add(listeners)
	}
	writeProtoJSON(w, dump)
}

func writeProtoJSON(w http.ResponseWriter, m proto.Message) {
	// Envoy prints proto field names (snake_case), pretty, two-space
	// indented; protojson's own spacing is deliberately unstable, so the
	// output is re-indented.
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(m)
	var out bytes.Buffer
	if err == nil {
		err = json.Indent(&out, b, "", "  ")
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	out.WriteByte('\n')
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out.Bytes())
}

func socketAddress(hostport string) *corev3.Address {
	host, port, _ := net.SplitHostPort(hostport)
	p, _ := strconv.Atoi(port)
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
	}}}
}
