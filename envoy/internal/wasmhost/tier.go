package wasmhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
)

// Tiering (Env.InterpretWhileCompiling, docs/local-runtime.md#start):
// compiling the chime filter takes over a second of both cores on a
// small machine, interpreting it can start in a fraction of that. A group
// whose module has not been compiled before by this process or into its
// cache directory therefore starts its VMs from wazero's interpreter,
// compiles in the background, and then replaces each worker's VM with a
// compiled one; an interpreted VM ends once the streams bound to it have
// finished. V8 in Envoy does the same with its baseline tier.

// engine is one runtime holding one form of the group's module and the
// VMs instantiated from it.
type engine struct {
	rt          wazero.Runtime
	cm          wazero.CompiledModule
	interpreted bool
	hostSeq     atomic.Int64 // numbers the VMs' host modules in rt
	vms         atomic.Int64 // VMs of this engine not yet released
	superseded  atomic.Bool  // new VMs come from a newer engine
}

// setEngine makes e the engine of the group's new VMs.
func (g *vmGroup) setEngine(e *engine) {
	g.enginesMu.Lock()
	g.engines = append(g.engines, e)
	g.enginesMu.Unlock()
	if old := g.eng.Swap(e); old != nil {
		old.superseded.Store(true)
		g.releaseEngine(old)
	}
}

// releaseEngine closes e's runtime once it is superseded and its last VM
// is released.
func (g *vmGroup) releaseEngine(e *engine) {
	if !e.superseded.Load() || e.vms.Load() > 0 {
		return
	}
	g.enginesMu.Lock()
	found := false
	for i, x := range g.engines {
		if x == e {
			g.engines = append(g.engines[:i:i], g.engines[i+1:]...)
			found = true
			break
		}
	}
	g.enginesMu.Unlock()
	if found {
		e.rt.Close(context.Background())
	}
}

// compiledModules records the modules this process compiled, by cache
// directory and module digest: the in-memory cache holds them.
var compiledModules sync.Map

// compiledBefore reports whether code's compilation is known to be in the
// cache for dir: compiled earlier by this process, or by any process that
// left the marker file in dir.
func compiledBefore(dir string, digest [32]byte) bool {
	if _, ok := compiledModules.Load(markerKey(dir, digest)); ok {
		return true
	}
	if dir == "" {
		return false
	}
	_, err := os.Stat(markerPath(dir, digest))
	return err == nil
}

// markCompiled records that code's compilation is in the cache for dir.
// The marker is an empty file; failing to write it costs the next start
// one more interpreted phase, nothing else.
func markCompiled(dir string, digest [32]byte) {
	compiledModules.Store(markerKey(dir, digest), true)
	if dir == "" {
		return
	}
	p := markerPath(dir, digest)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err == nil {
		_ = os.WriteFile(p, nil, 0o644)
	}
}

func markerKey(dir string, digest [32]byte) string { return dir + "\x00" + string(digest[:]) }

// markerPath names the marker by what wazero keys its cache with: the
// module's bytes, wazero's version and the platform.
func markerPath(dir string, digest [32]byte) string {
	h := sha256.New()
	h.Write(digest[:])
	h.Write([]byte(wazeroVersion() + "\x00" + runtime.GOOS + "/" + runtime.GOARCH))
	return filepath.Join(dir, "chime-compiled", hex.EncodeToString(h.Sum(nil)))
}

var wazeroVersion = sync.OnceValue(func() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/tetratelabs/wazero" {
				if d.Replace != nil {
					return d.Replace.Path + "@" + d.Replace.Version
				}
				return d.Version
			}
		}
	}
	return "unknown"
})

// interpretedConfig is the group's runtime configuration for the
// interpreter: the same limits, no compilation cache (nothing to cache).
func interpretedConfig() wazero.RuntimeConfig {
	return wazero.NewRuntimeConfigInterpreter().WithMemoryLimitPages(memoryLimitPages)
}

// tierUpHook, when set (by tests), runs in the tier-up before it
// compiles.
var tierUpHook func()

