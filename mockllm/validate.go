package mockllm

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/llm"
)

// Rejection is the mock's answer to a request the real provider would
// refuse (docs/mock-provider.md "Mock provider"): an HTTP status and the provider's error
// message; Param and Code fill the OpenAI error fields ("" is null).
type Rejection struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Code    string `json:"code,omitempty"`
}

func (r *Rejection) Error() string { return r.Message }

func rejectf(format string, args ...any) *Rejection {
	return &Rejection{Status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...)}
}

// at sets the OpenAI param and code of r.
func (r *Rejection) at(param, code string) *Rejection {
	r.Param, r.Code = param, code
	return r
}

// Validate checks body against the documented request rules of protocol p's
// provider (docs/configuration.md) and returns the rejection the real API would answer,
// or nil. It uses the server's memory of what it issued (tool_use ids that
// came with a thinking block, function_call items that came with a
// reasoning item, responses and their calls) and its signing key.
func (s *Server) Validate(p llm.Protocol, body []byte) *Rejection {
	if !gjson.ValidBytes(body) {
		return malformed(p, "the body is not valid JSON")
	}
	root := gjson.ParseBytes(body)
	if !root.IsObject() {
		return malformed(p, "the body is not a JSON object")
	}
	switch p {
	case llm.Chat:
		return s.validateChat(root)
	case llm.Responses:
		return s.validateResponses(root)
	case llm.Messages:
		return s.validateMessages(root)
	}
	return nil
}

func malformed(p llm.Protocol, why string) *Rejection {
	if p == llm.Messages {
		return rejectf("There was an error parsing the body of your request: %s", why)
	}
	return rejectf("We could not parse the JSON body of your request: %s. The OpenAI API expects a JSON payload.", why)
}

// --- Anthropic Messages ---------------------------------------------------

// msgInfo is what the sequence rules need of one non-system message.
type msgInfo struct {
	index       int // position in messages[]
	role        string
	toolUses    []string
	toolResults []string
	resultIdx   []int  // content index of each tool_result
	firstType   string // type of content[0] ("text" for string content)
}

func (s *Server) validateMessages(root gjson.Result) *Rejection {
	if m := root.Get("model"); m.Type != gjson.String || m.Str == "" {
		return rejectf("model: Field required")
	}
	mt := root.Get("max_tokens")
	if !mt.Exists() {
		return rejectf("max_tokens: Field required")
	}
	if mt.Type != gjson.Number || mt.Float() != float64(mt.Int()) || mt.Int() < 1 {
		return rejectf("max_tokens: Input should be a valid integer greater than or equal to 1")
	}
	if r := checkSystemParam(root.Get("system")); r != nil {
		return r
	}
	if r := checkTools(llm.Messages, root.Get("tools")); r != nil {
		return r
	}
	msgs := root.Get("messages")
	if !msgs.Exists() {
		return rejectf("messages: Field required")
	}
	if !msgs.IsArray() {
		return rejectf("messages: Input should be a valid list")
	}
	list := msgs.Array()
	if len(list) == 0 {
		return rejectf("messages: at least one message is required")
	}
	var seq []msgInfo
	for i, m := range list {
		info, r := checkMessage(i, m, i == len(list)-1)
		if r != nil {
			return r
		}
		if info.role != "system" {
			seq = append(seq, info)
		}
	}
	if len(seq) == 0 || seq[0].role != "user" {
		return rejectf(`messages: first message must use the "user" role`)
	}
	for k := 1; k < len(seq); k++ {
		if seq[k].role == seq[k-1].role {
			return rejectf(`messages.%d: roles must alternate between "user" and "assistant", but found multiple %q roles in a row`, seq[k].index, seq[k].role)
		}
	}
	if r := checkToolPairing(seq); r != nil {
		return r
	}
	if r := s.checkSignatures(list); r != nil {
		return r
	}
	return s.checkThinkingTurn(root, seq)
}

// checkSystemParam checks the top-level system prompt's text blocks.
func checkSystemParam(sys gjson.Result) *Rejection {
	if !sys.IsArray() {
		return nil
	}
	for j, b := range sys.Array() {
		if b.Get("type").String() == "text" {
			if r := checkText(fmt.Sprintf("system.%d", j), b.Get("text")); r != nil {
				return r
			}
		}
	}
	return nil
}

func checkText(where string, text gjson.Result) *Rejection {
	if text.Type != gjson.String {
		return rejectf("%s.text: Input should be a valid string", where)
	}
	if text.Str == "" {
		return rejectf("%s: text content blocks must be non-empty", where)
	}
	if strings.TrimSpace(text.Str) == "" {
		return rejectf("%s: text content blocks must contain non-whitespace text", where)
	}
	return nil
}

