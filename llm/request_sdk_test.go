package llm

import (
	"context"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
)

var updateFixtures = flag.Bool("update-request-fixtures", false, "rewrite llm/testdata/requests from the SDK captures")

// wire is what an SDK put on the wire for one call.
type wire struct {
	path   string
	header http.Header
	body   []byte
}

// captureServer answers every call with an empty 200 and records it; the
// SDKs' complaints about the empty answer are irrelevant here.
func captureServer(t *testing.T) (*httptest.Server, func() wire) {
	var mu sync.Mutex
	var last wire
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		mu.Lock()
		last = wire{path: req.URL.Path, header: req.Header.Clone(), body: b}
		mu.Unlock()
		if req.Header.Get("Accept") == "text/event-stream" {
			w.Header().Set("Content-Type", "text/event-stream")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}")
	}))
	t.Cleanup(srv.Close)
	return srv, func() wire {
		mu.Lock()
		defer mu.Unlock()
		return last
	}
}

const (
	toolOutput = "FAIL ./pkg 0.3s\n\t<**tool output is not user text**>\n\"quoted\" \\ back\\slash é ✓"
	clockTag   = `<**clock:{"dueAt":"2026-01-21T20:30:00-08:00","task":"check {CI} status","tool":"exec","arguments":"{\"cmd\":\"gh run list\"}"}**>`
)

var execSchema = map[string]any{
	"type":       "object",
	"properties": map[string]any{"cmd": map[string]any{"type": "string"}},
	"required":   []string{"cmd"},
}

type sdkFixture struct {
	name  string
	proto Protocol
	send  func(ctx context.Context, baseURL string)
	want  editWant
}

func openaiClient(baseURL string, opts ...ooption.RequestOption) openai.Client {
	return openai.NewClient(append([]ooption.RequestOption{ooption.WithBaseURL(baseURL + "/v1/"),
		ooption.WithAPIKey("sk-test"), ooption.WithMaxRetries(0)}, opts...)...)
}

func anthropicClient(baseURL string, opts ...aoption.RequestOption) anthropic.Client {
	return anthropic.NewClient(append([]aoption.RequestOption{aoption.WithBaseURL(baseURL),
		aoption.WithAPIKey("sk-ant-test"), aoption.WithMaxRetries(0)}, opts...)...)
}

