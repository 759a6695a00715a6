package proxy

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// http_call keeps its connections to a cluster alive and reuses them, as
// Envoy's connection pool does: a filter calling its host once per request
// pays no connect per call (docs/local-runtime.md).
func TestHTTPCallReusesConnections(t *testing.T) {
	var conns atomic.Int64
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"ok":true}`))
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	cs := NewClusters([]*config.Cluster{{Name: "chime_host", Type: "STATIC", LBPolicy: "ROUND_ROBIN", ConnectTimeout: time.Second,
		Network: "tcp", Endpoints: []string{up.Listener.Addr().String()}, Hostnames: []string{""}}}, stats.New())
	defer cs.Close()
	hdr := httpfilter.Headers{{Key: ":method", Value: "POST"}, {Key: ":path", Value: "/v1/filter/prepare"}, {Key: ":authority", Value: "chime-host"}}
	for i := range 50 {
		resp, err := cs.Call(context.Background(), "chime_host", hdr, []byte(`{"requestId":"r"}`), nil, time.Second)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if st, _ := resp.Headers.Get(":status"); st != "200" {
			t.Fatalf("call %d: status %s", i, st)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("50 sequential http_calls opened %d connections, want 1", n)
	}
}
