package wasmhost

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
)

// BenchmarkChimeFootprint counts the guest code one request of a quiet
// session runs (benchRequests, as BenchmarkChimeFilter sends them): the
// distinct functions called from proxy_on_context_create to
// proxy_on_delete and the size of their wasm bodies. In a proxy under
// load a request finds the guest's code cold, and what it costs then
// grows with the code it touches, not with its hot-loop time
// (docs/performance.md). Unlike a timing, the count does not move with
// the machine: it is the smallest of 20 requests (a tick the runtime runs
// meanwhile only adds to one). CHIME_WASM_BEFORE is counted alongside.
// With -v it lists the functions, largest first.
func BenchmarkChimeFootprint(b *testing.B) {
	code, err := chimeWasmOnce()
	if err != nil {
		b.Fatal(err)
	}
	mods := map[string]string{"this": code}
	if before := os.Getenv("CHIME_WASM_BEFORE"); before != "" {
		mods["before"] = before
	}
	fp := &footprint{calls: map[uint32]int{}, names: map[uint32]string{}}
	compileListeners = fp
	b.Cleanup(func() { compileListeners = nil })
	for _, req := range benchRequests(b) {
		b.Run(req.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for _, name := range []string{"this", "before"} {
					if mods[name] == "" {
						continue
					}
					best, err := fp.measure(b, mods[name], req)
					if err != nil {
						b.Fatal(err)
					}
					list := ""
					if testing.Verbose() {
						list = "\n" + best.list()
					}
					b.Logf("%s: %d functions, %.1f KB of wasm, %d calls per request%s", name, best.functions, best.kb(), best.calls, list)
					if name == "this" {
						b.ReportMetric(float64(best.functions), "functions/request")
						b.ReportMetric(best.kb(), "wasm-KB/request")
						b.ReportMetric(float64(best.calls), "calls/request")
					} else {
						b.ReportMetric(best.kb(), "before-wasm-KB/request")
					}
				}
			}
		})
	}
}

// footprint is the listener factory: it counts the calls of each defined
// function while on.
type footprint struct {
	mu    sync.Mutex
	on    bool
	calls map[uint32]int    // by function index
	names map[uint32]string // by function index, for -v
}

type footprintCount struct {
	functions, calls int
	bytes            int
	top              []string // the functions, largest first, for -v
}

func (c footprintCount) kb() float64 { return float64(c.bytes) / 1024 }

func (c footprintCount) list() string { return strings.Join(c.top, "\n") }

func (fp *footprint) NewFunctionListener(def api.FunctionDefinition) experimental.FunctionListener {
	fp.mu.Lock()
	fp.names[def.Index()] = def.DebugName()
	fp.mu.Unlock()
	return footprintListener{fp, def.Index()}
}

type footprintListener struct {
	fp  *footprint
	idx uint32
}

func (l footprintListener) Before(context.Context, api.Module, api.FunctionDefinition, []uint64, experimental.StackIterator) {
	l.fp.mu.Lock()
	if l.fp.on {
		l.fp.calls[l.idx]++
	}
	l.fp.mu.Unlock()
}

func (footprintListener) After(context.Context, api.Module, api.FunctionDefinition, []uint64) {}

func (footprintListener) Abort(context.Context, api.Module, api.FunctionDefinition, error) {}

// measure sends req through a fresh factory of code until it skips
// prepare, then counts 20 more requests and returns the smallest count.
func (fp *footprint) measure(b *testing.B, code string, req benchRequest) (footprintCount, error) {
	bin, err := os.ReadFile(code)
	if err != nil {
		return footprintCount{}, err
	}
	bodies, err := wasmBodySizes(bin)
	if err != nil {
		return footprintCount{}, err
	}
	f, send := chimeFilter(b, code, req)
	defer f.Close()
	for range 20 { // the first requests of a session fill the filter's caches
		send(&callbackTimes{})
	}
	best := footprintCount{bytes: -1}
	for range 20 {
		fp.mu.Lock()
		clear(fp.calls)
		fp.on = true
		fp.mu.Unlock()
		if !send(&callbackTimes{}) {
			return best, errors.New("a request of a quiet session waited for the host")
		}
		fp.mu.Lock()
		fp.on = false
		c := fp.count(bodies)
		fp.mu.Unlock()
		if best.bytes < 0 || c.bytes < best.bytes {
			best = c
		}
	}
	return best, nil
}

