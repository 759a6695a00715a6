package e2e

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// answerFraming posts one non-streaming chat request through the proxy
// and returns the answer's framing as the client saw it.
func answerFraming(t *testing.T, d *demo) (contentLength int64, transferEncoding []string, body []byte) {
	t.Helper()
	req, err := http.NewRequest("POST", d.proxyURL+"/v1/chat/completions",
		strings.NewReader(`{"model":"m","stream":false,"messages":[{"role":"user","content":"hi"}]}`))
	require.NoError(t, err)
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-chime-session", "framing")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	return resp.ContentLength, resp.TransferEncoding, body
}

// TestJSONAnswerFraming: the filter buffers a JSON answer to its end, and
// with allowOnHeadersStopIteration (the product envoy.yaml) its headers
// wait for it, so the client gets it with a content-length; without the
// option the headers leave first and the body is chunked.
func TestJSONAnswerFraming(t *testing.T) {
	d := newDemoWith(t, `"allowOnHeadersStopIteration":true`)
	d.up(t)
	n, te, body := answerFraming(t, d)
	assert.Equal(t, int64(len(body)), n, "content-length")
	assert.Empty(t, te, "transfer-encoding")

	d = newDemo(t)
	d.up(t)
	n, te, _ = answerFraming(t, d)
	assert.Equal(t, int64(-1), n, "content-length without the option")
	assert.Equal(t, []string{"chunked"}, te)
}
