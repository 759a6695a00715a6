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

// The official SDKs' streaming clients against `chime up`: for a stopMessage
// continuation, a hidden clock call and a hold, each spliced stream
// accumulates without error into one assistant message whose single text
// block or message output item holds the whole reply (docs/architecture.md response
// path, SSE), never a server-tool call.
func TestSDKClientsAccumulateSplicedStreams(t *testing.T) {
	d := newDemo(t)
	d.up(t)
	ctx := context.Background()

	for _, c := range continuations {
		t.Run(c.name+"/openai-chat", func(t *testing.T) {
			session := "sdk-chat-" + c.name
			deleteMockRequests(t, d)
			prompt := c.setup(t, d, session)
			client := openai.NewClient(option.WithBaseURL(d.proxyURL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0),
				option.WithHeader("x-chime-session", session))
			stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: "m", Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(prompt)},
				StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
			var acc openai.ChatCompletionAccumulator
			for stream.Next() {
				require.True(t, acc.AddChunk(stream.Current()), "chunk rejected: %s", stream.Current().RawJSON())
			}
			require.NoError(t, stream.Err())
			require.Len(t, d.mockRequests(t), 2, "the original and one followup")
			require.Len(t, acc.Choices, 1)
			assert.Equal(t, wholeText, acc.Choices[0].Message.Content)
			assert.Empty(t, acc.Choices[0].Message.ToolCalls, "no server-tool call reaches the client")
			assert.Equal(t, "stop", acc.Choices[0].FinishReason)
		})

		t.Run(c.name+"/openai-responses", func(t *testing.T) {
			session := "sdk-responses-" + c.name
			deleteMockRequests(t, d)
			prompt := c.setup(t, d, session)
			client := openai.NewClient(option.WithBaseURL(d.proxyURL+"/v1/"), option.WithAPIKey("k"), option.WithMaxRetries(0),
				option.WithHeader("x-chime-session", session))
			stream := client.Responses.NewStreaming(ctx, responses.ResponseNewParams{Model: "m",
				Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(prompt)}})
			var final *responses.Response
			var doneTexts []string
			starts, messages := 0, 0
			for stream.Next() {
				ev := stream.Current()
				switch ev.Type {
				case "response.created":
					starts++
				case "response.output_item.added":
					if ev.Item.Type == "message" {
						messages++
					}
				case "response.function_call_arguments.delta", "response.function_call_arguments.done":
					t.Errorf("server-tool call event reached the client: %s", ev.RawJSON())
				case "response.output_text.done":
					doneTexts = append(doneTexts, ev.AsResponseOutputTextDone().Text)
				case "response.content_part.done":
					doneTexts = append(doneTexts, ev.AsResponseContentPartDone().Part.Text)
				case "response.output_item.done":
					if item := ev.AsResponseOutputItemDone().Item; item.Type == "message" {
						for _, part := range item.Content {
							doneTexts = append(doneTexts, part.Text)
						}
					}
				case "response.completed":
					r := ev.AsResponseCompleted().Response
					final = &r
				}
			}
			require.NoError(t, stream.Err())
			require.Len(t, d.mockRequests(t), 2, "the original and one followup")
			assert.Equal(t, 1, starts)
			assert.Equal(t, 1, messages, "one message output item")
			assert.Equal(t, []string{wholeText, wholeText, wholeText}, doneTexts,
				"output_text.done, content_part.done and output_item.done carry the whole text")
			require.NotNil(t, final, "response.completed")
			var parts []string
			for _, item := range final.Output {
				assert.NotEqual(t, "function_call", item.Type)
				if item.Type == "message" {
					for _, part := range item.Content {
						parts = append(parts, part.Text)
					}
				}
			}
			assert.Equal(t, []string{wholeText}, parts, "response.completed holds one message with the whole text")
		})

		t.Run(c.name+"/anthropic-messages", func(t *testing.T) {
			session := "sdk-messages-" + c.name
			deleteMockRequests(t, d)
			prompt := c.setup(t, d, session)
			client := anthropic.NewClient(anthropicoption.WithBaseURL(d.proxyURL), anthropicoption.WithAPIKey("k"),
				anthropicoption.WithMaxRetries(0), anthropicoption.WithHeader("x-chime-session", session))
			stream := client.Messages.NewStreaming(ctx, anthropic.MessageNewParams{Model: "m", MaxTokens: 256,
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt))}})
			var msg anthropic.Message
			for stream.Next() {
				require.NoError(t, msg.Accumulate(stream.Current()))
			}
			require.NoError(t, stream.Err())
			require.Len(t, d.mockRequests(t), 2, "the original and one followup")
			var texts []string
			for _, b := range msg.Content {
				assert.NotEqual(t, "tool_use", b.Type, "no server-tool call reaches the client")
				if b.Type == "text" {
					texts = append(texts, b.Text)
				}
			}
			assert.Equal(t, []string{wholeText}, texts, "one text block with the whole reply")
			assert.Equal(t, anthropic.StopReasonEndTurn, msg.StopReason)
		})
	}
}
