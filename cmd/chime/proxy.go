package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chimehq/chime/envoy"
)

// proxyFlags are the knobs of the local runtime (docs/local-runtime.md) that are not in
// envoy.yaml because Envoy takes them on its command line too.
type proxyFlags struct {
	config      string
	wasiProfile string
	cacheDir    string
	interpret   bool
	concurrency int
	upstream    string // set by `chime up --upstream`
	token       string // set by `chime up`: the host token for the chime filter
}

// register adds the flags; configFlag is "config" for `chime proxy` (like
// `envoy -c`) and "envoy-config" for `chime up`, where --config is the host
// config file. Both take -c.
func (f *proxyFlags) register(cmd *cobra.Command, configFlag string) {
	cmd.Flags().StringVarP(&f.config, configFlag, "c", "envoy.yaml", "Envoy bootstrap config (the same file Envoy runs)")
	cmd.Flags().StringVar(&f.wasiProfile, "wasi-profile", "envoy-1.38", "WASI profile: envoy-1.38 (poll_oneoff answers ENOSYS), envoy-1.39 (full WASI set) or envoy-latest (alias of envoy-1.39)")
	cmd.Flags().StringVar(&f.cacheDir, "cache-dir", defaultCacheDir(), "on-disk wasm compilation cache (empty disables)")
	cmd.Flags().BoolVar(&f.interpret, "interpret-while-compiling", true, "serve from wasm's interpreter while a module missing from the cache compiles, then switch to the compiled one")
	cmd.Flags().IntVar(&f.concurrency, "concurrency", runtime.GOMAXPROCS(0), "worker count; one wasm VM per worker, like Envoy's --concurrency")
}

func (f *proxyFlags) start(ctx context.Context) (*envoy.Server, error) {
	return envoy.Start(ctx, envoy.Options{
		ConfigPath:              f.config,
		WASIProfile:             f.wasiProfile,
		CacheDir:                f.cacheDir,
		InterpretWhileCompiling: f.interpret,
		Workers:                 f.concurrency,
		Logger:                  newLogger(),
		UpstreamOverride:        f.upstream,
		PluginConfiguration: func(rootID string, config []byte) ([]byte, error) {
			if f.token == "" || !isChimeFilter(rootID, config) {
				return config, nil
			}
			return sjson.SetBytes(config, "token", f.token)
		},
	})
}

// isChimeFilter tells the chime filter's configuration among the wasm
// filters of envoy.yaml: root_id chime, or a JSON object with hostCluster.
func isChimeFilter(rootID string, config []byte) bool {
	if rootID == "chime" {
		return true
	}
	return gjson.ValidBytes(config) && gjson.GetBytes(config, "hostCluster").Exists()
}

func defaultCacheDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "chime", "wasm")
}

func newProxyCommand() *cobra.Command {
	var flags proxyFlags
	cmd := &cobra.Command{
		Use:   "proxy",
		Short: "Run the Envoy-compatible local proxy with the filters of envoy.yaml",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			srv, err := flags.start(cmd.Context())
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintf(cmd.OutOrStdout(), "chime proxy: config %s, admin http://%s\n", flags.config, srv.AdminAddr())
			<-cmd.Context().Done()
			return nil
		},
	}
	flags.register(cmd, "config")
	return cmd
}
