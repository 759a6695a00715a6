package mockllm

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/llm"
)

// ruleCase is one request and what the real provider does with it: reject
// ("" accepts) with a message containing reject.
type ruleCase struct {
	name   string
	p      llm.Protocol
	body   string
	reject string
	param  string // OpenAI error param, when it matters
}

// anth builds a Messages request; extra members go before messages.
func anth(extra, msgs string) string {
	return `{"model":"claude-test","max_tokens":1024,` + extra + `"messages":[` + msgs + `]}`
}

func chat(extra, msgs string) string {
	return `{"model":"gpt-test",` + extra + `"messages":[` + msgs + `]}`
}

func resp(extra, input string) string {
	return `{"model":"gpt-test",` + extra + `"input":[` + input + `]}`
}

const (
	uHi      = `{"role":"user","content":"hi"}`
	aText    = `{"role":"assistant","content":[{"type":"text","text":"sure"}]}`
	aUse     = `{"role":"assistant","content":[{"type":"text","text":"checking"},{"type":"tool_use","id":"toolu_1","name":"clock","input":{}}]}`
	uResult  = `{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"12:00"}]}`
	thinkOn  = `"thinking":{"type":"enabled","budget_tokens":2048},`
	thinkAda = `"thinking":{"type":"adaptive"},`

	cAsk   = `{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"clock","arguments":"{}"}},{"id":"call_2","type":"function","function":{"name":"shell","arguments":"{}"}}]}`
	cTool1 = `{"role":"tool","tool_call_id":"call_1","content":"12:00"}`
	cTool2 = `{"role":"tool","tool_call_id":"call_2","content":"ok"}`

	rUser = `{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}]}`
	rCall = `{"type":"function_call","call_id":"call_1","name":"clock","arguments":"{}"}`
	rOut  = `{"type":"function_call_output","call_id":"call_1","output":"12:00"}`
)

func strictChatTool(params string) string {
	return `"tools":[{"type":"function","function":{"name":"f","strict":true,"parameters":` + params + `}}],`
}

const (
	schemaOK       = `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"object","properties":{"c":{"type":"integer"}},"required":["c"],"additionalProperties":false}},"required":["a","b"],"additionalProperties":false}`
	schemaOptional = `{"type":"object","properties":{"a":{"type":"string"},"b":{"type":"string"}},"required":["a"],"additionalProperties":false}`
	schemaNested   = `{"type":"object","properties":{"list":{"type":"array","items":{"type":"object","properties":{"x":{"type":"string"}},"required":["x"]}}},"required":["list"],"additionalProperties":false}`
)

