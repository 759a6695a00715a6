package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/mockllm"
)

// defaultMockAddr is the mock provider's address (docs/mock-provider.md).
const defaultMockAddr = "127.0.0.1:8788"

func newMockLLMCommand() *cobra.Command {
	var addr string
	cmd := &cobra.Command{
		Use:   "mockllm",
		Short: "Run the scripted mock LLM provider (all three protocols, JSON and SSE)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "chime mockllm: http://%s\n", addr)
			return mockllm.New().ListenAndServe(cmd.Context(), addr)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", defaultMockAddr, "listen address")
	return cmd
}
