package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chimehq/chime/llm"
)

// TestCapturedRequestsAsSent: the requests real clients sent (testdata/
// clients) go through `chime up` exactly as captured, headers and body, to
// the strict mock provider (docs/mock-provider.md), which accepts them as the real API
// did. Claude Code's trailing role:"system" message stays where it is and
// the time tag joins the final user message before it (docs/protocols.md injected
// user text); Codex gets a new user input item. The captures ask for SSE;
// the same bodies with only "stream" set to false check the JSON path.
func TestCapturedRequestsAsSent(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	for _, file := range []string{
		"claude-code-2.1.197-messages-turn1.json",
		"claude-code-2.1.197-messages-tool-roundtrip.json",
		"codex-cli-0.169-responses-turn1.json",
	} {
		raw, err := os.ReadFile(filepath.Join("testdata", "clients", file))
		require.NoError(t, err)
		capture := gjson.ParseBytes(raw)
		path, sent := capture.Get("path").String(), capture.Get("body").Raw
		require.True(t, capture.Get("body.stream").Bool(), "%s: the capture streams", file)
		hdr := map[string]string{}
		capture.Get("headers").ForEach(func(k, v gjson.Result) bool {
			switch strings.ToLower(k.String()) {
			case "accept-encoding", "connection", "content-length": // the transport's own
			default:
				hdr[k.String()] = v.String()
			}
			return true
		})
		p := llm.DetectProtocol(path)
		listKey := "messages"
		if p == llm.Responses {
			listKey = "input"
		}
		for _, m := range []mode{{"sse as captured", true}, {"json", false}} {
			t.Run(strings.TrimSuffix(file, ".json")+"/"+m.name, func(t *testing.T) {
				body := sent
				if !m.stream {
					body, err = sjson.Set(sent, "stream", false)
					require.NoError(t, err)
				}
				deleteMockRequests(t, d)
				code, out := postJSON(t, d.proxyURL+path, hdr, body)
				require.Equal(t, http.StatusOK, code, string(out))
				turn := parseClient(t, protoCase{name: file, path: path}, m, out)
				assert.Equal(t, "ok", turn.Text, "the mock's default answer")
				assert.Equal(t, llm.FinishStop, turn.Finish.Reason)

				reqs := d.mockRequests(t)
				require.Len(t, reqs, 1, "one provider request, no followup")
				got := reqs[0]
				assert.Equal(t, http.StatusOK, got.Status, "the strict mock accepted it: %s", got.Rejection)
				assert.Empty(t, got.Rejection)
				noTags(t, got.Body)
				require.Equal(t, 1, strings.Count(got.Body, "[Time/Date]:"), "one time tag")

				// The conversation keeps its shape: every message as sent,
				// the tag appended to the final user message (Messages) or
				// as a new final user item (Responses).
				before := gjson.Get(body, listKey).Array()
				after := gjson.Get(got.Body, listKey).Array()
				lastUser := -1
				for i, msg := range before {
					if msg.Get("role").String() == "user" {
						lastUser = i
					}
				}
				require.GreaterOrEqual(t, lastUser, 0)
				var tagged gjson.Result
				if p == llm.Responses {
					require.Len(t, after, len(before)+1, "one item added")
					tagged = after[len(before)]
					assert.Equal(t, "user", tagged.Get("role").String(), tagged.Raw)
					parts := tagged.Get("content").Array()
					require.Len(t, parts, 1, tagged.Raw)
					assert.Regexp(t, timeTagRE, parts[0].Get("text").String())
				} else {
					require.Len(t, after, len(before), "no message added: %s", got.Body)
					tagged = after[lastUser]
					sentBlocks := before[lastUser].Get("content").Array()
					blocks := tagged.Get("content").Array()
					require.Len(t, blocks, len(sentBlocks)+1, "one block added to the final user message: %s", tagged.Raw)
					for j := range sentBlocks {
						assert.Equal(t, sentBlocks[j].Raw, blocks[j].Raw, "block %d kept", j)
					}
					last := blocks[len(blocks)-1]
					assert.Equal(t, "text", last.Get("type").String())
					assert.Regexp(t, timeTagRE, last.Get("text").String())
				}
				for i, msg := range before {
					if p == llm.Messages && i == lastUser {
						continue
					}
					assert.Equal(t, msg.Raw, after[i].Raw, "%s.%d kept byte for byte", listKey, i)
				}
				assert.Contains(t, tagged.Raw, "[Time/Date]:", "the tag is in the final user message")
			})
		}
	}
}
