package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dockerInstr is one Dockerfile instruction with its continuation lines
// joined.
type dockerInstr struct{ op, args string }

func parseDockerfile(t *testing.T) []dockerInstr {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "Dockerfile"))
	require.NoError(t, err)
	var out []dockerInstr
	var cur strings.Builder
	for _, line := range strings.Split(string(raw), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, `\`); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		op, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, dockerInstr{strings.ToUpper(op), strings.TrimSpace(args)})
		cur.Reset()
	}
	return out
}

// makeRecipe returns target's recipe lines with the Makefile's := and ?=
// variables expanded.
func makeRecipe(t *testing.T, target string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "Makefile"))
	require.NoError(t, err)
	vars := map[string]string{}
	assign := regexp.MustCompile(`^([A-Z_]+)\s*(?::=|\?=|=)\s*(.*)$`)
	var recipe []string
	in := false
	for _, line := range strings.Split(string(raw), "\n") {
		if m := assign.FindStringSubmatch(line); m != nil {
			vars[m[1]] = m[2]
			continue
		}
		if strings.HasPrefix(line, "\t") {
			if in {
				recipe = append(recipe, strings.TrimSpace(line))
			}
			continue
		}
		in = strings.HasPrefix(line, target+":")
	}
	require.NotEmpty(t, recipe, "Makefile target %s", target)
	ref := regexp.MustCompile(`\$\(([A-Z_]+)\)`)
	for i := range recipe {
		for range 5 { // nested variables
			recipe[i] = ref.ReplaceAllStringFunc(recipe[i], func(s string) string {
				name := ref.FindStringSubmatch(s)[1]
				if name == "VERSION" || name == "CURDIR" {
					return "${" + name + "}" // set per build, compared by name
				}
				if name == "GO" {
					return "go"
				}
				return vars[name]
			})
		}
	}
	return recipe
}

// goBuild normalizes a command line containing `go build`: shell words,
// without the output path (each build writes its own place).
func goBuild(t *testing.T, cmd string) []string {
	t.Helper()
	var words []string
	var w strings.Builder
	quoted, has := false, false
	for _, r := range cmd {
		switch {
		case r == '"':
			quoted, has = !quoted, true
		case r == ' ' && !quoted:
			if has {
				words = append(words, w.String())
			}
			w.Reset()
			has = false
		default:
			w.WriteRune(r)
			has = true
		}
	}
	if has {
		words = append(words, w.String())
	}
	require.False(t, quoted, "unbalanced quotes in %q", cmd)
	// A Makefile recipe runs the command through scripts/goprogress.sh.
	if i := slices.Index(words, "--"); i >= 0 {
		words = words[i+1:]
	}
	if i := slices.Index(words, "-o"); i >= 0 && i+1 < len(words) {
		words = slices.Delete(words, i, i+2)
	}
	return words
}

// TestDockerfileBuildsWhatMakeBuilds: the image's binary and filter come
// from the same `go build` commands as `make build` and `make wasm`, so
// the image cannot drift from what CI tests.
func TestDockerfileBuildsWhatMakeBuilds(t *testing.T) {
	var dockerBuilds []string
	for _, in := range parseDockerfile(t) {
		if in.op == "RUN" && strings.Contains(in.args, "go build") {
			dockerBuilds = append(dockerBuilds, in.args)
		}
	}
	require.Len(t, dockerBuilds, 2, "one go build for the binary, one for the filter")
	for i, target := range []string{"build", "wasm"} {
		recipe := makeRecipe(t, target)
		require.Len(t, recipe, 1, "make %s", target)
		assert.Equal(t, goBuild(t, recipe[0]), goBuild(t, dockerBuilds[i]), "Dockerfile vs make %s", target)
	}
	assert.Contains(t, dockerBuilds[0], "./cmd/chime")
	assert.Contains(t, dockerBuilds[1], "./plugin")
}

func TestDockerfileImage(t *testing.T) {
	ins := parseDockerfile(t)
	var froms, envs, copies, users, health []string
	for _, in := range ins {
		switch in.op {
		case "FROM":
			froms = append(froms, in.args)
		case "ENV":
			envs = append(envs, in.args)
		case "COPY":
			copies = append(copies, in.args)
		case "USER":
			users = append(users, in.args)
		case "HEALTHCHECK":
			health = append(health, in.args)
		}
	}
	require.Len(t, froms, 2, "multi-stage: build, then the final image")

	gomod, err := os.ReadFile(filepath.Join(repoRoot(), "go.mod"))
	require.NoError(t, err)
	goVer := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindSubmatch(gomod)
	require.NotNil(t, goVer)
	assert.Equal(t, "golang:"+string(goVer[1])+" AS build", froms[0], "the build stage uses go.mod's Go")
	assert.Regexp(t, `^(scratch|gcr\.io/distroless/static[-a-z0-9]*(:[a-z0-9-]+)?)$`, froms[1], "a static final stage")
	assert.Contains(t, envs, "CGO_ENABLED=0", "a static binary")

	require.NotEmpty(t, users)
	assert.NotRegexp(t, `^(0|root)(:|$)`, users[len(users)-1], "the image runs as a non-root user")
	assert.Contains(t, copies, "--from=build /out/chime.wasm /usr/share/chime/chime.wasm",
		"chime.wasm at the path the compose file mounts into Envoy")
	assert.Contains(t, copies, "--from=build /out/chime /usr/local/bin/chime")

	require.Len(t, health, 1)
	assert.Contains(t, health[0], `CMD ["/usr/local/bin/chime", "healthcheck", "http://127.0.0.1:8787/healthz"]`)

	ignore, err := os.ReadFile(filepath.Join(repoRoot(), ".dockerignore"))
	require.NoError(t, err)
	for _, p := range []string{"bin/", "chime.wasm", ".git/"} {
		assert.Contains(t, strings.Fields(string(ignore)), p, ".dockerignore keeps build outputs and .git out of the context")
	}
}