// count sums the calls counted; the caller holds mu.
func (fp *footprint) count(bodies map[uint32]int) footprintCount {
	type fn struct {
		name        string
		size, calls int
	}
	var fns []fn
	c := footprintCount{}
	for idx, n := range fp.calls {
		name := fp.names[idx]
		size := bodies[idx]
		fns = append(fns, fn{name, size, n})
		c.functions++
		c.calls += n
		c.bytes += size
	}
	sort.Slice(fns, func(i, j int) bool { return fns[i].size > fns[j].size })
	for _, f := range fns {
		c.top = append(c.top, fmt.Sprintf("%7d B %4d× %s", f.size, f.calls, f.name))
	}
	return c
}

// wasmBodySizes returns the size of each defined function's code body by
// its index (api.FunctionDefinition.Index: the imported functions first).
func wasmBodySizes(bin []byte) (map[uint32]int, error) {
	if len(bin) < 8 || string(bin[:4]) != "\x00asm" {
		return nil, errors.New("not a wasm binary")
	}
	var imported int
	var sizes []int
	for rest := bin[8:]; len(rest) > 0; {
		id := rest[0]
		n, k := binary.Uvarint(rest[1:])
		if k <= 0 || uint64(len(rest)-1-k) < n {
			return nil, errors.New("truncated section")
		}
		sec := rest[1+k : 1+k+int(n)]
		rest = rest[1+k+int(n):]
		switch id {
		case 2: // imports: count the functions, which come first in the index space
			r := wasmReader{b: sec}
			for cnt := r.u(); cnt > 0 && r.err == nil; cnt-- {
				r.name()
				r.name()
				switch kind := r.byte(); kind {
				case 0:
					imported++
					r.u()
				case 1: // table: reftype, limits
					r.byte()
					r.limits()
				case 2:
					r.limits()
				case 3: // global: valtype, mut
					r.byte()
					r.byte()
				default:
					return nil, fmt.Errorf("import kind %d", kind)
				}
			}
			if r.err != nil {
				return nil, r.err
			}
		case 10: // code
			r := wasmReader{b: sec}
			for cnt := r.u(); cnt > 0 && r.err == nil; cnt-- {
				size := r.u()
				sizes = append(sizes, int(size))
				r.skip(int(size))
			}
			if r.err != nil {
				return nil, r.err
			}
		}
	}
	bodies := make(map[uint32]int, len(sizes))
	for i, size := range sizes {
		bodies[uint32(imported+i)] = size
	}
	return bodies, nil
}

// wasmReader reads the LEB128 integers and names of a wasm section.
type wasmReader struct {
	b   []byte
	err error
}

func (r *wasmReader) u() uint64 {
	v, k := binary.Uvarint(r.b)
	if k <= 0 {
		r.err, r.b = errors.New("bad LEB128"), nil
		return 0
	}
	r.b = r.b[k:]
	return v
}

func (r *wasmReader) byte() byte {
	if len(r.b) == 0 {
		r.err = errors.New("truncated")
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c
}

func (r *wasmReader) skip(n int) {
	if n > len(r.b) {
		r.err, r.b = errors.New("truncated"), nil
		return
	}
	r.b = r.b[n:]
}

func (r *wasmReader) name() string {
	n := int(r.u())
	if n > len(r.b) {
		r.err, r.b = errors.New("truncated name"), nil
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

func (r *wasmReader) limits() {
	if flags := r.byte(); flags&1 == 1 {
		r.u()
	}
	r.u()
}
