package host

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// docs/architecture.md "provider content is replayed verbatim" and §14 "a followup the
// provider rejects": the host's chain keeps Anthropic's signed thinking
// blocks across hops, and a 400 ends the chain with a visible note.

// thinkingRequest is a Messages request with thinking on, as Claude Code
// sends it (thinking:{type:adaptive}).
const thinkingRequest = `{"model":"m","max_tokens":100,"stream":true,"thinking":{"type":"adaptive"},` +
	`"messages":[{"role":"user","content":"what time is it?"}]}`

// thinkingBlock is a signed thinking block as a provider sends it.
func thinkingBlock(n int) string {
	return fmt.Sprintf(`{"type": "thinking", "thinking": "step %d <ok> & \"go\"", "signature": "sig-%d=="}`, n, n)
}

// messagesBody is a non-streaming Messages answer with the given blocks.
func messagesBody(id, stop string, blocks ...string) string {
	return fmt.Sprintf(`{"id":%q,"type":"message","role":"assistant","model":"m","content":[%s],"stop_reason":%q,`+
		`"stop_sequence":null,"usage":{"input_tokens":10,"output_tokens":5}}`, id, strings.Join(blocks, ","), stop)
}

func clockUse(id string) string {
	return `{"type":"tool_use","id":"` + id + `","name":"clock","input":` + getArgs + `}`
}

// rejectThinking is Anthropic's answer to a tool-result turn whose
// assistant message does not start with its signed thinking block.
const rejectThinking = `{"type":"error","error":{"type":"invalid_request_error","message":"messages.1.content.0.type: ` +
	"Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, a final `assistant` " +
	`message must start with a thinking block."}}`

// strictAnthropic answers followups from replies in order, like the
// provider: a tool-result turn whose assistant message does not start with
// the exact thinking block the previous answer carried gets 400. A reply
// "" answers 400 with rejectThinking anyway.
type strictAnthropic struct {
	srv *httptest.Server

	mu      sync.Mutex
	replies []string
	expect  string   // the thinking block the next followup must replay
	got     []string // the assistant's first block of each followup
}

func newStrictAnthropic(t *testing.T, first string, replies ...string) *strictAnthropic {
	s := &strictAnthropic{replies: replies, expect: first}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		msgs := gjson.GetBytes(body, "messages").Array()
		first := ""
		if len(msgs) >= 2 && msgs[len(msgs)-2].Get("role").Str == "assistant" {
			first = msgs[len(msgs)-2].Get("content.0").Raw
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.got = append(s.got, first)
		reply := ""
		if len(s.replies) > 0 {
			reply, s.replies = s.replies[0], s.replies[1:]
		}
		if first != s.expect || reply == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, rejectThinking)
			return
		}
		s.expect = gjson.Get(reply, "content.0").Raw
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, reply)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *strictAnthropic) firstBlocks() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func thinkingResolveReq(t *testing.T, s *strictAnthropic, original string) hostapi.ResolveRequest {
	t.Helper()
	turn, err := llm.ParseResponse(llm.Messages, []byte(original))
	if err != nil {
		t.Fatal(err)
	}
	return hostapi.ResolveRequest{
		RequestID: "req-think", SessionID: "sess-think", Protocol: llm.Messages.String(), Path: "/v1/messages",
		Reentry: s.srv.Listener.Addr().String(), Headers: map[string]string{"x-api-key": "sk-ant-secret"},
		Request: []byte(thinkingRequest), Turn: turn, ServerTools: []string{"clock"}, Streaming: true,
	}
}

func TestResolveReplaysThinkingAcrossHops(t *testing.T) {
	f := newFixture(t)
	original := messagesBody("msg_0", "tool_use", thinkingBlock(0), clockUse("toolu_0"))
	s := newStrictAnthropic(t, thinkingBlock(0),
		messagesBody("msg_1", "tool_use", thinkingBlock(1), `{"type":"text","text":"Checking again."}`, clockUse("toolu_1")),
		messagesBody("msg_2", "end_turn", `{"type":"text","text":"It is noon."}`),
	)
	resp := f.resolve(t, thinkingResolveReq(t, s, original))
	if resp.Reason != "done" || resp.Hops != 2 || !resp.Continued {
		t.Fatalf("resolve: %+v (the provider saw %q)", resp, s.firstBlocks())
	}
	// Each followup's assistant message starts with the block, byte for byte.
	if got := s.firstBlocks(); len(got) != 2 || got[0] != thinkingBlock(0) || got[1] != thinkingBlock(1) {
		t.Fatalf("replayed thinking blocks: %q", got)
	}
	c := resp.Continuation
	if c.Text != "Checking again.\n\nIt is noon." || c.Finish.Reason != llm.FinishStop {
		t.Fatalf("continuation: %+v", c)
	}
	// The continuation keeps the followup's thinking for the client's
	// merged response.
	if len(c.Items) == 0 || c.Items[0].Kind != llm.ItemRaw || c.Items[0].Raw != thinkingBlock(1) {
		t.Errorf("continuation items: %+v", c.Items)
	}
}

func TestResolveRejectedFollowupAddsNote(t *testing.T) {
	const note = "[chime: the continuation failed: 400 invalid_request_error: messages.1.content.0.type: " +
		"Expected `thinking` or `redacted_thinking`, but found `tool_use`. When `thinking` is enabled, " +
		"a final `assistant` message must start with a thinking block.]"
	t.Run("first followup", func(t *testing.T) {
		f := newFixture(t)
		original := messagesBody("msg_0", "tool_use", thinkingBlock(0), `{"type":"text","text":"Let me look."}`, clockUse("toolu_0"))
		s := newStrictAnthropic(t, thinkingBlock(0), "") // the provider refuses
		resp := f.resolve(t, thinkingResolveReq(t, s, original))
		if resp.Reason != "rejected" || resp.Hops != 1 || !resp.Continued {
			t.Fatalf("resolve: %+v", resp)
		}
		// Only the original came back: the continuation is the note, which
		// the filter appends to the original's text.
		if c := resp.Continuation; c.Text != note || c.Finish.Reason != llm.FinishStop || len(c.ToolCalls) != 0 {
			t.Fatalf("continuation: %+v", c)
		}
		m := scrape(t, f)
		if m[`chime_followup_failures_total{code="400",kind="tool"}`] != 1 || m[`chime_chains_total{reason="rejected"}`] != 1 {
			t.Errorf("metrics: %v", m)
		}
	})
	t.Run("second followup", func(t *testing.T) {
		f := newFixture(t)
		original := messagesBody("msg_0", "tool_use", thinkingBlock(0), clockUse("toolu_0"))
		s := newStrictAnthropic(t, thinkingBlock(0),
			messagesBody("msg_1", "tool_use", thinkingBlock(1), `{"type":"text","text":"Checking again."}`, clockUse("toolu_1")),
			"")
		resp := f.resolve(t, thinkingResolveReq(t, s, original))
		if resp.Reason != "rejected" || resp.Hops != 2 {
			t.Fatalf("resolve: %+v", resp)
		}
		// The last good turn, without its executed server call, plus the note.
		c := resp.Continuation
		if c.Text != "Checking again.\n\n"+note || c.Finish.Reason != llm.FinishStop || len(c.ToolCalls) != 0 {
			t.Fatalf("continuation: %+v", c)
		}
		if m := scrape(t, f); m[`chime_followup_failures_total{code="400",kind="tool"}`] != 1 {
			t.Errorf("metrics: %v", m)
		}
	})
}
