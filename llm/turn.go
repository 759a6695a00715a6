package llm

import (
	"encoding/json"
	"slices"
	"strings"
)

// Turn is one assistant turn in canonical form, independent of the wire
// protocol it came from or will be rendered to (docs/architecture.md#response-path, §2).
type Turn struct {
	ID        string     `json:"id,omitempty"`
	Model     string     `json:"model,omitempty"`
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	Finish    Finish     `json:"finish"`
	Usage     Usage      `json:"usage"`
	// Items is the provider's content in order when it holds more than text
	// and tool calls (docs/architecture.md: provider content is replayed verbatim); nil
	// otherwise.
	Items []Item `json:"items,omitempty"`
}

// ToolCall is one function call requested by the model. Arguments is JSON
// text, exactly as the provider sent it.
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// Usage counts tokens of one turn (or of merged turns, summed).
type Usage struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
}

// Add returns the field-wise sum of u and v (docs/architecture.md: usage summed).
func (u Usage) Add(v Usage) Usage {
	return Usage{InputTokens: u.InputTokens + v.InputTokens, OutputTokens: u.OutputTokens + v.OutputTokens}
}

// FinishReason is the canonical reason a turn ended (docs/protocols.md#protocol-table/length rows).
type FinishReason string

const (
	FinishNone      FinishReason = ""           // not known (yet)
	FinishStop      FinishReason = "stop"       // natural end
	FinishLength    FinishReason = "length"     // output token limit
	FinishToolCalls FinishReason = "tool_calls" // the model wants tool results
	FinishOther     FinishReason = "other"      // anything else (content filter, refusal, …)
)

// Finish is the canonical reason plus the protocol's own value (finish_reason,
// status or incomplete reason, stop_reason), kept for faithful re-rendering.
type Finish struct {
	Reason FinishReason `json:"reason"`
	Raw    string       `json:"raw,omitempty"`
}

// UnmarshalJSON accepts the object form or a bare string, which may be a
// canonical reason ("stop") or any protocol's value ("end_turn").
func (f *Finish) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = ParseFinish(s)
		return nil
	}
	type plain Finish
	return json.Unmarshal(b, (*plain)(f))
}

// ParseFinish maps a canonical reason or any protocol's finish value to a
// Finish; unknown values become FinishOther with the value kept as Raw.
func ParseFinish(s string) Finish {
	switch FinishReason(s) {
	case FinishNone, FinishStop, FinishLength, FinishToolCalls, FinishOther:
		return Finish{Reason: FinishReason(s)}
	}
	for _, p := range []Protocol{Messages, Chat, Responses} {
		if r := classifyFinish(p, s); r != FinishOther {
			return Finish{Reason: r, Raw: s}
		}
	}
	return Finish{Reason: FinishOther, Raw: s}
}

// classifyFinish maps one protocol's finish value to the canonical reason.
// For Responses the value is the status or the incomplete_details reason.
func classifyFinish(p Protocol, raw string) FinishReason {
	if raw == "" {
		return FinishNone
	}
	switch p {
	case Chat:
		switch raw {
		case "stop":
			return FinishStop
		case "length":
			return FinishLength
		case "tool_calls", "function_call":
			return FinishToolCalls
		}
	case Responses:
		switch raw {
		case "completed":
			return FinishStop
		case "max_output_tokens":
			return FinishLength
		}
	case Messages:
		switch raw {
		case "end_turn", "stop_sequence":
			return FinishStop
		case "max_tokens":
			return FinishLength
		case "tool_use":
			return FinishToolCalls
		}
	}
	return FinishOther
}

// effectiveFinish fills in a missing reason: tool calls imply tool_calls,
// otherwise stop.
func (t *Turn) effectiveFinish() Finish {
	if t.Finish.Reason != FinishNone {
		return t.Finish
	}
	if len(t.ToolCalls) > 0 {
		return Finish{Reason: FinishToolCalls}
	}
	return Finish{Reason: FinishStop}
}

// finishWire returns the value protocol p uses for f. The raw value is reused
// when it means the same thing in p; otherwise p's usual value is chosen.
// For Responses this is the incomplete_details reason ("" when completed).
func finishWire(p Protocol, f Finish) string {
	if p == Responses {
		switch f.Reason {
		case FinishStop, FinishToolCalls, FinishNone:
			return ""
		case FinishLength:
			return "max_output_tokens"
		}
		if f.Raw != "" && f.Raw != "completed" && f.Raw != "incomplete" && classifyFinish(Responses, f.Raw) == FinishOther {
			return f.Raw
		}
		return "content_filter"
	}
	if f.Raw != "" && classifyFinish(p, f.Raw) == f.Reason {
		return f.Raw
	}
	var stop, length, tools, other string
	if p == Messages {
		stop, length, tools, other = "end_turn", "max_tokens", "tool_use", "refusal"
	} else {
		stop, length, tools, other = "stop", "length", "tool_calls", "content_filter"
	}
	switch f.Reason {
	case FinishLength:
		return length
	case FinishToolCalls:
		return tools
	case FinishOther:
		return other
	}
	return stop
}

// Merge folds a continuation into the original turn as docs/architecture.md prescribes for
// JSON responses: text from both turns, the continuation's tool calls and
// finish, usage summed, and the original's id and model. Two non-empty texts
// are joined as JoinText does; the SSE splicer uses the same rule, so both
// paths give the client equal text. Provider items (thinking blocks,
// reasoning items) of both turns stay in order: the original's in their
// place around the one text block, then the continuation's.
func Merge(orig, cont *Turn) *Turn {
	if orig == nil {
		orig = &Turn{}
	}
	if cont == nil {
		cont = &Turn{}
	}
	out := &Turn{
		ID:        orig.ID,
		Model:     orig.Model,
		Text:      JoinText(orig.Text, cont.Text),
		ToolCalls: slices.Clone(cont.ToolCalls),
		Finish:    cont.Finish,
		Usage:     orig.Usage.Add(cont.Usage),
		Items:     mergeItems(orig, cont),
	}
	if out.ID == "" {
		out.ID = cont.ID
	}
	if out.Model == "" {
		out.Model = cont.Model
	}
	return out
}

// JoinText joins the original text a and the continuation b with a blank
// line, unless either is empty or the boundary already has a newline.
func JoinText(a, b string) string { return a + textSeparator(a, b) + b }

// textSeparator is what goes between the original text a and continuation b.
func textSeparator(a, b string) string {
	if a == "" || b == "" || strings.HasSuffix(a, "\n") || strings.HasPrefix(b, "\n") {
		return ""
	}
	return "\n\n"
}

// ServerCalls returns the calls whose name is one of serverTools: the ones
// the host executes (docs/architecture.md#mixed-calls).
func (t *Turn) ServerCalls(serverTools []string) []ToolCall {
	return filterCalls(t.ToolCalls, serverTools, true)
}

// ClientCalls returns the calls whose name is not one of serverTools: the
// ones the client must see and execute (docs/architecture.md#mixed-calls).
func (t *Turn) ClientCalls(serverTools []string) []ToolCall {
	return filterCalls(t.ToolCalls, serverTools, false)
}

func filterCalls(calls []ToolCall, serverTools []string, server bool) []ToolCall {
	var out []ToolCall
	for _, c := range calls {
		if slices.Contains(serverTools, c.Name) == server {
			out = append(out, c)
		}
	}
	return out
}
