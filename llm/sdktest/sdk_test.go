package sdktest

import (
	"context"
	"flag"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/anthropics/anthropic-sdk-go"
	aoption "github.com/anthropics/anthropic-sdk-go/option"
	"github.com/openai/openai-go/v3"
	ooption "github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"

	"github.com/chimehq/chime/llm"
)

var updateFixtures = flag.Bool("update-request-fixtures", false, "rewrite llm/testdata/requests from the SDK captures")

// fixtureDir is package llm's, whose tests run the request edits on it.
var fixtureDir = filepath.Join("..", "testdata", "requests")

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
	proto llm.Protocol
	// header is the session headers (llm.SessionHeaders) the call sends;
	// package llm's sdkBodies gives the same to SessionID.
	header map[string]string
	send   func(ctx context.Context, baseURL string)
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
		name: "chat_parts_tools_stream", proto: llm.Chat, header: map[string]string{"session_id": "hdr-session-1"},
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
		name: "chat_plain_json", proto: llm.Chat,
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
		name: "responses_string_input", proto: llm.Responses,
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
		name: "responses_items_tools", proto: llm.Responses, header: map[string]string{"conversation_id": "conv-7"},
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
		name: "messages_blocks_tool_result_stream", proto: llm.Messages,
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
		name: "messages_string_content", proto: llm.Messages,
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

// TestSDKRequestFixtures checks that what each SDK call puts on the wire
// is the fixture package llm's TestRequestEditsOnSDKBodies edits: the
// protocol its path selects, its session headers and its body, byte for
// byte.
func TestSDKRequestFixtures(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(fixtureDir, "*.json"))
	var names, want []string
	for _, f := range files {
		names = append(names, strings.TrimSuffix(filepath.Base(f), ".json"))
	}
	for _, fx := range sdkFixtures {
		want = append(want, fx.name)
	}
	slices.Sort(want)
	if !*updateFixtures && !slices.Equal(names, want) {
		t.Errorf("%s holds %v, the SDK calls make %v", fixtureDir, names, want)
	}
	srv, last := captureServer(t)
	for _, fx := range sdkFixtures {
		t.Run(fx.name, func(t *testing.T) {
			fx.send(context.Background(), srv.URL)
			w := last()
			if llm.DetectProtocol(w.path) != fx.proto {
				t.Fatalf("SDK posted to %s", w.path)
			}
			sent := map[string]string{}
			for _, h := range llm.SessionHeaders() {
				if v := w.header.Get(h); v != "" {
					sent[h] = v
				}
			}
			if !maps.Equal(sent, fx.header) {
				t.Errorf("session headers sent %v, want %v", sent, fx.header)
			}
			path := filepath.Join(fixtureDir, fx.name+".json")
			if *updateFixtures {
				if err := os.WriteFile(path, w.body, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(w.body) {
				t.Errorf("the SDK no longer sends %s (rerun with -update-request-fixtures and review the diff):\nsent %s\nfile %s", path, w.body, got)
			}
		})
	}
}
