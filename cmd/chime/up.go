package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/envoy"
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
			// The host's port is bound first: the host opens its store while
			// the proxy compiles the filter, and a request the filter sends
			// the host before it serves waits in the listen queue.
			hostLn, err := net.Listen("tcp", hcfg.Addr)
			if err != nil {
				return fmt.Errorf("host: host: listen: %w", err)
			}
			type built struct {
				svc *host.Service
				err error
			}
			hostBuilt := make(chan built, 1)
			go func() {
				svc, _, err := newService(hcfg)
				hostBuilt <- built{svc, err}
			}()
			hostDone := make(chan struct{})
			// The host closes its store when Serve returns; wait for that on exit.
			defer func() { cancel(); <-hostDone }()
			if upstream == "" {
				go func() {
					if err := mockllm.New().ListenAndServe(ctx, mockAddr); err != nil && !errors.Is(err, http.ErrServerClosed) {
						errc <- fmt.Errorf("mock provider: %w", err)
					}
				}()
			}
			proxyCtx, stopProxy := context.WithCancel(ctx)
			defer stopProxy()
			type started struct {
				srv *envoy.Server
				err error
			}
			proxyStarted := make(chan started, 1)
			go func() {
				proxy.upstream = upstream
				srv, err := proxy.start(proxyCtx)
				proxyStarted <- started{srv, err}
			}()
			hb := <-hostBuilt
			if hb.err != nil {
				hostLn.Close()
				close(hostDone)
				stopProxy()
				if ps := <-proxyStarted; ps.srv != nil {
					ps.srv.Close()
				}
				return hb.err
			}
			go func() {
				defer close(hostDone)
				if err := hb.svc.Serve(ctx, hostLn); err != nil {
					errc <- fmt.Errorf("host: %w", err)
				}
			}()
			fmt.Fprintf(out, "host service   http://%s (dashboard /ui, /api/sessions, /metrics; data %s)\n", hcfg.Addr, hcfg.DataDir)

			if upstream == "" {
				fmt.Fprintf(out, "mock provider  http://%s\n", mockAddr)
			}

			ps := <-proxyStarted
			if ps.err != nil {
				return ps.err
			}
			srv := ps.srv
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
