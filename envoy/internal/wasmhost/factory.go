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
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

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

// Factory is the wasm filter factory: one VM per worker, each serving every
// stream bound to that worker (docs/local-runtime.md "one VM per worker, never one per
// request").
type Factory struct {
	cfg     httpfilter.WasmConfig
	env     httpfilter.Env
	code    []byte
	abi     abi.Version
	profile string
	rtCfg   wazero.RuntimeConfig
	logger  *slog.Logger
	// logPrefix is Envoy's plugin log prefix (" name root_id vm_id").
	logPrefix string
	envVars   []string // "K=V", sorted

	ctx    context.Context
	cancel context.CancelFunc
	closed atomic.Bool
	// started is closed by Start (at once without Env.HoldUntilStarted):
	// ticks and http_call dispatches wait for it.
	started   chan struct{}
	startOnce sync.Once

	slots  []*workerSlot
	codeRT wazero.Runtime // owns the factory's reference to the compiled code

	instantiations atomic.Int64 // VM instances created, for tests and stats
}

type workerSlot struct {
	mu          sync.Mutex
	vm          *vmInstance
	lastAttempt time.Time
}

// NewFactory builds the filter factory for one wasm http filter entry: it
// loads and validates the module (ABI version marker, imports against the
// WASI profile), then starts and configures one VM per worker. A module
// Envoy would refuse, or whose proxy_on_vm_start / proxy_on_configure
// returns false, is an error here.
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
	workers := env.Workers
	if workers <= 0 {
		workers = 1
	}
	logger := env.Logger
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("plugin", cfg.PluginName, "root_id", cfg.RootID, "vm_id", cfg.VMID)
	cache, err := compilationCache(env.CacheDir)
	if err != nil {
		return nil, err
	}
	f := &Factory{
		cfg:       cfg,
		env:       env,
		code:      code,
		profile:   profile,
		logger:    logger,
		logPrefix: envoyLogPrefix(cfg),
		// 1 GiB, proxy-wasm-cpp-host's PROXY_WASM_HOST_MAX_WASM_MEMORY_SIZE_BYTES.
		// Guest memory is mapped, not sliced (withGuestMemory): otherwise every
		// memory.grow copies the whole linear memory, which showed as 30 ms
		// stalls on 1 MB bodies.
		rtCfg: wazero.NewRuntimeConfig().WithCompilationCache(cache).WithMemoryLimitPages(16384),
	}
	keys := make([]string, 0, len(cfg.EnvVars))
	for k := range cfg.EnvVars {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		f.envVars = append(f.envVars, k+"="+cfg.EnvVars[k])
	}
	if err := f.validate(); err != nil {
		return nil, err
	}
	// From here on Close releases what validate kept.
	f.ctx, f.cancel = context.WithCancel(context.Background())
	f.started = make(chan struct{})
	if !env.HoldUntilStarted {
		f.Start()
	}
	shared.acquire(cfg.VMID)
	f.slots = make([]*workerSlot, workers)
	for i := range f.slots {
		vm, err := f.newVM(i)
		if err != nil {
			f.Close()
			return nil, err
		}
		f.slots[i] = &workerSlot{vm: vm}
	}
	return f, nil
}

// validate compiles the module once (filling the compilation cache) and
// checks what Envoy checks before instantiating: the ABI version marker and
// that every import is one the host provides.
func (f *Factory) validate() error {
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, f.rtCfg)
	cm, err := rt.CompileModule(ctx, f.code)
	if err != nil {
		rt.Close(ctx)
		return fmt.Errorf("wasm: failed to load module: %w", err)
	}
	if err := f.checkModule(cm); err != nil {
		rt.Close(ctx)
		return err
	}
	// Holding this compiled module keeps the machine code in the shared
	// engine cache, so each worker VM's CompileModule is a cache hit.
	f.codeRT = rt
	return nil
}

func (f *Factory) checkModule(cm wazero.CompiledModule) error {
	exports := cm.ExportedFunctions()
	switch {
	case exports[abi.V021.Marker()] != nil:
		f.abi = abi.V021
	case exports[abi.V020.Marker()] != nil:
		f.abi = abi.V020
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
	for _, cb := range abi.GuestCallbacks {
		if fn := exports[cb.Name]; fn != nil && !cb.SameSignature(catalogueTypes(fn.ParamTypes()), catalogueTypes(fn.ResultTypes())) {
			return fmt.Errorf("wasm: Bad function signature for: %s", cb.Name)
		}
	}
	avail := f.availableImports()
	var missing []string
	for _, imp := range cm.ImportedFunctions() {
		mod, name, _ := imp.Import()
		if !avail[mod+"."+name] {
			missing = append(missing, mod+"."+name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("wasm: module imports functions the %s host does not provide: %s", f.profile, strings.Join(missing, ", "))
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
func (f *Factory) availableImports() map[string]bool {
	m := map[string]bool{}
	for _, h := range envFunctions(f.abi) {
		m[abi.ModuleEnv+"."+h.sig.Name] = true
	}
	for _, h := range wasiFunctions(f.profile) {
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
	worker := 0
	if info := cb.Info(); info != nil && info.Worker > 0 {
		worker = info.Worker % len(f.slots)
	}
	return newStream(f, f.slots[worker].get(f, worker), cb), nil
}

func (s *workerSlot) get(f *Factory, worker int) *vmInstance {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.vm != nil && !s.vm.failed.Load() {
		return s.vm
	}
	if time.Since(s.lastAttempt) < reloadBackoff || f.closed.Load() {
		return s.vm // failed (or nil): streams fail per policy
	}
	s.lastAttempt = time.Now()
	vm, err := f.newVM(worker)
	if err != nil {
		f.logger.Error("wasm: failed to reload VM", "worker", worker, "err", err)
		return s.vm
	}
	if old := s.vm; old != nil {
		go old.close()
	}
	s.vm = vm
	return vm
}

// Close stops ticks and background deliveries and releases every VM.
func (f *Factory) Close() error {
	if !f.closed.CompareAndSwap(false, true) {
		return nil
	}
	if f.cancel != nil {
		f.cancel()
	}
	for _, s := range f.slots {
		if s == nil {
			continue
		}
		s.mu.Lock()
		vm := s.vm
		s.vm = nil
		s.mu.Unlock()
		if vm != nil {
			vm.shutdown()
		}
	}
	if f.ctx != nil {
		shared.release(f.cfg.VMID)
	}
	if f.codeRT != nil {
		f.codeRT.Close(context.Background())
	}
	return nil
}

// Instantiations reports how many VM instances this factory has created
// (workers plus replacements after faults).
func (f *Factory) Instantiations() int64 { return f.instantiations.Load() }

// Start releases the ticks and http_calls held since the VMs started
// (Env.HoldUntilStarted). It is idempotent.
func (f *Factory) Start() { f.startOnce.Do(func() { close(f.started) }) }

// waitStarted blocks until Start, the factory's close or stop; it reports
// whether the factory started.
func (f *Factory) waitStarted(stop <-chan struct{}) bool {
	select {
	case <-f.started:
		return true
	case <-f.ctx.Done():
	case <-stop:
	}
	return false
}