func ruleCases() []ruleCase {
	M, C, R := llm.Messages, llm.Chat, llm.Responses
	return []ruleCase{
		// Anthropic Messages.
		{"messages: plain turn", M, anth("", uHi), "", ""},
		{"messages: malformed JSON", M, `{"model":"claude-test",`, "error parsing the body", ""},
		{"messages: not an object", M, `[1,2]`, "not a JSON object", ""},
		{"messages: max_tokens required", M, `{"model":"claude-test","messages":[` + uHi + `]}`, "max_tokens: Field required", ""},
		{"messages: no messages", M, anth("", ""), "at least one message", ""},
		{"messages: unknown role", M, anth("", `{"role":"robot","content":"hi"}`), "messages.0.role", ""},
		{"messages: first must be user", M, anth("", aText+","+uHi), `first message must use the "user" role`, ""},
		{"messages: roles alternate", M, anth("", uHi+","+uHi), `multiple "user" roles in a row`, ""},
		{"messages: assistant twice", M, anth("", uHi+","+aText+","+aText), `multiple "assistant" roles in a row`, ""},
		{"messages: system messages do not break alternation", M,
			anth("", `{"role":"system","content":"ctx"},`+uHi+`,{"role":"system","content":"more"},`+aText+","+uHi+`,{"role":"system","content":"tail"}`), "", ""},
		{"messages: system between two users still two users", M, anth("", uHi+`,{"role":"system","content":"x"},`+uHi), "in a row", ""},
		{"messages: tool_use answered", M, anth("", uHi+","+aUse+","+uResult), "", ""},
		{"messages: tool_use answered across a system message", M, anth("", uHi+","+aUse+`,{"role":"system","content":"x"},`+uResult), "", ""},
		{"messages: tool_use unanswered", M, anth("", uHi+","+aUse+","+uHi), "`tool_use` ids were found without `tool_result` blocks immediately after: toolu_1", ""},
		{"messages: tool_use last", M, anth("", uHi+","+aUse), "without `tool_result`", ""},
		{"messages: tool_result answers nothing", M, anth("", uHi+","+aText+","+uResult), "unexpected `tool_use_id` found in `tool_result` blocks: toolu_1", ""},
		{"messages: tool_result of an older turn", M, anth("", uHi+","+aUse+","+uResult+","+aText+","+uResult), "unexpected `tool_use_id`", ""},
		{"messages: text after results", M, anth("", uHi+","+aUse+`,{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_1","content":"x"},{"type":"text","text":"and now?"}]}`), "", ""},
		{"messages: text before results", M, anth("", uHi+","+aUse+`,{"role":"user","content":[{"type":"text","text":"here"},{"type":"tool_result","tool_use_id":"toolu_1","content":"x"}]}`), "must come first", ""},
		{"messages: duplicate tool_use id", M, anth("", uHi+`,{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"a","input":{}},{"type":"tool_use","id":"t","name":"a","input":{}}]}`), "unique", ""},
		{"messages: tool_use input not an object", M, anth("", uHi+`,{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"a","input":"x"}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"t"}]}`), "valid dictionary", ""},
		{"messages: empty text block", M, anth("", `{"role":"user","content":[{"type":"text","text":""}]}`), "text content blocks must be non-empty", ""},
		{"messages: whitespace text block", M, anth("", `{"role":"user","content":[{"type":"text","text":" \n\t"}]}`), "non-whitespace text", ""},
		{"messages: empty string content", M, anth("", `{"role":"user","content":""}`), "non-empty content", ""},
		{"messages: empty system text block", M, anth(`"system":[{"type":"text","text":""}],`, uHi), "system.0: text content blocks must be non-empty", ""},
		{"messages: empty final assistant prefill", M, anth("", uHi+`,{"role":"assistant","content":""}`), "", ""},
		{"messages: thinking enabled, tool loop without thinking", M, anth(thinkOn, uHi+","+aUse+","+uResult),
			"messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `text`", ""},
		{"messages: thinking enabled, redacted_thinking first", M,
			anth(thinkOn, uHi+`,{"role":"assistant","content":[{"type":"redacted_thinking","data":"abc"},{"type":"tool_use","id":"toolu_1","name":"clock","input":{}}]},`+uResult), "", ""},
		{"messages: thinking enabled, older turn without thinking", M, anth(thinkOn, uHi+","+aUse+","+uResult+","+aText+","+uHi), "", ""},
		{"messages: thinking adaptive, foreign tool_use without thinking", M, anth(thinkAda, uHi+","+aUse+","+uResult), "", ""},
		{"messages: thinking off", M, anth("", uHi+","+aUse+","+uResult), "", ""},
		{"messages: invented thinking block", M,
			anth("", uHi+`,{"role":"assistant","content":[{"type":"thinking","thinking":"made up","signature":"c2lnbmF0dXJl"},{"type":"text","text":"hi"}]},`+uHi),
			"messages.1.content.0: Invalid `signature` in `thinking` block", ""},
		{"messages: thinking block without signature", M,
			anth("", uHi+`,{"role":"assistant","content":[{"type":"thinking","thinking":"made up"},{"type":"text","text":"hi"}]},`+uHi), "signature: Field required", ""},
		{"messages: strict tool ok", M, anth(`"tools":[{"name":"f","strict":true,"input_schema":`+schemaOK+`}],`, uHi), "", ""},
		{"messages: strict tool optional property", M, anth(`"tools":[{"name":"f","strict":true,"input_schema":`+schemaOptional+`}],`, uHi), "Missing 'b'", ""},
		{"messages: non-strict tool optional property", M, anth(`"tools":[{"name":"f","input_schema":`+schemaOptional+`}],`, uHi), "", ""},

		// OpenAI Chat.
		{"chat: plain turn", C, chat("", uHi), "", ""},
		{"chat: malformed JSON", C, `{"model":`, "could not parse the JSON body", ""},
		{"chat: model required", C, `{"messages":[` + uHi + `]}`, "model parameter", "model"},
		{"chat: messages required", C, `{"model":"gpt-test"}`, "Missing required parameter: 'messages'", "messages"},
		{"chat: empty messages", C, chat("", ""), "empty array", "messages"},
		{"chat: unknown role", C, chat("", `{"role":"robot","content":"x"}`), "Invalid value: 'robot'", "messages.[0].role"},
		{"chat: tool calls answered", C, chat("", uHi+","+cAsk+","+cTool1+","+cTool2+","+uHi), "", ""},
		{"chat: tool calls answered in any order", C, chat("", uHi+","+cAsk+","+cTool2+","+cTool1), "", ""},
		{"chat: a call unanswered before the next message", C, chat("", uHi+","+cAsk+","+cTool1+","+uHi),
			"The following tool_call_ids did not have response messages: call_2", "messages.[3]"},
		{"chat: calls unanswered at the end", C, chat("", uHi+","+cAsk), "did not have response messages: call_1, call_2", "messages"},
		{"chat: tool message without a call", C, chat("", uHi+","+cTool1), "must be a response to a preceeding message with 'tool_calls'", "messages.[1].role"},
		{"chat: tool message answers another call", C, chat("", uHi+","+cAsk+","+cTool1+","+cTool2+`,{"role":"tool","tool_call_id":"call_9","content":"x"}`), "preceeding message with 'tool_calls'", ""},
		{"chat: stream_options without stream", C, chat(`"stream":false,"stream_options":{"include_usage":true},`, uHi), "only allowed when 'stream' is enabled", "stream_options"},
		{"chat: stream_options missing stream", C, chat(`"stream_options":{"include_usage":true},`, uHi), "only allowed when 'stream' is enabled", "stream_options"},
		{"chat: stream_options null without stream", C, chat(`"stream":false,"stream_options":null,`, uHi), "", ""},
		{"chat: stream_options with stream", C, chat(`"stream":true,"stream_options":{"include_usage":true},`, uHi), "", ""},
		{"chat: strict tool ok", C, chat(strictChatTool(schemaOK), uHi), "", ""},
		{"chat: strict tool optional property", C, chat(strictChatTool(schemaOptional), uHi), "'required' is required to be supplied and to be an array including every key in properties. Missing 'b'", "tools[0].function.parameters"},
		{"chat: strict tool nested object", C, chat(strictChatTool(schemaNested), uHi), "In context=('properties', 'list', 'items'), 'additionalProperties' is required to be supplied and to be false", "tools[0].function.parameters"},
		{"chat: strict tool additionalProperties true", C, chat(strictChatTool(`{"type":"object","properties":{},"additionalProperties":true}`), uHi), "'additionalProperties'", ""},
		{"chat: non-strict tool", C, chat(`"tools":[{"type":"function","function":{"name":"f","parameters":`+schemaNested+`}}],`, uHi), "", ""},

		// OpenAI Responses.
		{"responses: string input", R, `{"model":"gpt-test","input":"hi"}`, "", ""},
		{"responses: malformed JSON", R, `{"model":"gpt-test","input":[}`, "could not parse the JSON body", ""},
		{"responses: model required", R, `{"input":"hi"}`, "Missing required parameter: 'model'", "model"},
		{"responses: input not a list", R, `{"model":"gpt-test","input":42}`, "Invalid type for 'input'", "input"},
		{"responses: call answered", R, resp("", rUser+","+rCall+","+rOut), "", ""},
		{"responses: call unanswered", R, resp("", rUser+","+rCall), "No tool output found for function call call_1", "input"},
		{"responses: output without call", R, resp("", rUser+","+rOut), "No tool call found for function call output with call_id call_1", "input"},
		{"responses: output before its call", R, resp("", rUser+","+rOut+","+rCall), "No tool call found", "input"},
		{"responses: call without call_id", R, resp("", rUser+`,{"type":"function_call","name":"clock","arguments":"{}"}`), "input[1].call_id", "input[1].call_id"},
		{"responses: reasoning blob not the mock's", R, resp("", rUser+`,{"type":"reasoning","summary":[],"encrypted_content":"gAAAAABnot-real"}`), "could not be verified", "input[1].encrypted_content"},
		{"responses: reasoning id never issued", R, resp("", rUser+`,{"type":"reasoning","id":"rs_nope","summary":[]}`), "Item with id 'rs_nope' not found", "input"},
		{"responses: unknown previous response", R, `{"model":"gpt-test","previous_response_id":"resp_nope","input":"hi"}`, "Previous response with id 'resp_nope' not found", "previous_response_id"},
		{"responses: strict tool ok", R, resp(`"tools":[{"type":"function","name":"f","strict":true,"parameters":`+schemaOK+`}],`, rUser), "", ""},
		{"responses: strict tool optional property", R, resp(`"tools":[{"type":"function","name":"f","strict":true,"parameters":`+schemaOptional+`}],`, rUser), "Missing 'b'", "tools[0].parameters"},
		{"responses: strict tool in a namespace", R,
			resp(`"tools":[{"type":"namespace","name":"ns","tools":[{"type":"function","name":"f","strict":true,"parameters":`+schemaNested+`}]}],`, rUser), "'additionalProperties'", ""},
		{"responses: non-strict tool", R, resp(`"tools":[{"type":"function","name":"f","strict":false,"parameters":`+schemaOptional+`}],`, rUser), "", ""},
	}
}

