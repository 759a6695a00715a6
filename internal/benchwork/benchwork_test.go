package benchwork

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/chimehq/chime/llm"
)

// wasmEditor runs the guest module under wazero.
type wasmEditor struct {
	rt          wazero.Runtime
	mod         api.Module
	alloc, edit api.Function
}

func newWasmEditor(tb testing.TB) *wasmEditor {
	tb.Helper()
	out := filepath.Join(tb.TempDir(), "guest.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./guest")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building guest: %v\n%s", err, b)
	}
	return loadWasmEditor(tb, out)
}

// loadWasmEditor instantiates a guest module built from ./guest.
func loadWasmEditor(tb testing.TB, file string) *wasmEditor {
	tb.Helper()
	code, err := os.ReadFile(file)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithMemoryLimitPages(16384).WithMemoryCapacityFromMax(true))
	wasi_snapshot_preview1.MustInstantiate(ctx, rt)
	mod, err := rt.InstantiateWithConfig(ctx, code, wazero.NewModuleConfig().WithStartFunctions("_initialize"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { rt.Close(ctx) })
	return &wasmEditor{rt: rt, mod: mod, alloc: mod.ExportedFunction("alloc"), edit: mod.ExportedFunction("edit")}
}

func (w *wasmEditor) Edit(tb testing.TB, body []byte) int {
	ctx := context.Background()
	res, err := w.alloc.Call(ctx, uint64(len(body)))
	if err != nil {
		tb.Fatal(err)
	}
	if !w.mod.Memory().Write(uint32(res[0]), body) {
		tb.Fatal("body does not fit guest memory")
	}
	res, err = w.edit.Call(ctx, res[0], uint64(len(body)))
	if err != nil {
		tb.Fatal(err)
	}
	return int(res[0])
}

// TestWasmEditMatchesNative guards the benchmark: the guest must do the same
// work as native code, or the ratio means nothing.
func TestWasmEditMatchesNative(t *testing.T) {
	body := SampleChatBody(64 << 10)
	native, err := Edit(body, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := newWasmEditor(t).Edit(t, body); got != len(native) || got <= len(body)-200 {
		t.Fatalf("wasm edit produced %d bytes, native %d (input %d)", got, len(native), len(body))
	}
}

// BenchmarkEdit1MBWasmVsNative runs the 1 MB edit natively, inside wasm and
// as a plain copy, interleaved in one run, and reports each in MB/s with
// the ratios wasm/native and native/copy.
//
// BENCHWORK_GUEST_BEFORE names a guest module built from an older tree
// (GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared ./internal/benchwork/guest);
// it then runs in the same rounds and best-before-wasm/native is its ratio.
func BenchmarkEdit1MBWasmVsNative(b *testing.B) {
	body := SampleChatBody(1 << 20)
	w := newWasmEditor(b)
	var before *wasmEditor
	if f := os.Getenv("BENCHWORK_GUEST_BEFORE"); f != "" {
		before = loadWasmEditor(b, f)
	}
	bestBefore := time.Hour
	mb := float64(len(body)) / 1e6
	var nativeTime, wasm, copying time.Duration
	// The fastest round of each too: on a loaded machine the sums carry
	// other processes' time, the minimum much less of it.
	bestNative, bestWasm := time.Hour, time.Hour
	var sink, out []byte
	var editor Editor // reused from request to request, as the guest's
	for b.Loop() {
		t0 := time.Now()
		var err error
		out, err = editor.Edit(body, out)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		if w.Edit(b, body) != len(out) {
			b.Fatal("wasm and native edits differ")
		}
		t2 := time.Now()
		sink = append(sink[:0], body...)
		t3 := time.Now()
		if before != nil {
			if before.Edit(b, body) != len(out) {
				b.Fatal("the before guest's edit differs")
			}
			bestBefore = min(bestBefore, time.Since(t3))
		}
		nativeTime, wasm, copying = nativeTime+t1.Sub(t0), wasm+t2.Sub(t1), copying+t3.Sub(t2)
		bestNative, bestWasm = min(bestNative, t1.Sub(t0)), min(bestWasm, t2.Sub(t1))
	}
	n := float64(b.N)
	b.ReportMetric(mb*n/nativeTime.Seconds(), "native-MB/s")
	b.ReportMetric(mb*n/wasm.Seconds(), "wasm-MB/s")
	b.ReportMetric(mb*n/copying.Seconds(), "copy-MB/s")
	b.ReportMetric(nativeTime.Seconds()/wasm.Seconds(), "wasm/native")
	b.ReportMetric(copying.Seconds()/nativeTime.Seconds(), "native/copy")
	b.ReportMetric(bestNative.Seconds()/bestWasm.Seconds(), "best-wasm/native")
	b.ReportMetric(mb/bestWasm.Seconds(), "best-wasm-MB/s")
	if before != nil {
		b.ReportMetric(bestNative.Seconds()/bestBefore.Seconds(), "best-before-wasm/native")
		b.ReportMetric(mb/bestBefore.Seconds(), "best-before-wasm-MB/s")
	}
}

const benchSize = 1 << 20

func TestSampleChatBody(t *testing.T) {
	b := SampleChatBody(benchSize)
	if !json.Valid(b) || len(b) < benchSize*9/10 || len(b) > benchSize*11/10 {
		t.Fatalf("bad sample: valid=%v len=%d", json.Valid(b), len(b))
	}
	r, err := llm.ParseRequest(llm.Chat, b)
	if err != nil {
		t.Fatal(err)
	}
	if n := r.StripDirectives(); n < 3 {
		t.Fatalf("sample has %d directives", n)
	}
}

// BenchmarkEdit1MB and BenchmarkCopy1MB run side by side: the filter's
// native request edit against a plain copy of the same bytes.
func BenchmarkEdit1MB(b *testing.B) {
	body := SampleChatBody(benchSize)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var out []byte
	for b.Loop() {
		var err error
		if out, err = Edit(body, out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkCopy1MB(b *testing.B) {
	body := SampleChatBody(benchSize)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	var sink []byte
	for b.Loop() {
		sink = append([]byte(nil), body...)
	}
	_ = sink
}