// checkMessage checks one message on its own. A role:"system" message is
// accepted: Claude Code sends one under the mid-conversation-system beta.
func checkMessage(i int, m gjson.Result, last bool) (msgInfo, *Rejection) {
	info := msgInfo{index: i}
	if !m.IsObject() {
		return info, rejectf("messages.%d: Input should be a valid dictionary", i)
	}
	info.role = m.Get("role").String()
	switch info.role {
	case "user", "assistant", "system":
	default:
		return info, rejectf("messages.%d.role: Input should be 'user' or 'assistant'", i)
	}
	content := m.Get("content")
	// The final assistant message (a prefill) alone may be empty.
	emptyOK := last && info.role == "assistant"
	switch {
	case content.Type == gjson.String:
		info.firstType = "text"
		if content.Str == "" && !emptyOK {
			return info, rejectf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
		}
		if content.Str != "" && strings.TrimSpace(content.Str) == "" && !emptyOK {
			return info, rejectf("messages.%d: text content blocks must contain non-whitespace text", i)
		}
		return info, nil
	case content.IsArray():
	case !content.Exists():
		return info, rejectf("messages.%d.content: Field required", i)
	default:
		return info, rejectf("messages.%d.content: Input should be a valid string or a valid list", i)
	}
	blocks := content.Array()
	if len(blocks) == 0 && !emptyOK {
		return info, rejectf("messages.%d: all messages must have non-empty content except for the optional final assistant message", i)
	}
	otherSeen := false
	ids := map[string]bool{}
	for j, b := range blocks {
		where := fmt.Sprintf("messages.%d.content.%d", i, j)
		typ := b.Get("type")
		if !b.IsObject() || typ.Type != gjson.String {
			return info, rejectf("%s.type: Field required", where)
		}
		if j == 0 {
			info.firstType = typ.Str
		}
		switch typ.Str {
		case "text":
			if r := checkText(where, b.Get("text")); r != nil {
				return info, r
			}
		case "tool_use":
			if info.role != "assistant" {
				return info, rejectf("%s: `tool_use` blocks can only be in `assistant` messages", where)
			}
			id := b.Get("id")
			if id.Type != gjson.String || id.Str == "" {
				return info, rejectf("%s.tool_use.id: Field required", where)
			}
			if ids[id.Str] {
				return info, rejectf("%s: `tool_use` ids must be unique, found duplicate %s", where, id.Str)
			}
			ids[id.Str] = true
			if n := b.Get("name"); n.Type != gjson.String || n.Str == "" {
				return info, rejectf("%s.tool_use.name: Field required", where)
			}
			if !b.Get("input").IsObject() {
				return info, rejectf("%s.tool_use.input: Input should be a valid dictionary", where)
			}
			info.toolUses = append(info.toolUses, id.Str)
		case "tool_result":
			if info.role != "user" {
				return info, rejectf("%s: `tool_result` blocks can only be in `user` messages", where)
			}
			id := b.Get("tool_use_id")
			if id.Type != gjson.String || id.Str == "" {
				return info, rejectf("%s.tool_result.tool_use_id: Field required", where)
			}
			if otherSeen {
				return info, rejectf("%s: `tool_result` blocks must come first in the user message, before any other content", where)
			}
			info.toolResults = append(info.toolResults, id.Str)
			info.resultIdx = append(info.resultIdx, j)
			continue
		case "thinking", "redacted_thinking":
			if info.role != "assistant" {
				return info, rejectf("%s: `%s` blocks can only be in `assistant` messages", where, typ.Str)
			}
		}
		otherSeen = true
	}
	return info, nil
}

// checkToolPairing: every tool_use is answered by a tool_result in the next
// message, and every tool_result answers a tool_use of the previous one.
func checkToolPairing(seq []msgInfo) *Rejection {
	for k, m := range seq {
		if len(m.toolUses) > 0 {
			var answered []string
			if k+1 < len(seq) {
				answered = seq[k+1].toolResults
			}
			var missing []string
			for _, id := range m.toolUses {
				if !slices.Contains(answered, id) {
					missing = append(missing, id)
				}
			}
			if len(missing) > 0 {
				return rejectf("messages.%d: `tool_use` ids were found without `tool_result` blocks immediately after: %s. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
					m.index, strings.Join(missing, ", "))
			}
		}
		for j, id := range m.toolResults {
			var uses []string
			if k > 0 {
				uses = seq[k-1].toolUses
			}
			if !slices.Contains(uses, id) {
				return rejectf("messages.%d.content.%d: unexpected `tool_use_id` found in `tool_result` blocks: %s. Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
					m.index, m.resultIdx[j], id)
			}
		}
	}
	return nil
}

