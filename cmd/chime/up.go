package main

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/mockllm"
)

func newUpCommand() *cobra.Command {
	var (
		flags    proxyFlags
		mockAddr string
		noMock   bool
	)
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run the demo stack: the local proxy and the mock provider",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			out := cmd.OutOrStdout()
			errc := make(chan error, 1)
			if !noMock {
				go func() {
					if err := mockllm.New().ListenAndServe(ctx, mockAddr); err != nil && !errors.Is(err, http.ErrServerClosed) {
						errc <- fmt.Errorf("mock provider: %w", err)
					}
				}()
				fmt.Fprintf(out, "mock provider  http://%s\n", mockAddr)
			}
			srv, err := flags.start(ctx)
			if err != nil {
				return err
			}
			defer srv.Close()
			for _, l := range srv.Listeners() {
				fmt.Fprintf(out, "proxy %-8s http://%s\n", l.Name, l.Addr)
			}
			fmt.Fprintf(out, "proxy admin    http://%s\n", srv.AdminAddr())
			select {
			case <-ctx.Done():
				return nil
			case err := <-errc:
				return err
			}
		},
	}
	flags.register(cmd)
	cmd.Flags().StringVar(&mockAddr, "mock-addr", defaultMockAddr, "mock provider listen address")
	cmd.Flags().BoolVar(&noMock, "no-mock", false, "do not start the mock provider (envoy.yaml's llm cluster points elsewhere)")
	return cmd
}
