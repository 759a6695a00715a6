// Package deploy_test validates the deployment files (docs/configuration.md) with what
// runs on a machine without Docker or Envoy: compose-spec's own loader for
// the compose file, and the repository's Envoy config loader and local
// runtime (the `chime proxy` code) for the Envoy config in it.
package deploy_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

func composeDir() string { return filepath.Join(repoRoot(), "deploy", "compose") }

// loadCompose loads docker-compose.yaml as `docker compose` would, with env
// as the only environment (no .env file, no OS environment).
func loadCompose(t *testing.T, env ...string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(composeDir(), "docker-compose.yaml")},
		cli.WithWorkingDirectory(composeDir()), cli.WithEnv(env), cli.WithResolvedPaths(true))
	require.NoError(t, err)
	p, err := opts.LoadProject(context.Background())
	require.NoError(t, err, "compose-spec loader")
	return p
}

// argAfter returns the value following flag in a command line.
func argAfter(t *testing.T, cmd []string, flag string) string {
	t.Helper()
	i := slices.Index(cmd, flag)
	require.True(t, i >= 0 && i+1 < len(cmd), "%q has no %s", cmd, flag)
	return cmd[i+1]
}

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	assert.ElementsMatch(t, []string{"envoy", "chime-host", "mockllm"}, p.ServiceNames())

	envoy := p.Services["envoy"]
	assert.Regexp(t, regexp.MustCompile(`^envoyproxy/envoy:v1\.39\.\d+$`), envoy.Image,
		"the official image pinned to a 1.39 patch: the first Envoy with the full WASI set")
	for _, name := range []string{"chime-host", "mockllm"} {
		s := p.Services[name]
		require.NotNil(t, s.Build, "%s is built from the repository Dockerfile", name)
		assert.Equal(t, repoRoot(), s.Build.Context, name)
		assert.FileExists(t, filepath.Join(s.Build.Context, s.Build.Dockerfile), name)
	}
	assert.Equal(t, "host", p.Services["chime-host"].Command[0])
	assert.Equal(t, "mockllm", p.Services["mockllm"].Command[0])

	// Published on loopback only, at the same ports as `make run`.
	want := map[string][]uint32{"envoy": {10000, 9901}, "chime-host": {8787}, "mockllm": {8788}}
	for name, ports := range want {
		var got []uint32
		for _, pc := range p.Services[name].Ports {
			assert.Equal(t, "127.0.0.1", pc.HostIP, "%s port %d", name, pc.Target)
			assert.Equal(t, pc.Target, parsePort(t, pc.Published), "%s publishes %d under another port", name, pc.Target)
			got = append(got, pc.Target)
		}
		assert.ElementsMatch(t, ports, got, name)
	}

	// Each chime service listens on 0.0.0.0 at the port it publishes and
	// its health check probes.
	for name, port := range map[string]string{"chime-host": "8787", "mockllm": "8788"} {
		s := p.Services[name]
		assert.Equal(t, "0.0.0.0:"+port, argAfter(t, s.Command, "--addr"), name)
		require.NotNil(t, s.HealthCheck, name)
		test := s.HealthCheck.Test
		require.Len(t, test, 4, "%s: %q", name, test)
		assert.Equal(t, []string{"CMD", "/usr/local/bin/chime", "healthcheck"}, []string(test[:3]), name)
		assert.True(t, strings.HasPrefix(test[3], "http://127.0.0.1:"+port+"/"), "%s probes %s", name, test[3])
	}
	require.NotNil(t, envoy.HealthCheck)
	assert.Contains(t, strings.Join(envoy.HealthCheck.Test, " "), "/dev/tcp/127.0.0.1/9901", "Envoy's health check asks its admin")
	assert.Contains(t, strings.Join(envoy.HealthCheck.Test, " "), "GET /ready")
	for _, dep := range []string{"chime-host", "mockllm"} {
		assert.Equal(t, types.ServiceConditionHealthy, envoy.DependsOn[dep].Condition, "envoy waits for %s", dep)
	}

	// chime.wasm reaches Envoy through a volume the chime image fills.
	wasmMount := func(s types.ServiceConfig) *types.ServiceVolumeConfig {
		for i, v := range s.Volumes {
			if v.Source == "chime-wasm" {
				return &s.Volumes[i]
			}
		}
		return nil
	}
	hv, ev := wasmMount(p.Services["chime-host"]), wasmMount(envoy)
	require.NotNil(t, hv, "chime-host mounts chime-wasm")
	require.NotNil(t, ev, "envoy mounts chime-wasm")
	assert.Equal(t, types.VolumeTypeVolume, ev.Type)
	assert.Equal(t, "/usr/share/chime", hv.Target, "the image's chime.wasm directory (Dockerfile)")
	assert.Equal(t, hv.Target, ev.Target)
	assert.True(t, ev.ReadOnly)
	assert.Contains(t, p.VolumeNames(), "chime-wasm")

	cfg := envoyConfigMount(t, envoy)
	assert.Equal(t, filepath.Join(composeDir(), "envoy.yaml"), cfg.Source)
	assert.FileExists(t, cfg.Source)
	assert.Contains(t, strings.Join(envoy.Command, " "), cfg.Target, "envoy runs the mounted config")

	// The host keeps its state in a volume at CHIME_DATA_DIR.
	host := p.Services["chime-host"]
	dataDir := *host.Environment["CHIME_DATA_DIR"]
	assert.True(t, slices.ContainsFunc(host.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Type == types.VolumeTypeVolume && v.Target == dataDir
	}), "chime-host keeps %s in a volume", dataDir)
}