// checkRejection asserts a 400 in p's provider error shape whose message
// contains want, also named by the rejection header.
func checkRejection(t *testing.T, p llm.Protocol, rec *httptest.ResponseRecorder, want, param string) {
	t.Helper()
	raw := rec.Body.Bytes()
	if rec.Code != http.StatusBadRequest {
		t.Fatalf("status %d, want 400: %s", rec.Code, raw)
	}
	var msg string
	if p == llm.Messages {
		var e struct {
			Type  string
			Error map[string]string
		}
		if err := json.Unmarshal(raw, &e); err != nil || e.Type != "error" || e.Error["type"] != "invalid_request_error" || len(e.Error) != 2 {
			t.Fatalf("not Anthropic's error shape: %s", raw)
		}
		msg = e.Error["message"]
	} else {
		var e struct{ Error map[string]any }
		if err := json.Unmarshal(raw, &e); err != nil || e.Error["type"] != "invalid_request_error" || len(e.Error) != 4 {
			t.Fatalf("not OpenAI's error shape: %s", raw)
		}
		for _, k := range []string{"message", "param", "code"} {
			if _, ok := e.Error[k]; !ok {
				t.Fatalf("OpenAI error without %q: %s", k, raw)
			}
		}
		msg, _ = e.Error["message"].(string)
		if got, _ := e.Error["param"].(string); param != "" && got != param {
			t.Errorf("param %q, want %q", got, param)
		}
	}
	if !strings.Contains(msg, want) {
		t.Errorf("message %q does not contain %q", msg, want)
	}
	if h := rec.Header().Get(RejectionHeader); h != headerSafe(msg) {
		t.Errorf("%s header %q, want the message", RejectionHeader, h)
	}
}

