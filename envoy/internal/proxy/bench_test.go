package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// BenchmarkProxyPassthrough: one small POST through a proxy with one
// continuing filter, keep-alive connection.
func BenchmarkProxyPassthrough(b *testing.B) {
	t := &testing.T{}
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) { w.Write(body) })
	defer up.Close()
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){nil}})
	defer e.srv.Close()
	client := &http.Client{}
	body := strings.Repeat("x", 1024)
	for b.Loop() {
		resp, err := client.Post(e.url+"/", "text/plain", strings.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// BenchmarkChainBuffered measures the chain machinery alone: a buffering
// filter fed 64 chunks of 16 KiB, with the request's content-length known
// (the buffer is allocated once) and unknown (it grows), side by side.
func BenchmarkChainBuffered(b *testing.B) {
	chunk := make([]byte, 16<<10)
	for _, known := range []bool{true, false} {
		name := "length-known"
		if !known {
			name = "length-unknown"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(64 << 14)
			for b.Loop() {
				s := &stream{limit: 8 << 20, r: &http.Request{ContentLength: -1}}
				if known {
					s.r.ContentLength = 64 << 14
				}
				f := &fakeFilter{name: "f", rec: &recorder{}, done: make(chan struct{})}
				f.decodeData = bufferAll
				s.reqHeaders = &httpfilter.Headers{}
				sink := &countTerm{}
				c := newChain(s, false, []httpfilter.Filter{f}, sink)
				c.pushHeaders(0, false)
				for i := 0; i < 64; i++ {
					c.pushData(0, chunk, i == 63)
				}
				if sink.n != 64*len(chunk) {
					b.Fatalf("got %d bytes", sink.n)
				}
			}
		})
	}
}

type countTerm struct{ n int }

func (c *countTerm) headers(bool)          {}
func (c *countTerm) data(b []byte, _ bool) { c.n += len(b) }
func (c *countTerm) trailers()             {}
