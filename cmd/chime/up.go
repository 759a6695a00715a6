package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/mockllm"
)

func newUpCommand() *cobra.Command {
	var (
		proxy    proxyFlags
		hostF    hostFlags
		mockAddr string
		upstream string
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the demo stack: host service, local proxy and (unless --upstream) the mock provider",
		Long: "Runs the host service, the local proxy with envoy.yaml and the mock provider in one process.\n" +
			"With --upstream URL (or CHIME_UPSTREAM) the mock is not started and envoy.yaml's cluster \"llm\"\n" +
			"points at URL instead (https uses TLS with the system roots).\n" +
			"-c/--envoy-config names the Envoy bootstrap; --config names the host config file (see chime.example.yaml).",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			out := cmd.OutOrStdout()
			if upstream == "" {
				upstream = os.Getenv("CHIME_UPSTREAM")
			}
			errc := make(chan error, 2)

			hcfg, err := hostF.hostConfig()
			if err != nil {
				return err
			}
			// No public default secret: without CHIME_HOST_TOKEN both sides
			// get the data dir's own random token (docs/failures.md).
			if hcfg.Token == "" {
				tok, created, err := host.LoadOrCreateToken(hcfg.DataDir)
				if err != nil {
					return err
				}
				if created {
					newLogger().Info("host token generated", "file", filepath.Join(hcfg.DataDir, host.TokenFile))
				}
				hcfg.Token = tok
			}
			proxy.token = hcfg.Token
			svc, hcfg, err := newService(hcfg)
			if err != nil {
				return err
			}
			hostDone := make(chan struct{})
			go func() {
				defer close(hostDone)
				if err := svc.Run(ctx); err != nil {
					errc <- fmt.Errorf("host: %w", err)
				}
			}()
			// The host closes its store when Run returns; wait for that on exit.
			defer func() { cancel(); <-hostDone }()
			fmt.Fprintf(out, "host service   http://%s (dashboard /ui, /api/sessions, /metrics; data %s)\n", hcfg.Addr, hcfg.DataDir)

			if upstream == "" {
				go func() {
					if err := mockllm.New().ListenAndServe(ctx, mockAddr); err != nil && !errors.Is(err, http.ErrServerClosed) {
						errc <- fmt.Errorf("mock provider: %w", err)
					}
				}()
				fmt.Fprintf(out, "mock provider  http://%s\n", mockAddr)
			}

			proxy.upstream = upstream
			srv, err := proxy.start(ctx)
			if err != nil {
				return err
			}
			defer srv.Close()
			for _, l := range srv.Listeners() {
				fmt.Fprintf(out, "proxy %-8s http://%s\n", l.Name, l.Addr)
			}
			fmt.Fprintf(out, "proxy admin    http://%s\n", srv.AdminAddr())
			if upstream != "" {
				fmt.Fprintf(out, "upstream       %s\n", upstream)
			}
			select {
			case <-ctx.Done():
				return nil
			case err := <-errc:
				return err
			}
		},
	}
	proxy.register(cmd, "envoy-config")
	hostF.register(cmd, "host-addr")
	cmd.Flags().StringVar(&mockAddr, "mock-addr", defaultMockAddr, "mock provider listen address")
	cmd.Flags().StringVar(&upstream, "upstream", "", "provider URL for cluster llm instead of the mock (default $CHIME_UPSTREAM)")
	return cmd
}
