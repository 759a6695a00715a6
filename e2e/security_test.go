package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/hostapi"
)

// TestUpGeneratesHostToken: `chime up` without CHIME_HOST_TOKEN makes a
// random token in the data dir (0600) and hands it to the host and the
// filter: the public development token opens nothing, and a stopMessage
// continuation (prepare, resolve, a followup whose marker the host
// accepts) works with the generated one (docs/failures.md).
func TestUpGeneratesHostToken(t *testing.T) {
	d := newDemo(t)
	startChime(t, append(d.env(), "CHIME_HOST_TOKEN="),
		[]string{d.hostURL + "/healthz", d.mockURL + "/__mock/requests", d.adminURL + "/ready"},
		"up", "-c", d.config, "--host-addr", d.hostURL[len("http://"):], "--mock-addr", d.mockURL[len("http://"):],
		"--cache-dir", filepath.Join(os.TempDir(), "chime-e2e-cache"))
	d.guardRejections(t)

	path := filepath.Join(d.dataDir, host.TokenFile)
	st, err := os.Stat(path)
	require.NoError(t, err, "no token file in the data dir")
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	token := strings.TrimSpace(string(raw))
	require.NotEmpty(t, token)

	state := func(tok string) int {
		req, _ := http.NewRequest(http.MethodGet, d.hostURL+hostapi.PathState, nil)
		req.Header.Set("authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	assert.Equal(t, http.StatusUnauthorized, state(host.DevToken), "the public development token must open nothing")
	assert.Equal(t, http.StatusUnauthorized, state(hostToken), "envoy.yaml's token is replaced for both sides")
	assert.Equal(t, http.StatusOK, state(token))

	d.script(t,
		map[string]any{"text": "first part.", "finish": "stop"},
		map[string]any{"text": "second part.", "finish": "stop"},
	)
	pc := protoCases[0]
	turn, _ := clientTurn(t, d, pc, mode{name: "json"}, "sess-token", `<**stopMessage:"continue",1**>start`)
	assert.Contains(t, turn.Text, "first part.")
	assert.Contains(t, turn.Text, "second part.", "the stopMessage followup ran: the host accepted its marker")
	require.Len(t, d.mockRequests(t), 2)
}
