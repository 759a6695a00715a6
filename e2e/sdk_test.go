package e2e

import (
	"context"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	anthropicoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The official SDKs' streaming clients against `chime up`: each spliced
// stream (a hidden clock call, then the continuation) accumulates without
// error into the merged turn.

const (
	sdkFirst  = "Let me check the time."
	sdkSecond = "It is time to ship."
	// llm.Merge joins the two turns' text with a blank line.
	sdkMerged = sdkFirst + "\n\n" + sdkSecond
)

func scriptHiddenClock(t *testing.T, d *demo) {
	d.script(t,
		map[string]any{"text": sdkFirst, "finish": "tool_calls", "toolCalls": []any{clockCall(map[string]any{"action": "get", "items": []any{}, "taskId": ""})}},
		map[string]any{"text": sdkSecond, "finish": "stop"},
	)
}

func TestSDKClientsAccumulateSplicedStreams(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	ctx := context.Background()

	t.Run("openai-chat", func(t *testing.T) {
		scriptHiddenClock(t, d)
		client := openai.NewClient(option.WithBaseURL(d.proxyURL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0),
			option.WithHeader("x-chime-session", "sdk-chat"))
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("what time is it?")}})
		var acc openai.ChatCompletionAccumulator
		for stream.Next() {
			require.True(t, acc.AddChunk(stream.Current()), "chunk rejected: %s", stream.Current().RawJSON())
		}
		require.NoError(t, stream.Err())
		require.Len(t, acc.Choices, 1)
		assert.Equal(t, sdkMerged, acc.Choices[0].Message.Content)
		assert.Empty(t, acc.Choices[0].Message.ToolCalls, "no server-tool call reaches the client")
		assert.Equal(t, "stop", acc.Choices[0].FinishReason)
	})

	t.Run("openai-responses", func(t *testing.T) {
		scriptHiddenClock(t, d)
		client := openai.NewClient(option.WithBaseURL(d.proxyURL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0),
			option.WithHeader("x-chime-session", "sdk-responses"))
		stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "m",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("what time is it?")}})
		var final *responses.Response
		starts := 0
		for stream.Next() {
			ev := stream.Current()
			switch ev.Type {
			case "response.created":
				starts++
			case "response.function_call_arguments.delta", "response.function_call_arguments.done":
				t.Errorf("server-tool call event reached the client: %s", ev.RawJSON())
			case "response.completed":
				r := ev.AsResponseCompleted().Response
				final = &r
			}
		}
		require.NoError(t, stream.Err())
		assert.Equal(t, 1, starts)
		require.NotNil(t, final, "response.completed")
		assert.Equal(t, sdkMerged, final.OutputText())
		for _, item := range final.Output {
			assert.NotEqual(t, "function_call", item.Type)
		}
	})

	t.Run("anthropic-messages", func(t *testing.T) {
		scriptHiddenClock(t, d)
		client := anthropic.NewClient(anthropicoption.WithBaseURL(d.proxyURL), anthropicoption.WithAPIKey("k"),
			anthropicoption.WithMaxRetries(0), anthropicoption.WithHeader("x-chime-session", "sdk-messages"))
		stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 256,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("what time is it?"))}})
		var msg anthropic.Message
		for stream.Next() {
			require.NoError(t, msg.Accumulate(stream.Current()))
		}
		require.NoError(t, stream.Err())
		var text string
		for _, b := range msg.Content {
			assert.NotEqual(t, "tool_use", b.Type, "no server-tool call reaches the client")
			if b.Type == "text" {
				text += b.Text
			}
		}
		assert.Equal(t, sdkMerged, text)
		assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
	})
}
