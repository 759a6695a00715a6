package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
)

// hostFlags pick the host config file and override it and the environment
// (docs/configuration.md: defaults < file < env < flags).
type hostFlags struct {
	config  string
	addr    string
	dataDir string
}

// register adds the flags; addrFlag is "addr" for `chime host` and
// "host-addr" for `chime up`, where other services have addresses too.
func (f *hostFlags) register(cmd *cobra.Command, addrFlag string) {
	cmd.Flags().StringVar(&f.config, "config", "", "host config file (default $"+host.ConfigEnv+"; see chime.example.yaml)")
	cmd.Flags().StringVar(&f.addr, addrFlag, "", "host service listen address (default: listen in the config file, or "+host.DefaultAddr+")")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "data directory (default $CHIME_DATA_DIR, dataDir in the config file, or ./data)")
}

// hostConfig layers the flags over host.LoadConfig.
func (f *hostFlags) hostConfig() (host.Config, error) {
	cfg, err := host.LoadConfig(f.config)
	if err != nil {
		return cfg, err
	}
	if f.addr != "" {
		cfg.Addr = f.addr
	}
	if f.dataDir != "" {
		cfg.DataDir = f.dataDir
	}
	return cfg, nil
}

func (f *hostFlags) service() (*host.Service, host.Config, error) {
	cfg, err := f.hostConfig()
	if err != nil {
		return nil, cfg, err
	}
	return newService(cfg)
}

func newService(cfg host.Config) (*host.Service, host.Config, error) {
	logger := newLogger()
	for _, w := range cfg.Warnings() {
		logger.Warn("host config: " + w)
	}
	svc, err := host.New(cfg, logger)
	return svc, cfg, err
}

func newHostCommand() *cobra.Command {
	var flags hostFlags
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Run the host service alone (state, clock tool, NTP, metrics)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			svc, cfg, err := flags.service()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "chime host: http://%s (data %s)\n", cfg.Addr, cfg.DataDir)
			return svc.Run(cmd.Context())
		},
	}
	flags.register(cmd, "addr")
	return cmd
}