func TestRequestRules(t *testing.T) {
	for _, c := range ruleCases() {
		t.Run(c.name, func(t *testing.T) {
			s := New()
			s.Script(Reply{Text: "scripted"})
			rec := serve(s, c.p, c.body)
			recs := s.Requests()
			if len(recs) != 1 || recs[0].Body != c.body || recs[0].Status != rec.Code {
				t.Fatalf("recorded %+v", recs)
			}
			if c.reject == "" {
				if rec.Code != http.StatusOK || recs[0].Rejection != "" {
					t.Fatalf("rejected a valid request: %d %s", rec.Code, rec.Body)
				}
				if turn, err := parseTurn(c.p, rec.Body.Bytes()); err != nil || turn.Text != "scripted" {
					t.Errorf("reply %v %+v", err, turn)
				}
				return
			}
			checkRejection(t, c.p, rec, c.reject, c.param)
			if !strings.Contains(recs[0].Rejection, c.reject) {
				t.Errorf("recorded rejection %q", recs[0].Rejection)
			}
			// A rejected request does not consume the scripted reply.
			if turn, _ := llm.ParseResponse(llm.Chat, serve(s, llm.Chat, chat("", uHi)).Body.Bytes()); turn == nil || turn.Text != "scripted" {
				t.Errorf("the rejected request consumed the script: %+v", turn)
			}
		})
	}
}

