// Package wasmhost runs proxy-wasm v0.2.1 modules under wazero with Envoy's
// semantics (docs/local-runtime.md): the host side of the ABI as Envoy 1.38's
// proxy-wasm-cpp-host and source/extensions/common/wasm implement it.
//
// Layout: factory.go (module validation, worker VMs, lifecycle), vm.go (one
// VM instance: calls, faults, ticks, http calls), filter.go (the per-stream
// httpfilter.Filter), abi.go (the "env" host functions), wasi.go (the WASI
// profiles), properties.go, shared.go (shared data and queues), pairs.go
// and consts.go. Names, signatures and ABI numbers come from the shared
// catalogue, internal/proxywasmabi.
package wasmhost

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"

	abi "github.com/chimehq/chime/internal/proxywasmabi"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// WASI profile names (httpfilter.Env.WASIProfile).
const (
	ProfileEnvoy138 = "envoy-1.38"
	// ProfileEnvoy139 is Envoy 1.39.0: the full WASI set added for the Go
	// SDK, poll_oneoff included.
	ProfileEnvoy139 = "envoy-1.39"
	// ProfileEnvoyLatest is an alias of the newest profile, ProfileEnvoy139.
	ProfileEnvoyLatest = "envoy-latest"
)

// memoryLimitPages is 1 GiB, proxy-wasm-cpp-host's
// PROXY_WASM_HOST_MAX_WASM_MEMORY_SIZE_BYTES. Guest memory is mapped, not
// sliced (withGuestMemory): otherwise every memory.grow copies the whole
// linear memory, which showed as 30 ms stalls on 1 MB bodies.
const memoryLimitPages = 16384

// reloadBackoff bounds how often a crashed worker VM is re-created, so a
// module that traps while starting cannot turn every request into a fresh
// instantiation (the spec's crash-loop advice).
var reloadBackoff = time.Second

// caches holds one compilation cache per directory ("" = in-memory), shared
// by every factory in the process so the same code compiles once.
var caches = struct {
	sync.Mutex
	m map[string]wazero.CompilationCache
}{m: map[string]wazero.CompilationCache{}}

func compilationCache(dir string) (wazero.CompilationCache, error) {
	caches.Lock()
	defer caches.Unlock()
	if c, ok := caches.m[dir]; ok {
		return c, nil
	}
	var c wazero.CompilationCache
	if dir == "" {
		c = wazero.NewCompilationCache()
	} else {
		var err error
		if c, err = wazero.NewCompilationCacheWithDir(dir); err != nil {
			return nil, fmt.Errorf("wasm compilation cache %q: %w", dir, err)
		}
	}
	caches.m[dir] = c
	return c, nil
}

// Factory is the wasm filter factory for one wasm http filter entry, the
// counterpart of Envoy's plugin: it owns one root context in each worker
// VM of its vmGroup. Filters with the same vm_id, code and VM
// configuration share the group (one VM per worker), as in Envoy
// (docs/local-runtime.md "one VM per worker, never one per request").
type Factory struct {
	cfg    httpfilter.WasmConfig
	g      *vmGroup
	logger *slog.Logger
	// logPrefix is Envoy's plugin log prefix (" name root_id vm_id").
	logPrefix string
	closed    atomic.Bool
}

// vmGroup is the set of worker VMs for one vm key (vm_id, code, VM
// configuration, WASI profile, environment), shared by every plugin with
// that key in one VMScope.
type vmGroup struct {
	key     groupKey
	refs    int                   // guarded by groups.mu
	cfg     httpfilter.WasmConfig // the first plugin's (VM-level fields only)
	env     httpfilter.Env
	code    []byte
	abi     abi.Version
	profile string
	logger  *slog.Logger
	envVars []string // "K=V", sorted
	// compiledCfg is the runtime configuration of compiled engines; digest
	// is the module's SHA-256, set when tiering is enabled (tier.go).
	compiledCfg wazero.RuntimeConfig
	digest      [32]byte

	ctx    context.Context
	cancel context.CancelFunc
	// started is closed by Start (at once without Env.HoldUntilStarted):
	// ticks and http_call dispatches wait for it.
	started   chan struct{}
	startOnce sync.Once

	// pluginsMu guards plugins, the live plugins in the order they were
	// added (the order their root contexts are created in a new VM).
	pluginsMu sync.Mutex
	plugins   []*Factory

	slots    []*workerSlot
	building sync.WaitGroup // background builds of worker VMs and the tier-up
	// eng is the engine new VMs are instances of: the compiled module, or
	// at first the interpreted one while it compiles (tier.go).
	eng atomic.Pointer[engine]
	// engines holds every engine the group made, closed with the group.
	enginesMu sync.Mutex
	engines   []*engine

	instantiations atomic.Int64 // VM instances created, for tests and stats
}

