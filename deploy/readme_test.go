package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// readmeSection returns the README text from heading to the next heading
// of the same level.
func readmeSection(t *testing.T, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "README.md"))
	require.NoError(t, err)
	s := string(raw)
	i := strings.Index(s, "\n"+heading+"\n")
	require.True(t, i >= 0, "README has no %q", heading)
	s = s[i+len(heading)+2:]
	if j := strings.Index(s, "\n## "); j >= 0 {
		s = s[:j]
	}
	return s
}

// codeBlocks returns the fenced blocks of a language in text.
func codeBlocks(text, lang string) []string {
	re := regexp.MustCompile("(?s)```" + lang + "\n(.*?)```")
	var out []string
	for _, m := range re.FindAllStringSubmatch(text, -1) {
		out = append(out, m[1])
	}
	return out
}

// demoCurl is the README's demo request: a curl to the proxy listener.
type demoCurl struct {
	path    string
	headers map[string]string
	body    string
}

func parseDemoCurl(t *testing.T, section string) demoCurl {
	t.Helper()
	for _, block := range codeBlocks(section, "sh") {
		cmd := strings.ReplaceAll(block, "\\\n", " ")
		for _, line := range strings.Split(cmd, "\n") {
			rest, ok := strings.CutPrefix(line, "curl -s localhost:10000")
			if !ok {
				continue
			}
			d := demoCurl{path: strings.Fields(rest)[0], headers: map[string]string{}}
			for _, m := range regexp.MustCompile(`-H '([^']*)'`).FindAllStringSubmatch(rest, -1) {
				k, v, _ := strings.Cut(m[1], ":")
				d.headers[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
			}
			if m := regexp.MustCompile(`-d '([^']*)'`).FindStringSubmatch(rest); m != nil {
				d.body = m[1]
			}
			return d
		}
	}
	t.Fatal("no curl to localhost:10000 in the section")
	return demoCurl{}
}

// TestReadmeDemoIsTheComposeDemo: `make run` and docker compose show the
// same request, with a JSON content type (TestComposeEnvoyConfigRuns sends
// it).
func TestReadmeDemoIsTheComposeDemo(t *testing.T) {
	run := parseDemoCurl(t, readmeSection(t, "## Quick start (a fresh machine with Go 1.26)"))
	compose := parseDemoCurl(t, readmeSection(t, "## docker compose"))
	assert.Equal(t, run, compose)
	assert.Equal(t, "application/json", compose.headers["content-type"])
	assert.Contains(t, compose.body, "<**stopMessage:")
	assert.Contains(t, readmeSection(t, "## docker compose"), "docker compose -f deploy/compose/docker-compose.yaml up")
}

// TestReadmeEnvoySnippet: the filter and cluster the README says to paste
// are the product envoy.yaml's.
func TestReadmeEnvoySnippet(t *testing.T) {
	blocks := codeBlocks(readmeSection(t, "## Running the filter in your own Envoy"), "yaml")
	require.Len(t, blocks, 1)
	var snippet map[string]any
	require.NoError(t, yaml.Unmarshal([]byte(blocks[0]), &snippet))
	product := readYAML(t, filepath.Join(repoRoot(), "envoy.yaml"))

	hcm := []any{"static_resources", "listeners", 0, "filter_chains", 0, "filters", 0, "typed_config"}
	want := at(t, product, append(hcm, "http_filters")...).([]any)
	got := at(t, snippet, "http_filters").([]any)
	require.Len(t, got, len(want))
	local := []any{0, "typed_config", "config", "vm_config", "code", "local"}
	obj(t, got, local...)["filename"] = "chime.wasm" // the only difference: a path of your own
	assert.Equal(t, want, got, "README filter snippet vs envoy.yaml")

	gotCluster := obj(t, snippet, "clusters", 0)
	wantCluster := clusterByName(t, product, "chime_host")
	delete(gotCluster, "type") // STRICT_DNS in the README: the host may be a name
	delete(wantCluster, "type")
	assert.Equal(t, wantCluster, gotCluster, "README chime_host cluster vs envoy.yaml")
}
