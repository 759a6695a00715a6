package llm

import "strings"

// TurnBuilder folds a stream's Events into a Turn, the way a client SDK
// accumulates a streamed message. Its zero value is ready to use.
type TurnBuilder struct {
	id, model  string
	text       strings.Builder
	calls      []ToolCall
	args       [][]byte
	byIndex    map[int]int // protocol index -> position in calls
	finish     Finish
	usage      Usage
	terminated bool
	errMsg     string
}

// Add folds one event into the turn.
func (b *TurnBuilder) Add(ev Event) {
	if ev.Kind.Has(KindStart) {
		if b.id == "" {
			b.id = ev.ID
		}
		if b.model == "" {
			b.model = ev.Model
		}
	}
	if ev.Kind.Has(KindTextDelta) {
		b.text.WriteString(ev.Text)
	}
	for _, c := range ev.Calls {
		pos, ok := b.byIndex[c.Index]
		if !ok || (ev.Kind.Has(KindToolCallStart) && c.ID != "" && b.calls[pos].ID != "" && b.calls[pos].ID != c.ID) {
			if b.byIndex == nil {
				b.byIndex = make(map[int]int)
			}
			pos = len(b.calls)
			b.byIndex[c.Index] = pos
			b.calls = append(b.calls, ToolCall{})
			b.args = append(b.args, nil)
		}
		if c.ID != "" {
			b.calls[pos].ID = c.ID
		}
		if c.Name != "" {
			// Chat may split a name across chunks; the others send it whole once.
			b.calls[pos].Name += c.Name
		}
		b.args[pos] = append(b.args[pos], c.Arguments...)
	}
	if ev.Kind.Has(KindFinish) {
		b.finish = ev.Finish
	}
	if ev.Kind.Has(KindUsage) {
		b.usage = ev.Usage
	}
	if ev.Kind.Has(KindTerminal) {
		b.terminated = true
	}
	if ev.Kind.Has(KindError) {
		b.errMsg = ev.ErrorMessage
	}
}

// NumCalls returns how many tool calls have started so far.
func (b *TurnBuilder) NumCalls() int { return len(b.calls) }

// Terminated reports whether the protocol's terminal event was seen.
func (b *TurnBuilder) Terminated() bool { return b.terminated }

// ErrorMessage returns the last in-stream provider error, if any.
func (b *TurnBuilder) ErrorMessage() string { return b.errMsg }

// Turn returns the turn accumulated so far (a fresh copy).
func (b *TurnBuilder) Turn() *Turn {
	t := &Turn{ID: b.id, Model: b.model, Text: b.text.String(), Finish: b.finish, Usage: b.usage}
	if len(b.calls) > 0 {
		t.ToolCalls = make([]ToolCall, len(b.calls))
		for i, c := range b.calls {
			c.Arguments = string(b.args[i])
			t.ToolCalls[i] = c
		}
	}
	return t
}
