package wasmhost

import (
	"testing"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// BenchmarkRequestLifecycle runs one full stream through a VM per op:
// context create, request headers + body, response headers + body, then
// on_log/on_done/on_delete. The guest reads a header, the body and adds a
// response header.
func BenchmarkRequestLifecycle(b *testing.B) {
	cfg, env, logs, _, _, _ := testConfig(b, "bench")
	logs.min = 100 // record nothing
	f, err := newFactory(cfg, env)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	body := []byte(`{"model":"m","messages":[{"role":"user","content":"hello"}]}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		fs := newFakeStream(nil, 0)
		flt, err := f.NewFilter(fs)
		if err != nil {
			b.Fatal(err)
		}
		if flt.DecodeHeaders(&fs.req, false) != httpfilter.HeadersContinue {
			b.Fatal("headers")
		}
		flt.DecodeData(&httpfilter.Buffer{Bytes: body}, true)
		fs.resp = httpfilter.Headers{{Key: ":status", Value: "200"}}
		flt.EncodeHeaders(&fs.resp, false)
		flt.EncodeData(&httpfilter.Buffer{Bytes: body}, true)
		flt.OnStreamComplete()
	}
	if f.Instantiations() != 1 {
		b.Fatalf("instantiations = %d", f.Instantiations())
	}
}