// tierUp compiles the module in the background, makes the compiled form
// the group's engine and replaces each worker's interpreted VM with a
// compiled one. If the compilation or a VM fails, the interpreted VMs
// keep serving.
func (g *vmGroup) tierUp() {
	defer g.building.Done()
	if tierUpHook != nil {
		tierUpHook()
	}
	if g.ctx.Err() != nil {
		return
	}
	rt := wazero.NewRuntimeWithConfig(g.ctx, g.compiledCfg)
	cm, err := rt.CompileModule(compileContext(g.ctx), g.code)
	if err != nil {
		rt.Close(context.Background())
		g.logger.Error("wasm: compiling the module failed; its VMs stay interpreted", "err", err)
		return
	}
	markCompiled(g.env.CacheDir, g.digest)
	if g.ctx.Err() != nil {
		rt.Close(context.Background())
		return
	}
	eng := &engine{rt: rt, cm: cm}
	g.setEngine(eng)
	for i, s := range g.slots {
		select {
		case <-s.ready:
		case <-g.ctx.Done():
			return
		}
		if err := g.replaceWorker(i, s, eng); err != nil {
			if g.ctx.Err() == nil {
				g.logger.Error("wasm: a worker's compiled VM failed to start; its interpreted VM keeps serving", "worker", i, "err", err)
			}
		}
	}
	g.logger.Info("wasm: module compiled; the workers run compiled VMs now")
}

// replaceWorker builds worker i's VM from eng with every live plugin and
// puts it in the slot; the VM it replaces retires.
func (g *vmGroup) replaceWorker(i int, s *workerSlot, eng *engine) error {
	s.mu.Lock()
	cur := s.vm
	s.mu.Unlock()
	if cur != nil && cur.eng == eng {
		return nil // built or rebuilt from eng already
	}
	vm, err := g.newVM(i)
	if err != nil {
		return err
	}
	for _, p := range g.livePlugins() {
		if err := vm.startPlugin(g.ctx, p); err != nil {
			vm.close()
			return err
		}
	}
	s.mu.Lock()
	old := s.vm
	s.vm = vm
	s.mu.Unlock()
	// Plugins added or closed while the VM started: addPlugin and
	// Factory.Close act on the slot's VM of their moment, so bring this
	// one in line with the list as it is now.
	live := g.livePlugins()
	for _, p := range live {
		if err := vm.startPlugin(g.ctx, p); err != nil {
			g.logger.Error("wasm: starting a plugin in a compiled VM", "worker", i, "err", err)
		}
	}
	vm.stopPluginsNotIn(live)
	if old != nil {
		old.retire()
	}
	return nil
}

// stopPluginsNotIn stops the root contexts of plugins no longer live.
func (vm *vmInstance) stopPluginsNotIn(live []*Factory) {
	vm.mu.Lock()
	var gone []*Factory
	for f := range vm.rootOf {
		alive := false
		for _, l := range live {
			alive = alive || l == f
		}
		if !alive {
			gone = append(gone, f)
		}
	}
	vm.mu.Unlock()
	for _, f := range gone {
		vm.stopPlugin(f)
	}
}

// retire takes a VM out of service: its ticks stop, and once no stream is
// bound to it its root contexts get proxy_on_done and proxy_on_delete and
// it is closed.
func (vm *vmInstance) retire() {
	vm.mu.Lock()
	vm.retired = true
	for _, r := range vm.roots {
		vm.stopTick(r)
	}
	vm.mu.Unlock()
	vm.shutdownIfIdle()
}

// shutdownIfIdle ends a retired VM that no stream is bound to.
func (vm *vmInstance) shutdownIfIdle() {
	vm.mu.Lock()
	if !vm.retired || vm.closed || vm.bound.Load() > 0 {
		vm.mu.Unlock()
		return
	}
	var plugins []*Factory
	for f := range vm.rootOf {
		plugins = append(plugins, f)
	}
	vm.mu.Unlock()
	for _, f := range plugins {
		vm.stopPlugin(f)
	}
	vm.mu.Lock()
	pending := vm.pendingDone > 0
	vm.mu.Unlock()
	if !pending { // else the last proxy_done closes it (finishDone)
		vm.close()
	}
}
