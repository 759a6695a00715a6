package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
)

// newConfigCommand is `chime config`: tools for the host config file
// (docs/configuration.md).
func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Host config file tools",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "check [FILE]",
		Short: "Validate a host config file (default $" + host.ConfigEnv + "): prints ok, or each error with its field and line",
		Long: "Validates a host config file on its own (the environment variables that override it are not read).\n" +
			"Prints ok and exits 0, or prints every problem (file:line: field: what is wrong) and exits 1.\n" +
			"Warnings about settings that need a matching change in envoy.yaml are printed before ok.",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := strings.TrimSpace(os.Getenv(host.ConfigEnv))
			if len(args) == 1 {
				path = args[0]
			}
			if path == "" {
				return errors.New("config check: give a FILE or set " + host.ConfigEnv)
			}
			cfg, err := host.ReadConfigFile(path)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			for _, w := range cfg.Warnings() {
				fmt.Fprintln(out, "warning: "+w)
			}
			_, err = fmt.Fprintln(out, "ok")
			return err
		},
	})
	return cmd
}
