package e2e

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
)

const chatBody = `{"model":"m","messages":[{"role":"user","content":"hello"}]}`

// TestJSONThroughFilter: chime.wasm buffers the LLM request body, pauses,
// calls the host over proxy_http_call, resumes, and the JSON response comes
// back unchanged.
func TestJSONThroughFilter(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		const reply = `{"id":"x","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}`
		upstream := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("content-type", "application/json")
			_, _ = io.WriteString(w, reply)
		})
		host := newRecorder(t, nil)
		st := startStack(t, b, stackConfig{upstreamPort: upstream.port(), hostPort: host.port(),
			pluginConfig: `{"hostCluster":"chime_host","token":"e2e-token"}`})

		resp, err := http.Post(st.listenURL+"/v1/chat/completions", "application/json", strings.NewReader(chatBody))
		require.NoError(t, err)
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, string(got))
		assert.JSONEq(t, reply, string(got))

		ups := upstream.requests()
		require.Len(t, ups, 1)
		assert.Equal(t, "/v1/chat/completions", ups[0].Path)
		got0 := gjson.GetBytes(ups[0].Body, "messages.0").Raw
		assert.JSONEq(t, `{"role":"user","content":"hello"}`, got0, "the upstream must receive the whole original body")
		assert.Equal(t, int64(2), gjson.GetBytes(ups[0].Body, "messages.#").Int(), "plus exactly one appended time tag")
		assert.True(t, strings.HasPrefix(gjson.GetBytes(ups[0].Body, "messages.1.content").String(), "[Time/Date]: "))

		// The first request also starts the VM's generation poll (GET
		// /v1/filter/state, docs/architecture.md#skipping-prepare).
		var calls []recorded
		for _, c := range host.requests() {
			if !strings.HasPrefix(c.Path, "/v1/filter/state") {
				calls = append(calls, c)
			}
		}
		require.Len(t, calls, 1, "the filter must prepare once per LLM request")
		assert.Equal(t, "POST", calls[0].Method)
		assert.Equal(t, "/v1/filter/prepare", calls[0].Path)
		assert.Equal(t, "Bearer e2e-token", calls[0].Header.Get("Authorization"))
		assert.Contains(t, string(calls[0].Body), `"chat"`)
	})
}

// TestUnknownPathPassesThrough: paths that are not an LLM protocol are not
// touched and cause no host call (docs/failures.md: unknown path → passthrough).
func TestUnknownPathPassesThrough(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		upstream := newRecorder(t, func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "pong") })
		host := newRecorder(t, nil)
		st := startStack(t, b, stackConfig{upstreamPort: upstream.port(), hostPort: host.port()})

		resp, err := http.Get(st.listenURL + "/v1/models?x=1")
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, "pong", string(body))
		require.Len(t, upstream.requests(), 1)
		assert.Equal(t, "/v1/models?x=1", upstream.requests()[0].Path)
		assert.Empty(t, host.requests())
	})
}

// TestHostDownFailsOpen: with nothing listening on the host cluster, the
// filter's http_call fails (num_headers=0) and the request still succeeds.
func TestHostDownFailsOpen(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		upstream := newRecorder(t, nil)
		st := startStack(t, b, stackConfig{upstreamPort: upstream.port(), hostPort: freePort(t)})

		resp, err := http.Post(st.listenURL+"/v1/messages?beta=true", "application/json",
			strings.NewReader(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		require.Len(t, upstream.requests(), 1)
		body := upstream.requests()[0].Body
		assert.Equal(t, "hi", gjson.GetBytes(body, "messages.0.content.0.text").String(), "%s", body)
		assert.True(t, strings.HasPrefix(gjson.GetBytes(body, "messages.0.content.1.text").String(), "[Time/Date]: "),
			"fail open still tags the time: %s", body)
	})
}

// TestSSEStreamsLive proves the first SSE event reaches the client while the
// upstream is still inside its handler: the upstream does not send the rest
// until the test has seen the first event, so a buffering proxy deadlocks
// and fails the test on its deadline.
func TestSSEStreamsLive(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		firstSeen := make(chan struct{})
		upstream := newRecorder(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("content-type", "text/event-stream")
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"he\"}}]}\n\n")
			w.(http.Flusher).Flush()
			select {
			case <-firstSeen:
			case <-time.After(10 * time.Second):
				return // the client never saw the first event: the test fails below
			}
			_, _ = io.WriteString(w, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"llo\"},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n")
		})
		st := startStack(t, b, stackConfig{upstreamPort: upstream.port(), hostPort: newRecorder(t, nil).port()})

		req, _ := http.NewRequest("POST", st.listenURL+"/v1/chat/completions",
			strings.NewReader(`{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)

		lines := make(chan string)
		go func() {
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
			close(lines)
		}()
		select {
		case line := <-lines:
			require.Contains(t, line, `"he"`)
			close(firstSeen)
		case <-time.After(8 * time.Second):
			t.Fatal("first SSE event did not reach the client before the upstream finished")
		}
		var rest []string
		for line := range lines {
			if line != "" {
				rest = append(rest, line)
			}
		}
		assert.Equal(t, []string{`data: {"choices":[{"index":0,"delta":{"content":"llo"},"finish_reason":"stop"}]}`, "data: [DONE]"}, rest)
	})
}

// TestOversizedBodyGets413: a request body beyond the listener's buffer
// limit, buffered by the filter, is answered 413 as Envoy does (docs/failures.md),
// and nothing reaches the upstream.
func TestOversizedBodyGets413(t *testing.T) {
	forEachBackend(t, func(t *testing.T, b backend) {
		upstream := newRecorder(t, nil)
		st := startStack(t, b, stackConfig{upstreamPort: upstream.port(), hostPort: newRecorder(t, nil).port(), bufferLimit: 64 << 10})

		big := `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 256<<10) + `"}]}`
		resp, err := http.Post(st.listenURL+"/v1/chat/completions", "application/json", bytes.NewReader([]byte(big)))
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
		for _, r := range upstream.requests() {
			assert.Less(t, len(r.Body), len(big), "the whole oversized body must never reach the upstream")
		}
	})
}