type groupKey struct {
	scope *httpfilter.VMScope
	key   string
}

// groups is the registry of shared VM groups (only groups with a scope).
var groups = struct {
	sync.Mutex
	m map[groupKey]*vmGroup
}{m: map[groupKey]*vmGroup{}}

type workerSlot struct {
	mu          sync.Mutex
	vm          *vmInstance
	lastAttempt time.Time
	// ready is closed once the slot's first VM has been built, or its
	// build failed (at once unless it is built in the background, see
	// Env.BackgroundWorkers).
	ready chan struct{}
	// published (guarded by vmGroup.pluginsMu) says addPlugin starts new
	// plugins in this slot's VM itself; until then the background build
	// starts every plugin added before it publishes.
	published bool
}

// closedReady is the ready channel of a slot built synchronously.
var closedReady = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// NewFactory builds the filter factory for one wasm http filter entry: it
// loads and validates the module (ABI version marker, imports against the
// WASI profile), then joins the VM group for its vm key (creating one VM
// per worker if none exists) and starts its root context in each VM. A
// module Envoy would refuse, or whose proxy_on_vm_start /
// proxy_on_configure returns false, is an error here.
func NewFactory(cfg httpfilter.WasmConfig, env httpfilter.Env) (httpfilter.Factory, error) {
	return newFactory(cfg, env)
}

