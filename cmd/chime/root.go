package main

import (
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/envoy"
)

// logLevel is shared by every subcommand (--log-level).
var logLevel string

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "chime",
		Short:         "chime gives LLM agents a sense of time and a way to keep working",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn, error")
	root.AddCommand(newVersionCommand(), newProxyCommand(), newUpCommand(), newHostCommand(), newMockLLMCommand(), newConfigCommand(), newHealthcheckCommand(), newTimersCommand(), newMCPCommand(), newStoreCommand(), newCronCommand(), newWatchCommand())
	return root
}

// newLogger builds the process logger. Task text and secrets are only ever
// logged at debug level.
func newLogger() *slog.Logger {
	var level slog.Level
	switch strings.ToLower(logLevel) {
	case "debug":
		level = slog.LevelDebug
	case "warn", "warning":
		level = slog.LevelWarn
	case "error":
		level = slog.LevelError
	default:
		level = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level, ReplaceAttr: envoy.LevelName}))
}
