package proxy

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

func TestAdminEndpoints(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}})
	e.stats.Define(httpfilter.MetricCounter, "plugin_calls").Add(2)
	get(t, e.url+"/")
	a, err := ListenAdmin("127.0.0.1:0", NewAdminHandler(e.stats, ServerInfo{Version: "test", NodeID: "n", Concurrency: 2,
		Config: e.cfg, ListenerAddr: e.srv.Addr}))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	base := "http://" + a.Addr()
	if resp, body := get(t, base+"/ready"); resp.StatusCode != 200 || body != "LIVE\n" {
		t.Fatalf("/ready: %d %q", resp.StatusCode, body)
	}
	_, prom := get(t, base+"/stats/prometheus")
	for _, want := range []string{
		"plugin_calls{} 2\n",
		`envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix="main"} 1`,
		`envoy_http_downstream_rq_xx{envoy_response_code_class="2",envoy_http_conn_manager_prefix="main"} 1`,
		`envoy_cluster_upstream_rq_total{envoy_cluster_name="a"} 1`,
	} {
		if !strings.Contains(prom, want) {
			t.Errorf("/stats/prometheus lacks %q:\n%s", want, prom)
		}
	}
	if _, text := get(t, base+"/stats"); !strings.Contains(text, "wasmcustom.plugin_calls: 2\n") {
		t.Errorf("/stats:\n%s", text)
	}
	if _, text := get(t, base+"/stats?filter=^cluster%5C.a%5C.upstream_rq_total$"); text != "cluster.a.upstream_rq_total: 1\n" {
		t.Errorf("/stats?filter: %q", text)
	}
	if resp, _ := get(t, base+"/stats?filter=("); resp.StatusCode != 400 {
		t.Errorf("/stats with a bad regex: %d, want 400", resp.StatusCode)
	}

	// Harnesses poll /listeners for "name::bound address" (docs/local-runtime.md).
	if _, text := get(t, base+"/listeners"); text != "main::"+e.srv.Addr("main")+"\n" {
		t.Errorf("/listeners: %q", text)
	}
	_, js := get(t, base+"/listeners?format=json")
	var ls struct {
		ListenerStatuses []struct {
			Name         string `json:"name"`
			LocalAddress struct {
				SocketAddress struct {
					Address   string `json:"address"`
					PortValue int    `json:"port_value"`
				} `json:"socket_address"`
			} `json:"local_address"`
		} `json:"listener_statuses"`
	}
	if err := json.Unmarshal([]byte(js), &ls); err != nil || len(ls.ListenerStatuses) != 1 || ls.ListenerStatuses[0].Name != "main" ||
		fmt.Sprintf("%s:%d", ls.ListenerStatuses[0].LocalAddress.SocketAddress.Address, ls.ListenerStatuses[0].LocalAddress.SocketAddress.PortValue) != e.srv.Addr("main") {
		t.Errorf("/listeners?format=json: %s (%v)", js, err)
	}

	_, cl := get(t, base+"/clusters")
	for _, want := range []string{
		"a::default_priority::max_connections::1024\n",
		"a::added_via_api::false\n",
		"a::" + up.addr() + "::health_flags::healthy\n",
	} {
		if !strings.Contains(cl, want) {
			t.Errorf("/clusters lacks %q:\n%s", want, cl)
		}
	}

	_, dump := get(t, base+"/config_dump")
	var cd struct {
		Configs []map[string]any `json:"configs"`
	}
	if err := json.Unmarshal([]byte(dump), &cd); err != nil || len(cd.Configs) != 3 {
		t.Fatalf("/config_dump: %v\n%s", err, dump)
	}
	for i, typ := range []string{"BootstrapConfigDump", "ClustersConfigDump", "ListenersConfigDump"} {
		if cd.Configs[i]["@type"] != "type.googleapis.com/envoy.admin.v3."+typ {
			t.Errorf("/config_dump configs[%d] is %v, want %s", i, cd.Configs[i]["@type"], typ)
		}
	}
	if !strings.Contains(dump, `"name": "main"`) || !strings.Contains(dump, `"stat_prefix": "main"`) {
		t.Errorf("/config_dump lacks the listener:\n%s", dump)
	}
	_, info := get(t, base+"/server_info")
	var si map[string]any
	if err := json.Unmarshal([]byte(info), &si); err != nil || si["state"] != "LIVE" || si["version"] != "test" {
		t.Fatalf("/server_info %q: %v", info, err)
	}
}
