// Package envoy is chime's Envoy-compatible local runtime (docs/local-runtime.md): it
// loads the same envoy.yaml Envoy runs, builds the wasm HTTP filters on
// wazero, and serves the listeners and the admin endpoint.
//
//	srv, err := envoy.Start(ctx, envoy.Options{ConfigPath: "envoy.yaml"})
//	if err != nil { ... }
//	defer srv.Close()
//	fmt.Println(srv.Addr("chime"), srv.AdminAddr())
package envoy

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/proxy"
	"github.com/chimehq/chime/envoy/internal/stats"
	"github.com/chimehq/chime/envoy/internal/wasmhost"
)

// WASI profiles (docs/local-runtime.md).
const (
	// ProfileEnvoy138 matches released Envoy 1.33–1.38: poll_oneoff answers
	// ENOSYS. It is the default.
	ProfileEnvoy138 = "envoy-1.38"
	// ProfileEnvoy139 matches Envoy 1.39.0: the full WASI set, with a
	// poll_oneoff that waits.
	ProfileEnvoy139 = "envoy-1.39"
	// ProfileEnvoyLatest is an alias of the newest profile (envoy-1.39).
	ProfileEnvoyLatest = "envoy-latest"
)

// Version is what /server_info reports.
const Version = "chime-envoy/1.38-compatible"

// Options configure Start.
type Options struct {
	// ConfigPath is the envoy.yaml to load (required). Relative wasm code
	// paths in it resolve against the working directory, as in Envoy.
	ConfigPath string
	// WASIProfile is ProfileEnvoy138 (default), ProfileEnvoy139 or
	// ProfileEnvoyLatest (its alias).
	WASIProfile string
	// CacheDir holds compiled wasm modules across runs ("" = no cache).
	CacheDir string
	// InterpretWhileCompiling serves with interpreted VMs while a module
	// missing from the cache compiles, then moves to compiled ones
	// (docs/local-runtime.md#start). False: Start compiles first.
	InterpretWhileCompiling bool
	// Workers is the number of worker VMs per filter (Envoy's
	// --concurrency). Default: GOMAXPROCS.
	Workers int
	// Logger receives runtime and plugin logs. Default: slog.Default().
	Logger *slog.Logger
	// UpstreamOverride, when set, points cluster "llm" at a provider base
	// URL such as https://api.openai.com or http://127.0.0.1:9000 (docs/configuration.md
	// `chime up --upstream`, CHIME_UPSTREAM): its endpoint becomes the
	// URL's host:port, https turns on TLS with SNI = host verified against
	// the system roots, and routes to "llm" send :authority = host. The
	// rest of the config file applies unchanged. A bad URL, or a config
	// without cluster "llm", fails Start.
	UpstreamOverride string
	// PluginConfiguration, when set, may rewrite the configuration of each
	// wasm filter by its root_id before the filters start (`chime up`
	// hands the filter the host token this way). An error fails Start.
	PluginConfiguration func(rootID string, config []byte) ([]byte, error)
}

// LevelName is a slog.HandlerOptions.ReplaceAttr that names the levels
// slog lacks as Envoy does: guest trace logs as "TRACE" and critical as
// "CRITICAL" (docs/local-runtime.md).
func LevelName(groups []string, a slog.Attr) slog.Attr { return wasmhost.LevelName(groups, a) }

// UpstreamCluster is the provider cluster UpstreamOverride replaces (docs/configuration.md).
const UpstreamCluster = "llm"

// overrideRootCAs replaces the system roots for UpstreamOverride; tests
// set it to trust their loopback server.
var overrideRootCAs *x509.CertPool

// Server is a running runtime.
type Server struct {
	cfg       *config.Config
	proxy     *proxy.Server
	admin     *proxy.Admin
	clusters  *proxy.Clusters
	factories []httpfilter.Factory
}

// newWasmFactory is swapped in tests; the real one is wasmhost's.
var newWasmFactory = wasmhost.NewFactory

