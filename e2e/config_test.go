package e2e

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/chimehq/chime/envoy"
)

func startLocalErr(t *testing.T, yamlText string) error {
	t.Helper()
	path := filepath.Join(t.TempDir(), "envoy.yaml")
	require.NoError(t, os.WriteFile(path, []byte(yamlText), 0o644))
	srv, err := envoy.Start(context.Background(), envoy.Options{
		ConfigPath: path,
		Logger:     slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err == nil {
		srv.Close()
	}
	return err
}

// TestInvalidConfigNamesTheField: a config Envoy rejects is rejected here
// too, with an error that names the offending field.
func TestInvalidConfigNamesTheField(t *testing.T) {
	raw := string(rewriteConfig(t, stackConfig{upstreamPort: 1, hostPort: 2}, freePort(t), freePort(t)))
	bad := strings.Replace(raw, "stat_prefix", "stat_prefx", 1)
	require.NotEqual(t, raw, bad, "the product envoy.yaml must have a stat_prefix")
	err := startLocalErr(t, bad)
	require.Error(t, err)
	require.Contains(t, err.Error(), "stat_prefx")
}

// TestMissingWasmFileFailsStart: a wasm filter whose file is absent stops
// the runtime from starting, with the path in the error.
func TestMissingWasmFileFailsStart(t *testing.T) {
	raw := string(rewriteConfig(t, stackConfig{upstreamPort: 1, hostPort: 2}, freePort(t), freePort(t)))
	missing := filepath.Join(t.TempDir(), "nope.wasm")
	bad := strings.Replace(raw, chimeWasm(t), missing, 1)
	require.NotEqual(t, raw, bad)
	err := startLocalErr(t, bad)
	require.Error(t, err)
	require.Contains(t, err.Error(), "nope.wasm")
}