// checkSignatures verifies every thinking block sent back: the mock signed
// the ones it issued; anything altered or invented fails.
func (s *Server) checkSignatures(list []gjson.Result) *Rejection {
	for i, m := range list {
		if m.Get("role").String() != "assistant" {
			continue
		}
		for j, b := range m.Get("content").Array() {
			if b.Get("type").String() != "thinking" {
				continue
			}
			where := fmt.Sprintf("messages.%d.content.%d", i, j)
			sig := b.Get("signature")
			if sig.Type != gjson.String {
				return rejectf("%s.thinking.signature: Field required", where)
			}
			if !validThinkingSignature(b.Get("thinking").String(), sig.Str) {
				return rejectf("%s: Invalid `signature` in `thinking` block", where)
			}
		}
	}
	return nil
}

// checkThinkingTurn: with thinking on, an assistant message of the current
// tool loop that made tool calls must start with its thinking block. The
// current loop is everything after the last user message that answers no
// tool call. With thinking "enabled" the model always thinks, so the block
// is required; with "adaptive" the model may skip thinking, so it is required
// when the mock issued those tool calls with a thinking block (the block was
// lost on the way back).
func (s *Server) checkThinkingTurn(root gjson.Result, seq []msgInfo) *Rejection {
	mode := root.Get("thinking.type").String()
	if mode != "enabled" && mode != "adaptive" {
		return nil
	}
	start := 0
	for k, m := range seq {
		if m.role == "user" && len(m.toolResults) == 0 {
			start = k + 1
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range seq[start:] {
		if m.role != "assistant" || len(m.toolUses) == 0 {
			continue
		}
		if m.firstType == "thinking" || m.firstType == "redacted_thinking" {
			continue
		}
		required := mode == "enabled"
		for _, id := range m.toolUses {
			if withThinking, issued := s.issuedToolUse[id]; issued {
				required = withThinking
				break
			}
		}
		if required {
			return rejectf("messages.%d.content.0.type: Expected `thinking` or `redacted_thinking`, but found `%s`. When `thinking` is enabled, a final `assistant` message must start with a thinking block (preceding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from previous turns. To avoid this requirement, disable `thinking`.",
				m.index, m.firstType)
		}
	}
	return nil
}

// --- OpenAI Chat ----------------------------------------------------------

var chatRoles = []string{"system", "developer", "user", "assistant", "tool", "function"}

func (s *Server) validateChat(root gjson.Result) *Rejection {
	if m := root.Get("model"); m.Type != gjson.String || m.Str == "" {
		return rejectf("you must provide a model parameter").at("model", "missing_required_parameter")
	}
	if so := root.Get("stream_options"); so.Exists() && so.Type != gjson.Null && root.Get("stream").Type != gjson.True {
		return rejectf("The 'stream_options' parameter is only allowed when 'stream' is enabled.").at("stream_options", "invalid_value")
	}
	if r := checkTools(llm.Chat, root.Get("tools")); r != nil {
		return r
	}
	msgs := root.Get("messages")
	if !msgs.Exists() {
		return rejectf("Missing required parameter: 'messages'.").at("messages", "missing_required_parameter")
	}
	if !msgs.IsArray() {
		return rejectf("Invalid type for 'messages': expected an array of objects.").at("messages", "invalid_type")
	}
	list := msgs.Array()
	if len(list) == 0 {
		return rejectf("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead.").at("messages", "empty_array")
	}
	var pending []string // tool_calls ids of the last assistant message not yet answered
	for i, m := range list {
		param := fmt.Sprintf("messages.[%d]", i)
		if !m.IsObject() {
			return rejectf("Invalid type for '%s': expected an object.", param).at(param, "invalid_type")
		}
		role := m.Get("role").String()
		if !slices.Contains(chatRoles, role) {
			return rejectf("Invalid value: '%s'. Supported values are: 'system', 'assistant', 'user', 'function', 'tool', and 'developer'.", role).
				at(param+".role", "invalid_value")
		}
		if role == "tool" {
			id := m.Get("tool_call_id")
			if id.Type != gjson.String {
				return rejectf("Missing required parameter: '%s.tool_call_id'.", param).at(param+".tool_call_id", "missing_required_parameter")
			}
			k := slices.Index(pending, id.Str)
			if k < 0 {
				return rejectf("Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'.").at(param+".role", "")
			}
			pending = slices.Delete(pending, k, k+1)
			continue
		}
		if len(pending) > 0 {
			return unansweredChat(param, pending)
		}
		if role == "assistant" {
			for j, c := range m.Get("tool_calls").Array() {
				id := c.Get("id")
				if id.Type != gjson.String || id.Str == "" {
					p := fmt.Sprintf("%s.tool_calls.[%d].id", param, j)
					return rejectf("Missing required parameter: '%s'.", p).at(p, "missing_required_parameter")
				}
				pending = append(pending, id.Str)
			}
		}
	}
	if len(pending) > 0 {
		return unansweredChat("messages", pending)
	}
	return nil
}

func unansweredChat(param string, ids []string) *Rejection {
	return rejectf("An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. The following tool_call_ids did not have response messages: %s",
		strings.Join(ids, ", ")).at(param, "")
}

// --- OpenAI Responses -----------------------------------------------------

func (s *Server) validateResponses(root gjson.Result) *Rejection {
	if m := root.Get("model"); m.Type != gjson.String || m.Str == "" {
		return rejectf("Missing required parameter: 'model'.").at("model", "missing_required_parameter")
	}
	if r := checkTools(llm.Responses, root.Get("tools")); r != nil {
		return r
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Calls the input must answer: those of a previous response, then its own.
	type call struct {
		callID string
		index  int // input index; -1 for the previous response's calls
	}
	var calls []call
	if prev := root.Get("previous_response_id"); prev.Exists() && prev.Type != gjson.Null {
		ids, ok := s.responseCalls[prev.String()]
		if !ok {
			return rejectf("Previous response with id '%s' not found.", prev.String()).at("previous_response_id", "previous_response_not_found")
		}
		for _, id := range ids {
			calls = append(calls, call{id, -1})
		}
	}
	input := root.Get("input")
	switch {
	case !input.Exists(), input.Type == gjson.Null, input.Type == gjson.String:
		return checkCallsAnswered(len(calls), func(k int) string { return calls[k].callID }, nil)
	case !input.IsArray():
		return rejectf("Invalid type for 'input': expected a string or an array of input items.").at("input", "invalid_type")
	}
	items := input.Array()
	reasoningAt := map[string]int{} // rs id → input index of its replayed item
	answered := map[string]bool{}
	for i, it := range items {
		param := fmt.Sprintf("input[%d]", i)
		if !it.IsObject() {
			return rejectf("Invalid type for '%s': expected an object.", param).at(param, "invalid_type")
		}
		typ := it.Get("type").String()
		if typ == "" && it.Get("role").Exists() {
			typ = "message"
		}
		switch typ {
		case "function_call":
			cid := it.Get("call_id")
			if cid.Type != gjson.String || cid.Str == "" {
				return rejectf("Missing required parameter: '%s.call_id'.", param).at(param+".call_id", "missing_required_parameter")
			}
			if id := it.Get("id").String(); id != "" {
				if rs, ok := s.issuedFC[id]; ok && rs != "" {
					if _, replayed := reasoningAt[rs]; !replayed {
						return rejectf("Item '%s' of type 'function_call' was provided without its required 'reasoning' item: '%s'.", id, rs).at("input", "")
					}
				}
			}
			calls = append(calls, call{cid.Str, i})
		case "function_call_output":
			cid := it.Get("call_id")
			if cid.Type != gjson.String || cid.Str == "" {
				return rejectf("Missing required parameter: '%s.call_id'.", param).at(param+".call_id", "missing_required_parameter")
			}
			if !slices.ContainsFunc(calls, func(c call) bool { return c.callID == cid.Str }) {
				return rejectf("No tool call found for function call output with call_id %s.", cid.Str).at("input", "")
			}
			answered[cid.Str] = true
		case "reasoning":
			id := it.Get("id").String()
			if blob := it.Get("encrypted_content"); blob.Exists() && blob.Type != gjson.Null {
				rs, ok := openReasoningBlob(blob.String())
				if !ok || (id != "" && id != rs) {
					return rejectf("The encrypted content for item %s could not be verified.", orUnknown(id)).at(param+".encrypted_content", "invalid_encrypted_content")
				}
				reasoningAt[rs] = i
				continue
			}
			// Without its blob, a reasoning item is looked up by id, which
			// needs a stored response.
			if id != "" && (!s.issuedRS[id] || root.Get("store").Type == gjson.False) {
				return rejectf("Item with id '%s' not found. Items are not persisted when `store` is set to false. Try again with `store` set to true, or remove this item from your input.", id).at("input", "")
			}
			if id != "" {
				reasoningAt[id] = i
			}
		}
	}
	return checkCallsAnswered(len(calls), func(k int) string { return calls[k].callID }, answered)
}

func checkCallsAnswered(n int, callID func(int) string, answered map[string]bool) *Rejection {
	for k := range n {
		if id := callID(k); !answered[id] {
			return rejectf("No tool output found for function call %s.", id).at("input", "")
		}
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "(no id)"
	}
	return s
}

// --- strict tool schemas (all three) ---------------------------------------

// checkTools rejects a tool declared strict whose schema is not a strict
// schema: every property required and additionalProperties false, at every
// level (OpenAI structured outputs; Anthropic strict tool use).
func checkTools(p llm.Protocol, tools gjson.Result) *Rejection {
	if !tools.Exists() || tools.Type == gjson.Null {
		return nil
	}
	if !tools.IsArray() {
		if p == llm.Messages {
			return rejectf("tools: Input should be a valid list")
		}
		return rejectf("Invalid type for 'tools': expected an array of objects.").at("tools", "invalid_type")
	}
	for i, t := range tools.Array() {
		var name, param string
		var strict bool
		var schema gjson.Result
		switch p {
		case llm.Chat:
			fn := t.Get("function")
			name, strict, schema = fn.Get("name").String(), fn.Get("strict").Type == gjson.True, fn.Get("parameters")
			param = fmt.Sprintf("tools[%d].function.parameters", i)
		case llm.Responses:
			if t.Get("type").String() == "namespace" {
				if r := checkTools(p, t.Get("tools")); r != nil {
					return r
				}
				continue
			}
			name, strict, schema = t.Get("name").String(), t.Get("strict").Type == gjson.True, t.Get("parameters")
			param = fmt.Sprintf("tools[%d].parameters", i)
		case llm.Messages:
			name, strict, schema = t.Get("name").String(), t.Get("strict").Type == gjson.True, t.Get("input_schema")
			param = fmt.Sprintf("tools.%d.input_schema", i)
		}
		if !strict || !schema.Exists() {
			continue
		}
		if problem := strictSchemaProblem(schema, nil); problem != "" {
			if p == llm.Messages {
				return rejectf("%s: Invalid schema for strict tool '%s': %s", param, name, problem)
			}
			return rejectf("Invalid schema for function '%s': %s", name, problem).at(param, "invalid_function_parameters")
		}
	}
	return nil
}

// strictSchemaProblem returns what makes schema not strict, or "".
func strictSchemaProblem(schema gjson.Result, path []string) string {
	if !schema.IsObject() {
		return ""
	}
	ctx := func() string {
		quoted := make([]string, len(path))
		for i, p := range path {
			quoted[i] = "'" + p + "'"
		}
		if len(quoted) == 1 {
			return "In context=(" + quoted[0] + ",), "
		}
		return "In context=(" + strings.Join(quoted, ", ") + "), "
	}
	props := schema.Get("properties")
	typ := schema.Get("type")
	isObject := props.Exists() || typ.String() == "object" ||
		(typ.IsArray() && slices.ContainsFunc(typ.Array(), func(v gjson.Result) bool { return v.String() == "object" }))
	if isObject {
		required := map[string]bool{}
		for _, r := range schema.Get("required").Array() {
			required[r.String()] = true
		}
		var missing string
		props.ForEach(func(k, _ gjson.Result) bool {
			if !required[k.String()] {
				missing = k.String()
				return false
			}
			return true
		})
		if missing != "" {
			return ctx() + "'required' is required to be supplied and to be an array including every key in properties. Missing '" + missing + "'."
		}
		if schema.Get("additionalProperties").Type != gjson.False {
			return ctx() + "'additionalProperties' is required to be supplied and to be false."
		}
	}
	var problem string
	sub := func(s gjson.Result, p ...string) bool {
		problem = strictSchemaProblem(s, append(slices.Clone(path), p...))
		return problem == ""
	}
	props.ForEach(func(k, v gjson.Result) bool { return sub(v, "properties", k.String()) })
	if problem != "" {
		return problem
	}
	for _, key := range []string{"$defs", "definitions"} {
		schema.Get(gjson.Escape(key)).ForEach(func(k, v gjson.Result) bool { return sub(v, key, k.String()) })
		if problem != "" {
			return problem
		}
	}
	if items := schema.Get("items"); items.IsObject() && !sub(items, "items") {
		return problem
	}
	for _, key := range []string{"anyOf", "oneOf", "allOf", "prefixItems"} {
		for j, v := range schema.Get(key).Array() {
			if !sub(v, key, fmt.Sprint(j)) {
				return problem
			}
		}
	}
	return ""
}