// Start loads and validates the config, builds the wasm filters, binds
// every listener and the admin address, and returns once they accept
// connections. ctx bounds startup only; Close stops the server.
func Start(ctx context.Context, opt Options) (*Server, error) {
	if opt.ConfigPath == "" {
		return nil, errors.New("envoy: Options.ConfigPath is required")
	}
	switch opt.WASIProfile {
	case "":
		opt.WASIProfile = ProfileEnvoy138
	case ProfileEnvoy138, ProfileEnvoy139:
	case ProfileEnvoyLatest:
		opt.WASIProfile = ProfileEnvoy139
	default:
		return nil, fmt.Errorf("envoy: unknown WASI profile %q (want %q, %q or %q)", opt.WASIProfile, ProfileEnvoy138, ProfileEnvoy139, ProfileEnvoyLatest)
	}
	if opt.Workers <= 0 {
		opt.Workers = runtime.GOMAXPROCS(0)
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	cfg, err := config.Load(opt.ConfigPath)
	if err != nil {
		return nil, err
	}
	if opt.UpstreamOverride != "" {
		o, err := cfg.OverrideUpstream(UpstreamCluster, opt.UpstreamOverride)
		if err != nil {
			return nil, err
		}
		if tls := cfg.Cluster(UpstreamCluster).TLS; tls != nil && overrideRootCAs != nil {
			tls.RootCAs = overrideRootCAs
		}
		opt.Logger.Info("upstream override", "cluster", o.Cluster, "url", opt.UpstreamOverride,
			"endpoint", o.Endpoint, "type", o.Type, "tls", o.TLS, "authority", o.Host)
	}
	if opt.PluginConfiguration != nil {
		for i := range cfg.Listeners {
			for j := range cfg.Listeners[i].HTTPFilters {
				f := &cfg.Listeners[i].HTTPFilters[j]
				if f.PluginConfiguration, err = opt.PluginConfiguration(f.RootID, f.PluginConfiguration); err != nil {
					return nil, fmt.Errorf("envoy: plugin configuration of %q: %w", f.RootID, err)
				}
			}
			for j := range cfg.Listeners[i].NetworkFilters {
				f := &cfg.Listeners[i].NetworkFilters[j]
				if f.PluginConfiguration, err = opt.PluginConfiguration(f.RootID, f.PluginConfiguration); err != nil {
					return nil, fmt.Errorf("envoy: plugin configuration of %q: %w", f.RootID, err)
				}
			}
		}
	}
	if err := checkWasmFiles(cfg); err != nil {
		return nil, err
	}
	st := stats.New()
	var tags []stats.TagSpecifier
	for _, t := range cfg.StatsTags {
		tags = append(tags, stats.TagSpecifier{Name: t.Name, Regex: t.Regex, FixedValue: t.FixedValue})
	}
	st.SetTagSpecifiers(tags)
	s := &Server{cfg: cfg, clusters: proxy.NewClusters(cfg.Clusters, st)}
	env := httpfilter.Env{
		Clusters:    s.clusters,
		Stats:       st,
		Logger:      opt.Logger,
		Workers:     opt.Workers,
		WASIProfile: opt.WASIProfile,
		CacheDir:    opt.CacheDir,
		NodeID:      cfg.NodeID,
		NodeCluster: cfg.NodeCluster,
		// Ticks and callouts begin once the listeners are bound.
		HoldUntilStarted: true,
		// Filters with one vm_id, code and VM configuration share VMs.
		VMScope: &httpfilter.VMScope{},
		// One VM is enough to serve; the other workers' follow at once.
		BackgroundWorkers:       true,
		InterpretWhileCompiling: opt.InterpretWhileCompiling,
	}
	filters := map[string][]httpfilter.Factory{}
	for _, l := range cfg.Listeners {
		for _, wc := range l.HTTPFilters {
			if err := ctx.Err(); err != nil {
				s.Close()
				return nil, err
			}
			f, err := newWasmFactory(wc, env)
			if err != nil {
				s.Close()
				return nil, fmt.Errorf("envoy: listener %s: wasm filter %s (root_id %q): %w", l.Name, wc.FilterName, wc.RootID, err)
			}
			s.factories = append(s.factories, f)
			filters[l.Name] = append(filters[l.Name], f)
		}
	}
	netFilters, err := s.buildNetworkFilters(ctx, env)
	if err != nil {
		s.Close()
		return nil, err
	}
	// bootstrap_extensions WasmService: a singleton gets one VM of its own
	// (Envoy runs it on the main thread); otherwise it is one more plugin
	// in each worker's VM, shared like a filter's.
	for i, svc := range cfg.Services {
		if err := ctx.Err(); err != nil {
			s.Close()
			return nil, err
		}
		senv := env
		if svc.Singleton {
			senv.Workers, senv.VMScope = 1, nil
		}
		f, err := newWasmFactory(svc.Wasm, senv)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("envoy: bootstrap_extensions[%d] (%s): wasm service (root_id %q): %w", i, svc.Name, svc.Wasm.RootID, err)
		}
		s.factories = append(s.factories, f)
	}
	s.proxy, err = proxy.Listen(proxy.Options{Config: cfg, Clusters: s.clusters, Filters: filters, NetworkFilters: netFilters, Workers: opt.Workers, Stats: st, Logger: opt.Logger})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("envoy: %w", err)
	}
	for _, f := range s.factories {
		if st, ok := f.(httpfilter.Starter); ok {
			st.Start()
		}
	}
	if cfg.Admin != nil {
		info := proxy.ServerInfo{Version: Version, NodeID: cfg.NodeID, NodeCluster: cfg.NodeCluster, Concurrency: opt.Workers, Start: time.Now(),
			Config: cfg, ListenerAddr: s.proxy.Addr}
		s.admin, err = proxy.ListenAdmin(cfg.Admin.Address, proxy.NewAdminHandler(st, info))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("envoy: admin: %w", err)
		}
	}
	return s, nil
}