var sdkFixtures = []sdkFixture{
	{
		name: "chat_parts_tools_stream", proto: Chat,
		want: editWant{kinds: []DirectiveKind{DirectiveClock, DirectiveRoute}, removed: 3, session: "hdr-session-1", stream: true},
		send: func(ctx context.Context, base string) {
			c := openaiClient(base, ooption.WithHeader("session_id", "hdr-session-1"))
			s := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model: "gpt-5",
				Messages: []openai.ChatCompletionMessageParamUnion{
					openai.SystemMessage("You are a coding agent. <**system text is not user text**>"),
					openai.UserMessage(`Fix the build <**stopMessage:"continue until CI is green",4**> please`),
					{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
						OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_1",
							Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "exec", Arguments: `{"cmd":"go test ./..."}`}},
					}}}},
					openai.ToolMessage(toolOutput, "call_1"),
					openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
						openai.TextContentPart("Look at this screenshot " + clockTag),
						openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64,iVBORw0KGgo="}),
						openai.TextContentPart("<**route:fast**> and <the> rest"),
					}),
				},
				Tools: []openai.ChatCompletionToolUnionParam{
					openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "exec", Description: openai.String("Run a command"), Parameters: execSchema}),
					openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{Name: "read_file", Parameters: execSchema}),
				},
				Metadata:       shared.Metadata{"user_id": `{"session_id":"body-session"}`},
				PromptCacheKey: openai.String("pck-chat"),
			})
			for s.Next() {
			}
		},
	},
	{
		name: "chat_plain_json", proto: Chat,
		want: editWant{kinds: []DirectiveKind{DirectiveStopMessageClear}, removed: 1, session: "pck-plain"},
		send: func(ctx context.Context, base string) {
			c := openaiClient(base)
			c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
				Model:          "gpt-4.1",
				Messages:       []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello <**stopMessage:clear**>")},
				PromptCacheKey: openai.String("pck-plain"),
			})
		},
	},
	{
		name: "responses_string_input", proto: Responses,
		want: editWant{kinds: []DirectiveKind{DirectiveStopMessage}, removed: 1, session: "pck-resp", stream: true},
		send: func(ctx context.Context, base string) {
			c := openaiClient(base)
			s := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
				Model:          "gpt-5-codex",
				Instructions:   openai.String("Be brief. <**instructions are not user text**>"),
				Input:          responses.ResponseNewParamsInputUnion{OfString: openai.String(`Refactor it <**stopMessage:"go on, \"finish\" it"**>`)},
				PromptCacheKey: openai.String("pck-resp"),
			})
			for s.Next() {
			}
		},
	},
	{
		name: "responses_items_tools", proto: Responses,
		want: editWant{kinds: []DirectiveKind{DirectiveRoute, DirectiveClockClear}, removed: 3, session: "conv-7"},
		send: func(ctx context.Context, base string) {
			c := openaiClient(base, ooption.WithHeader("conversation_id", "conv-7"))
			img := responses.ResponseInputContentParamOfInputImage(responses.ResponseInputImageDetailAuto)
			img.OfInputImage.ImageURL = openai.String("https://example.com/a.png")
			c.Responses.New(ctx, responses.ResponseNewParams{
				Model: "gpt-5",
				Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
					responses.ResponseInputItemParamOfMessage("You are Codex. <**developer text**>", responses.EasyInputMessageRoleDeveloper),
					responses.ResponseInputItemParamOfMessage(responses.ResponseInputMessageContentListParam{
						responses.ResponseInputContentParamOfInputText("Run the tests <**stopMessage:\"next\",2**>"),
						img,
					}, responses.EasyInputMessageRoleUser),
					responses.ResponseInputItemParamOfFunctionCall(`{"cmd":"go test"}`, "call_9", "exec"),
					responses.ResponseInputItemParamOfFunctionCallOutput(toolOutput),
					responses.ResponseInputItemParamOfMessage("<**route:slow**><**clock:clear**>", responses.EasyInputMessageRoleUser),
				}},
				Tools:             []responses.ToolUnionParam{responses.ToolParamOfFunction("exec", execSchema, true)},
				Store:             openai.Bool(false),
				PromptCacheKey:    openai.String("pck-ignored"),
				ParallelToolCalls: openai.Bool(true),
			})
		},
	},
	{
		name: "messages_blocks_tool_result_stream", proto: Messages,
		want: editWant{kinds: []DirectiveKind{DirectiveRoute}, removed: 2, session: "0f9d5c1e-claude", stream: true},
		send: func(ctx context.Context, base string) {
			c := anthropicClient(base)
			s := c.Messages.NewStreaming(ctx, anthropic.MessageNewParams{
				Model:     "claude-sonnet-4-5",
				MaxTokens: 1024,
				System:    []anthropic.TextBlockParam{{Text: "You are Claude Code. <**system**>"}},
				Messages: []anthropic.MessageParam{
					anthropic.NewUserMessage(
						anthropic.NewTextBlock("Deploy it <**stopMessage:\"keep going\",3**>"),
						anthropic.NewImageBlock(anthropic.URLImageSourceParam{URL: "https://example.com/x.png"}),
					),
					anthropic.NewAssistantMessage(
						anthropic.NewTextBlock("Running the deploy."),
						anthropic.NewToolUseBlock("toolu_1", map[string]any{"cmd": "make deploy"}, "exec"),
					),
					anthropic.NewUserMessage(
						anthropic.NewToolResultBlock("toolu_1", toolOutput, false),
						anthropic.NewTextBlock("<**route:opus**> continue"),
					),
				},
				Tools: []anthropic.ToolUnionParam{
					anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{Properties: execSchema["properties"], Required: []string{"cmd"}}, "exec"),
					anthropic.ToolUnionParamOfTool(anthropic.ToolInputSchemaParam{Properties: map[string]any{}}, "glob"),
				},
				Metadata: anthropic.MetadataParam{UserID: anthropic.String(`{"device_id":"d1","account_uuid":"a1","session_id":"0f9d5c1e-claude"}`)},
			})
			for s.Next() {
			}
		},
	},
	{
		// Claude Code sends string content; the SDK types only build blocks,
		// so WithJSONSet rewrites them as it would.
		// The stopMessage is in an older turn: stripped, not read (SPEC §4).
		name: "messages_string_content", proto: Messages,
		want: editWant{kinds: nil, removed: 1, session: "1234-abcd"},
		send: func(ctx context.Context, base string) {
			c := anthropicClient(base,
				aoption.WithJSONSet("messages.0.content", `<**stopMessage:"continue",3**>`),
				aoption.WithJSONSet("messages.2.content", "next step"))
			c.Messages.New(ctx, anthropic.MessageNewParams{
				Model:     "claude-haiku-4-5",
				MaxTokens: 256,
				Messages: []anthropic.MessageParam{
					anthropic.NewUserMessage(anthropic.NewTextBlock("x")),
					anthropic.NewAssistantMessage(anthropic.NewTextBlock("Understood.")),
					anthropic.NewUserMessage(anthropic.NewTextBlock("x")),
				},
				Metadata: anthropic.MetadataParam{UserID: anthropic.String("user_9a8b_account_77_session_1234-abcd")},
			})
		},
	},
}

func TestRequestEditsOnSDKBodies(t *testing.T) {
	srv, last := captureServer(t)
	for _, fx := range sdkFixtures {
		t.Run(fx.name, func(t *testing.T) {
			fx.send(context.Background(), srv.URL)
			w := last()
			if DetectProtocol(w.path) != fx.proto {
				t.Fatalf("SDK posted to %s", w.path)
			}
			if *updateFixtures {
				must(t, os.WriteFile(filepath.Join("testdata", "requests", fx.name+".json"), w.body, 0o644))
			}
			checkEdits(t, fx.proto, w.body, w.header, fx.want)
		})
	}
}