func newFactory(cfg httpfilter.WasmConfig, env httpfilter.Env) (*Factory, error) {
	code := cfg.CodeInline
	if len(code) == 0 {
		if cfg.CodePath == "" {
			return nil, errors.New("wasm: vm_config.code has neither a local filename nor inline bytes")
		}
		b, err := os.ReadFile(cfg.CodePath)
		if err != nil {
			return nil, fmt.Errorf("wasm: read module: %w", err)
		}
		code = b
	}
	profile := env.WASIProfile
	if profile == "" {
		profile = ProfileEnvoy138
	}
	switch profile {
	case ProfileEnvoy138, ProfileEnvoy139:
	case ProfileEnvoyLatest:
		profile = ProfileEnvoy139
	default:
		return nil, fmt.Errorf("wasm: unknown WASI profile %q (want %q, %q or %q)", profile, ProfileEnvoy138, ProfileEnvoy139, ProfileEnvoyLatest)
	}
	logger := env.Logger
	if logger == nil {
		logger = slog.Default()
	}
	f := &Factory{
		cfg:       cfg,
		logger:    logger.With("plugin", cfg.PluginName, "root_id", cfg.RootID, "vm_id", cfg.VMID),
		logPrefix: envoyLogPrefix(cfg),
	}
	keys := make([]string, 0, len(cfg.EnvVars))
	for k := range cfg.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var envVars []string
	for _, k := range keys {
		envVars = append(envVars, k+"="+cfg.EnvVars[k])
	}
	g, err := joinGroup(cfg, env, code, profile, envVars, logger)
	if err != nil {
		return nil, err
	}
	f.g = g
	shared.acquire(cfg.VMID)
	if err := g.addPlugin(f); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// vmKey is proxy-wasm-cpp-host's makeVmKey (vm_id, VM configuration and
// code) plus what this host fixes when a VM is instantiated: the WASI
// profile, the environment variables and the number of workers.
func vmKey(cfg httpfilter.WasmConfig, code []byte, profile string, envVars []string, workers int) string {
	h := sha256.New()
	for _, part := range [][]byte{[]byte(cfg.VMID), cfg.VMConfiguration, code, []byte(profile), []byte(strings.Join(envVars, "\x00")), []byte(strconv.Itoa(workers))} {
		var n [8]byte
		binary.LittleEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// joinGroup returns the group for this vm key in env.VMScope, taking a
// reference, or builds a new one (validating the module and creating one
// VM per worker). Without a scope the group is never shared.
func joinGroup(cfg httpfilter.WasmConfig, env httpfilter.Env, code []byte, profile string, envVars []string, logger *slog.Logger) (*vmGroup, error) {
	workers := env.Workers
	if workers <= 0 {
		workers = 1
	}
	key := groupKey{scope: env.VMScope, key: vmKey(cfg, code, profile, envVars, workers)}
	if env.VMScope != nil {
		groups.Lock()
		defer groups.Unlock()
		if g := groups.m[key]; g != nil {
			g.refs++
			return g, nil
		}
	}
	cache, err := compilationCache(env.CacheDir)
	if err != nil {
		return nil, err
	}
	g := &vmGroup{
		key:         key,
		refs:        1,
		cfg:         cfg,
		env:         env,
		code:        code,
		profile:     profile,
		logger:      logger.With("vm_id", cfg.VMID),
		envVars:     envVars,
		compiledCfg: wazero.NewRuntimeConfig().WithCompilationCache(cache).WithMemoryLimitPages(memoryLimitPages),
	}
	g.digest = sha256.Sum256(code) // the compile marker's key, with tiering or without
	interpret := env.InterpretWhileCompiling && !compiledBefore(env.CacheDir, g.digest)
	if err := g.validate(interpret); err != nil {
		return nil, err
	}
	// From here on close releases what validate kept.
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.started = make(chan struct{})
	if !env.HoldUntilStarted {
		g.Start()
	}
	g.slots = make([]*workerSlot, workers)
	for i := range g.slots {
		g.slots[i] = &workerSlot{ready: closedReady, published: true}
	}
	// The first VM is always built here, so that a module that traps while
	// starting, or refuses its configuration, fails the factory. With
	// Env.BackgroundWorkers the others are built concurrently and a stream
	// on such a worker waits for its VM (NewFilter), so the listeners need
	// not wait for every worker.
	if env.BackgroundWorkers {
		sem := make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))
		for i := 1; i < workers; i++ {
			g.slots[i].ready = make(chan struct{})
			g.slots[i].published = false
			g.building.Add(1)
			go g.buildWorker(i, sem)
		}
	}
	for i, s := range g.slots {
		if s.ready != closedReady {
			continue
		}
		vm, err := g.newVM(i)
		if err != nil {
			g.close()
			return nil, err
		}
		s.vm = vm
	}
	if interpret {
		g.building.Add(1)
		go g.tierUp()
	}
	if env.VMScope != nil {
		groups.m[key] = g
	}
	return g, nil
}

// buildWorkerHook, when set (by tests), runs in each background build
// before its VM is instantiated.
var buildWorkerHook func(worker int)

// buildWorker builds worker i's first VM in the background
// (Env.BackgroundWorkers) with every plugin added so far, at most
// cap(sem) at a time. A failure is logged and leaves the slot empty: the
// first stream on that worker retries, as after a crash (workerSlot.get).
func (g *vmGroup) buildWorker(i int, sem chan struct{}) {
	defer g.building.Done()
	s := g.slots[i]
	defer close(s.ready)
	sem <- struct{}{}
	if buildWorkerHook != nil {
		buildWorkerHook(i)
	}
	vm, err := g.newVM(i)
	<-sem
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastAttempt = time.Now()
	g.pluginsMu.Lock()
	s.published = true
	plugins := append([]*Factory(nil), g.plugins...)
	g.pluginsMu.Unlock()
	if err == nil && g.ctx.Err() != nil {
		vm.close()
		return
	}
	if err == nil {
		for _, p := range plugins {
			if err = vm.startPlugin(g.ctx, p); err != nil {
				vm.close()
				break
			}
		}
	}
	if err != nil {
		if g.ctx.Err() == nil {
			g.logger.Error("wasm: failed to start the VM of a worker", "worker", i, "err", err)
		}
		return
	}
	s.vm = vm
}

// addPlugin starts f's root context in every worker VM of the group
// (WasmBase::start then configure, as getOrCreateThreadLocalPlugin does).
// A VM still being built in the background starts f itself.
func (g *vmGroup) addPlugin(f *Factory) error {
	g.pluginsMu.Lock()
	g.plugins = append(g.plugins, f)
	var slots []*workerSlot
	for _, s := range g.slots {
		if s.published {
			slots = append(slots, s)
		}
	}
	g.pluginsMu.Unlock()
	for _, s := range slots {
		s.mu.Lock()
		vm := s.vm
		s.mu.Unlock()
		if vm == nil {
			continue
		}
		if err := vm.startPlugin(g.ctx, f); err != nil {
			return err
		}
	}
	return nil
}

// livePlugins returns the group's plugins in order.
func (g *vmGroup) livePlugins() []*Factory {
	g.pluginsMu.Lock()
	defer g.pluginsMu.Unlock()
	return append([]*Factory(nil), g.plugins...)
}

// validate compiles the module once (filling the compilation cache), or
// prepares it for the interpreter, and checks what Envoy checks before
// instantiating: the ABI version marker and that every import is one the
// host provides.
func (g *vmGroup) validate(interpret bool) error {
	ctx := context.Background()
	cfg := g.compiledCfg
	if interpret {
		cfg = interpretedConfig()
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	cm, err := rt.CompileModule(compileContext(ctx), g.code)
	if err != nil {
		rt.Close(ctx)
		return fmt.Errorf("wasm: failed to load module: %w", err)
	}
	if err := g.checkModule(cm); err != nil {
		rt.Close(ctx)
		return err
	}
	if !interpret {
		// Also without tiering: a later start that tiers (chime up) then
		// finds the module compiled and starts with compiled VMs.
		markCompiled(g.env.CacheDir, g.digest)
	}
	// Every VM of the group is an instance of this compiled module in this
	// runtime: decoding and validating the module again per VM cost more
	// than instantiating it.
	g.setEngine(&engine{rt: rt, cm: cm, interpreted: interpret})
	return nil
}

// compileListeners is set only by BenchmarkChimeFootprint: modules are
// then compiled with function listeners (wazero keys such a compilation
// apart from one without, in memory and on disk).
var compileListeners experimental.FunctionListenerFactory

// compileContext compiles a module's functions on every CPU: a cold
// compilation of the chime filter on one core is most of a cold start.
func compileContext(ctx context.Context) context.Context {
	if compileListeners != nil {
		ctx = experimental.WithFunctionListenerFactory(ctx, compileListeners)
	}
	return experimental.WithCompilationWorkers(ctx, runtime.GOMAXPROCS(0))
}

func (g *vmGroup) checkModule(cm wazero.CompiledModule) error {
	exports := cm.ExportedFunctions()
	switch {
	case exports[abi.V021.Marker()] != nil:
		g.abi = abi.V021
	case exports[abi.V020.Marker()] != nil:
		g.abi = abi.V020
	case exports[abi.V010.Marker()] != nil:
		return fmt.Errorf("wasm: module advertises %s; only 0_2_0 and 0_2_1 are supported", abi.V010.Marker())
	default:
		return fmt.Errorf("wasm: Missing or unknown Proxy-Wasm ABI version (module exports neither %s nor %s)", abi.V020.Marker(), abi.V021.Marker())
	}
	if _, ok := cm.ExportedMemories()["memory"]; !ok {
		return errors.New("wasm: module does not export its memory as \"memory\"")
	}
	if exports["malloc"] == nil && exports["proxy_on_memory_allocate"] == nil {
		return errors.New("wasm: module exports neither proxy_on_memory_allocate nor malloc")
	}
	// cpp-host looks every callback up with its signature and fails the VM
	// on a mismatch ("Bad function signature").
	for _, cb := range append(slices.Clip(abi.GuestCallbacks), abi.NetworkCallbacks...) {
		if fn := exports[cb.Name]; fn != nil && !cb.SameSignature(catalogueTypes(fn.ParamTypes()), catalogueTypes(fn.ResultTypes())) {
			return fmt.Errorf("wasm: Bad function signature for: %s", cb.Name)
		}
	}
	avail := g.availableImports()
	var missing []string
	for _, imp := range cm.ImportedFunctions() {
		mod, name, _ := imp.Import()
		if !avail[mod+"."+name] {
			missing = append(missing, mod+"."+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("wasm: module imports functions the %s host does not provide: %s", g.profile, strings.Join(missing, ", "))
	}
	return nil
}

func catalogueTypes(ts []api.ValueType) []abi.ValueType {
	out := make([]abi.ValueType, len(ts))
	for i, t := range ts {
		out[i] = abi.ValueType(t)
	}
	return out
}

// availableImports lists module.name of every host function for this
// factory's ABI version and WASI profile.
func (g *vmGroup) availableImports() map[string]bool {
	m := map[string]bool{}
	for _, h := range envFunctions(g.abi) {
		m[abi.ModuleEnv+"."+h.sig.Name] = true
	}
	for _, h := range wasiFunctions(g.profile) {
		m[abi.ModuleWASI+"."+h.sig.Name] = true
		m[abi.ModuleWASIUnstable+"."+h.sig.Name] = true
	}
	return m
}

// NewFilter binds a stream to its worker's VM (StreamInfo.Worker modulo the
// number of VMs). A VM that faulted is replaced here, at most once per
// reloadBackoff; while none is healthy the stream fails per fail_open.
func (f *Factory) NewFilter(cb httpfilter.Callbacks) (httpfilter.Filter, error) {
	if f.closed.Load() {
		return nil, errors.New("wasm: filter factory is closed")
	}
	g := f.g
	worker := 0
	if info := cb.Info(); info != nil && info.Worker > 0 {
		worker = info.Worker % len(g.slots)
	}
	return newStream(f, g.slots[worker].get(g, worker), cb), nil
}

func (s *workerSlot) get(g *vmGroup, worker int) *vmInstance {
	select {
	case <-s.ready:
	case <-g.ctx.Done():
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	vm := s.pickLocked(g, worker)
	if vm != nil {
		vm.bound.Add(1) // released by stream.forget; a retired VM waits for it
	}
	return vm
}

func (s *workerSlot) pickLocked(g *vmGroup, worker int) *vmInstance {
	if s.vm != nil && !s.vm.failed.Load() {
		return s.vm
	}
	if time.Since(s.lastAttempt) < reloadBackoff || g.ctx.Err() != nil {
		return s.vm // failed (or nil): streams fail per policy
	}
	s.lastAttempt = time.Now()
	vm, err := g.newVM(worker)
	if err == nil {
		// The replacement gets every live plugin's root context, in order.
		for _, p := range g.livePlugins() {
			if err = vm.startPlugin(g.ctx, p); err != nil {
				vm.close()
				break
			}
		}
	}
	if err != nil {
		g.logger.Error("wasm: failed to reload VM", "worker", worker, "err", err)
		return s.vm
	}
	if old := s.vm; old != nil {
		go old.close()
	}
	s.vm = vm
	return vm
}

// Close ends this plugin's root context in every worker VM (proxy_on_done,
// proxy_on_delete) and, if it was the group's last plugin, stops ticks and
// background deliveries and releases the VMs.
func (f *Factory) Close() error {
	if !f.closed.CompareAndSwap(false, true) {
		return nil
	}
	g := f.g
	if g == nil {
		return nil
	}
	g.pluginsMu.Lock()
	for i, p := range g.plugins {
		if p == f {
			g.plugins = append(g.plugins[:i:i], g.plugins[i+1:]...)
			break
		}
	}
	g.pluginsMu.Unlock()
	for _, s := range g.slots {
		if s == nil {
			continue
		}
		s.mu.Lock()
		vm := s.vm
		s.mu.Unlock()
		if vm != nil {
			vm.stopPlugin(f)
		}
	}
	shared.release(f.cfg.VMID)
	groups.Lock()
	g.refs--
	last := g.refs == 0
	if last && groups.m[g.key] == g {
		delete(groups.m, g.key)
	}
	groups.Unlock()
	if last {
		g.close()
	}
	return nil
}

// close stops the group's background work and releases every VM.
func (g *vmGroup) close() {
	if g.cancel != nil {
		g.cancel()
	}
	g.building.Wait()
	for _, s := range g.slots {
		if s == nil {
			continue
		}
		s.mu.Lock()
		vm := s.vm
		s.vm = nil
		s.mu.Unlock()
		if vm != nil {
			vm.close()
		}
	}
	g.enginesMu.Lock()
	engines := g.engines
	g.engines = nil
	g.enginesMu.Unlock()
	for _, e := range engines {
		e.rt.Close(context.Background())
	}
}

// Instantiations reports how many VM instances this factory's group has
// created (workers plus replacements after faults).
func (f *Factory) Instantiations() int64 { return f.g.instantiations.Load() }

// Start releases the ticks and http_calls held since the VMs started
// (Env.HoldUntilStarted). It is idempotent.
func (f *Factory) Start() { f.g.Start() }

// Start is Factory.Start for the whole group.
func (g *vmGroup) Start() { g.startOnce.Do(func() { close(g.started) }) }

// waitStarted blocks until Start, the group's close or stop; it reports
// whether the group started.
func (g *vmGroup) waitStarted(stop <-chan struct{}) bool {
	select {
	case <-g.started:
		return true
	case <-g.ctx.Done():
	case <-stop:
	}
	return false
}