// checkWasmFiles fails early, with the path, on wasm code that is missing
// (Envoy refuses such a config at load too).
func checkWasmFiles(cfg *config.Config) error {
	var all []httpfilter.WasmConfig
	for _, l := range cfg.Listeners {
		all = append(all, l.HTTPFilters...)
		all = append(all, l.NetworkFilters...)
	}
	for _, svc := range cfg.Services {
		all = append(all, svc.Wasm)
	}
	for _, wc := range all {
		if wc.CodePath == "" {
			continue
		}
		if _, err := os.Stat(wc.CodePath); err != nil {
			hint := ""
			if !filepath.IsAbs(wc.CodePath) {
				wd, _ := os.Getwd()
				hint = fmt.Sprintf(" (relative to the working directory %s, as in Envoy)", wd)
			}
			where := "wasm filter " + wc.FilterName
			if wc.ListenerName != "" {
				where = "listener " + wc.ListenerName + ": " + where
			}
			return fmt.Errorf("envoy: %s: %s: cannot read wasm code %q%s: %w",
				cfg.Path, where, wc.CodePath, hint, err)
		}
	}
	return nil
}

// Addr returns the bound host:port of a listener by name ("" if none).
func (s *Server) Addr(listener string) string {
	if s.proxy == nil {
		return ""
	}
	return s.proxy.Addr(listener)
}

// AdminAddr returns the admin host:port ("" when the config has no admin).
func (s *Server) AdminAddr() string {
	if s.admin == nil {
		return ""
	}
	return s.admin.Addr()
}

// Close stops the listeners and the admin, then releases the filters' VMs.
func (s *Server) Close() error {
	var errs []error
	if s.proxy != nil {
		errs = append(errs, s.proxy.Close())
	}
	if s.admin != nil {
		errs = append(errs, s.admin.Close())
	}
	for _, f := range s.factories {
		errs = append(errs, f.Close())
	}
	s.clusters.Close()
	return errors.Join(errs...)
}

// Listener is a bound listener of a running Server.
type Listener struct {
	Name string // the listener's name in the config
	Addr string // bound host:port
}

// Listeners returns the bound listeners in config order.
func (s *Server) Listeners() []Listener {
	var out []Listener
	for _, l := range s.cfg.Listeners {
		out = append(out, Listener{Name: l.Name, Addr: s.Addr(l.Name)})
	}
	return out
}