// clientFixture is a request captured from a real client (see
// testdata/clients, copied from the project's fixtures).
type clientFixture struct {
	name, path string
	headers    map[string]string
	body       []byte
}

func clientFixtures(t testing.TB) []clientFixture {
	files, err := filepath.Glob("testdata/clients/*.json")
	if err != nil || len(files) != 3 {
		t.Fatalf("client fixtures: %v %v", files, err)
	}
	var out []clientFixture
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		doc := gjson.ParseBytes(raw)
		fx := clientFixture{name: filepath.Base(f), path: doc.Get("path").String(), headers: map[string]string{}, body: []byte(doc.Get("body").Raw)}
		doc.Get("headers").ForEach(func(k, v gjson.Result) bool { fx.headers[k.String()] = v.String(); return true })
		out = append(out, fx)
	}
	return out
}

// TestClientRequestsAccepted: what real clients sent, and real APIs
// accepted, the strict mock accepts too.
func TestClientRequestsAccepted(t *testing.T) {
	for _, fx := range clientFixtures(t) {
		t.Run(fx.name, func(t *testing.T) {
			s := New()
			req := httptest.NewRequest(http.MethodPost, fx.path, strings.NewReader(string(fx.body)))
			for k, v := range fx.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			s.ServeHTTP(rec, req)
			if rec.Code != http.StatusOK {
				t.Fatalf("%d %s", rec.Code, rec.Body)
			}
			if !strings.Contains(rec.Body.String(), "ok") {
				t.Errorf("no default reply: %s", rec.Body)
			}
		})
	}
}

// TestClientRequestsEditedAccepted: chime's own edits keep the real
// clients' requests valid (docs/protocols.md#injected-user-text): the time tag
// appended, then followups with a text turn and with a tool round trip.
// Claude Code's trailing role:"system" message must not end up between two
// user turns.
func TestClientRequestsEditedAccepted(t *testing.T) {
	for _, fx := range clientFixtures(t) {
		t.Run(fx.name, func(t *testing.T) {
			p := llm.DetectProtocol(fx.path)
			r, err := llm.ParseRequest(p, fx.body)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.AppendUserText("<current_time>2026-01-02T03:04:05Z</current_time>"); err != nil {
				t.Fatal(err)
			}
			tagged := r.Bytes()
			s := New()
			if rej := s.Validate(p, tagged); rej != nil {
				t.Fatalf("time tag appended: %s", rej.Message)
			}
			call := &llm.Turn{Text: "running it", ToolCalls: []llm.ToolCall{{ID: "call_x1", Name: "clock", Arguments: `{}`}}}
			for _, f := range []struct {
				name    string
				turn    *llm.Turn
				results []llm.ToolResult
				text    string
			}{
				{"text turn", &llm.Turn{Text: "hello"}, nil, "go on"},
				{"empty turn", &llm.Turn{}, nil, "go on"},
				{"tool round trip", call, []llm.ToolResult{{CallID: "call_x1", Output: `{"ok":true}`}}, ""},
			} {
				out, err := llm.BuildFollowup(p, tagged, f.turn, f.results, f.text)
				if err != nil {
					t.Fatalf("%s: %v", f.name, err)
				}
				if rej := s.Validate(p, out); rej != nil {
					t.Errorf("%s followup: %s", f.name, rej.Message)
				}
			}
		})
	}
}

func FuzzValidate(f *testing.F) {
	for _, fx := range clientFixtures(f) {
		f.Add(uint8(llm.DetectProtocol(fx.path)), fx.body)
	}
	for _, c := range ruleCases() {
		f.Add(uint8(c.p), []byte(c.body))
	}
	s := New()
	f.Fuzz(func(t *testing.T, proto uint8, body []byte) {
		p := llm.Protocol(1 + proto%3)
		rej := s.Validate(p, body)
		if rej == nil {
			if !json.Valid(body) {
				t.Fatalf("accepted invalid JSON %q", body)
			}
			return
		}
		if rej.Status != http.StatusBadRequest || rej.Message == "" {
			t.Fatalf("rejection %+v", rej)
		}
		if again := s.Validate(p, body); again == nil || *again != *rej {
			t.Fatalf("not deterministic: %+v then %+v", rej, again)
		}
	})
}
