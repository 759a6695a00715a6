// Command chime is the single chime binary (docs/configuration.md#cli): the local
// Envoy-compatible proxy, the host service, the mock provider and helpers,
// each as a subcommand.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	_ "time/tzdata" // the host renders tasks in any IANA zone, like chime.wasm, whatever the machine has
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCommand().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "chime:", err)
		os.Exit(1)
	}
}
