package proxy

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

func TestAdminEndpoints(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}})
	e.stats.Define(httpfilter.MetricCounter, "plugin_calls").Add(2)
	get(t, e.url+"/")
	a, err := ListenAdmin("127.0.0.1:0", NewAdminHandler(e.stats, ServerInfo{Version: "test", NodeID: "n", Concurrency: 2}))
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
	if _, text := get(t, base+"/stats"); !strings.Contains(text, "wasmcustom.plugin_calls: 2") {
		t.Errorf("/stats:\n%s", text)
	}
	_, info := get(t, base+"/server_info")
	var si map[string]any
	if err := json.Unmarshal([]byte(info), &si); err != nil || si["state"] != "LIVE" || si["version"] != "test" {
		t.Fatalf("/server_info %q: %v", info, err)
	}
}