func envoyConfigMount(t *testing.T, envoy types.ServiceConfig) types.ServiceVolumeConfig {
	t.Helper()
	for _, v := range envoy.Volumes {
		if v.Type == types.VolumeTypeBind && strings.HasSuffix(v.Target, "envoy.yaml") {
			assert.True(t, v.ReadOnly)
			return v
		}
	}
	t.Fatal("envoy has no envoy.yaml bind mount")
	return types.ServiceVolumeConfig{}
}

func parsePort(t *testing.T, s string) uint32 {
	t.Helper()
	var n uint32
	for _, c := range s {
		require.True(t, c >= '0' && c <= '9', "port %q", s)
		n = n*10 + uint32(c-'0')
	}
	return n
}

// TestComposeVariables: one variable sets the token on both sides, and one
// switches Envoy to the real-provider config.
func TestComposeVariables(t *testing.T) {
	for _, tc := range []struct {
		env   []string
		token string
	}{{nil, "dev-token"}, {[]string{"CHIME_HOST_TOKEN=s3cret-token"}, "s3cret-token"}} {
		p := loadCompose(t, tc.env...)
		assert.Equal(t, tc.token, *p.Services["chime-host"].Environment["CHIME_HOST_TOKEN"])
		assert.Equal(t, tc.token, *p.Services["envoy"].Environment["CHIME_HOST_TOKEN"])
	}
	// Envoy reads no environment: its command substitutes the token for
	// the plugin configuration's "dev-token", so that literal must be there
	// exactly once (TestComposeEnvoyConfigRuns runs the substituted file).
	cmd := strings.Join(loadCompose(t).Services["envoy"].Command, " ")
	assert.Contains(t, cmd, `s|\"token\":\"dev-token\"|\"token\":\"${CHIME_HOST_TOKEN}\"|`)
	for _, f := range []string{"envoy.yaml", "envoy-openai.yaml"} {
		raw, err := os.ReadFile(filepath.Join(composeDir(), f))
		require.NoError(t, err)
		assert.Equal(t, 1, strings.Count(string(raw), tokenLiteral), f)
	}

	p := loadCompose(t, "CHIME_ENVOY_CONFIG=./envoy-openai.yaml")
	cfg := envoyConfigMount(t, p.Services["envoy"])
	assert.Equal(t, filepath.Join(composeDir(), "envoy-openai.yaml"), cfg.Source)
	assert.FileExists(t, cfg.Source)
}

const tokenLiteral = `"token":"dev-token"`
