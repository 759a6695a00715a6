package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
)

// hostFlags override host.ConfigFromEnv (SPEC §12: CHIME_DATA_DIR,
// CHIME_HOST_TOKEN, CHIME_NTP*).
type hostFlags struct {
	addr    string
	dataDir string
}

// register adds the flags; addrFlag is "addr" for `chime host` and
// "host-addr" for `chime up`, where other services have addresses too.
func (f *hostFlags) register(cmd *cobra.Command, addrFlag string) {
	cmd.Flags().StringVar(&f.addr, addrFlag, host.DefaultAddr, "host service listen address")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", "", "data directory (default $CHIME_DATA_DIR or ./data)")
}

func (f *hostFlags) service() (*host.Service, host.Config, error) {
	cfg, err := host.ConfigFromEnv()
	if err != nil {
		return nil, cfg, err
	}
	cfg.Addr = f.addr
	if f.dataDir != "" {
		cfg.DataDir = f.dataDir
	}
	svc, err := host.New(cfg, newLogger())
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
