// Package ssecheck validates a complete SSE stream as a client receives it,
// independently of package llm's reader and renderers, so tests of the
// filter, the splicer and the whole stack share one oracle for docs/architecture.md
// (response path, SSE): valid framing for each protocol, one start and one
// terminal event, and one assistant answer: at most one text block
// (Messages) or message item with one part (Responses), nothing else
// started while it is open, and every done event and the final response
// carrying the whole text the deltas streamed. Agent CLIs keep only the
// last text block or output item, so a second one loses the reply's start.
package ssecheck

import (
	"bytes"
	"errors"
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// Result is what a client accumulates from a valid stream.
type Result struct {
	Text       string   // the assistant text, as its deltas streamed it
	TextBlocks int      // Messages text blocks, Responses message items; Chat 1 if any text
	ToolCalls  []string // the tool call names, in order
	Types      []string // every event's type, in order ("[DONE]" for Chat's end)
}

// Protocol names, as the three API paths (docs/protocols.md) name them.
const (
	Chat      = "chat"
	Responses = "responses"
	Messages  = "messages"
)

type event struct {
	name string
	data []byte
	json gjson.Result
	typ  string
}

// parse splits a stream into events: blank-line separated, "event:" and
// "data:" fields, other fields and comments ignored, LF or CRLF line ends.
func parse(stream []byte) ([]event, error) {
	stream = bytes.ReplaceAll(stream, []byte("\r\n"), []byte("\n"))
	if len(bytes.TrimSpace(stream)) > 0 && !bytes.HasSuffix(stream, []byte("\n\n")) {
		return nil, errors.New("stream does not end with a blank line")
	}
	var evs []event
	for _, block := range bytes.Split(stream, []byte("\n\n")) {
		if len(bytes.TrimSpace(block)) == 0 {
			continue
		}
		var ev event
		var data [][]byte
		for _, line := range bytes.Split(block, []byte("\n")) {
			field, value, _ := bytes.Cut(line, []byte(":"))
			value = bytes.TrimPrefix(value, []byte(" "))
			switch string(field) { // id, retry and comments do not matter here
			case "event":
				ev.name = string(value)
			case "data":
				data = append(data, value)
			}
		}
		if len(data) == 0 {
			continue
		}
		ev.data = bytes.Join(data, []byte("\n"))
		if string(ev.data) == "[DONE]" {
			ev.typ = "[DONE]"
		} else {
			if !gjson.ValidBytes(ev.data) {
				return nil, fmt.Errorf("invalid JSON: %s", ev.data)
			}
			ev.json = gjson.ParseBytes(ev.data)
			ev.typ = ev.json.Get("type").String()
			if ev.typ == "" {
				ev.typ = ev.json.Get("object").String()
			}
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Check validates stream as protocol's client receives it. The error joins
// every rule the stream breaks.
func Check(protocol string, stream []byte) (*Result, error) {
	evs, err := parse(stream)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, errors.New("empty stream")
	}
	c := &checker{res: &Result{}}
	for _, ev := range evs {
		c.res.Types = append(c.res.Types, ev.typ)
	}
	switch protocol {
	case Chat:
		c.chat(evs)
	case Responses:
		c.responses(evs)
	case Messages:
		c.messages(evs)
	default:
		return nil, fmt.Errorf("unknown protocol %q", protocol)
	}
	return c.res, errors.Join(c.errs...)
}

type checker struct {
	res  *Result
	errs []error
	text strings.Builder
}

func (c *checker) fail(format string, args ...any) {
	c.errs = append(c.errs, fmt.Errorf(format, args...))
}

func (c *checker) count(evs []event, types ...string) int {
	n := 0
	for _, ev := range evs {
		for _, t := range types {
			if ev.typ == t {
				n++
			}
		}
	}
	return n
}

func (c *checker) chat(evs []event) {
	if evs[len(evs)-1].typ != "[DONE]" || c.count(evs, "[DONE]") != 1 {
		c.fail("chat: the stream must end with one data: [DONE]")
	}
	id, finishes := "", 0
	calls := map[int]bool{}
	for i, ev := range evs {
		if ev.typ == "[DONE]" {
			continue
		}
		if ev.name != "" {
			c.fail("chat: event %d has an event name %q", i, ev.name)
		}
		if ev.typ != "chat.completion.chunk" {
			c.fail("chat: event %d is a %q, not a chunk", i, ev.typ)
		}
		if got := ev.json.Get("id").String(); id == "" {
			id = got
		} else if got != id {
			c.fail("chat: chunk id %q differs from %q", got, id)
		}
		for _, ch := range ev.json.Get("choices").Array() {
			if ch.Get("index").Int() != 0 {
				c.fail("chat: choice %d", ch.Get("index").Int())
			}
			delta := ch.Get("delta")
			if s := delta.Get("content").String(); s != "" {
				if finishes > 0 {
					c.fail("chat: content after the finish chunk: %q", s)
				}
				c.text.WriteString(s)
			}
			for _, tc := range delta.Get("tool_calls").Array() {
				if idx := int(tc.Get("index").Int()); !calls[idx] {
					calls[idx] = true
					c.res.ToolCalls = append(c.res.ToolCalls, tc.Get("function.name").String())
				}
				if finishes > 0 {
					c.fail("chat: tool call after the finish chunk")
				}
			}
			if fr := ch.Get("finish_reason"); fr.Type == gjson.String {
				finishes++
			}
		}
	}
	if finishes != 1 {
		c.fail("chat: %d chunks with finish_reason, want 1", finishes)
	}
	c.res.Text = c.text.String()
	if c.res.Text != "" {
		c.res.TextBlocks = 1
	}
}

func (c *checker) messages(evs []event) {
	if evs[0].typ != "message_start" || c.count(evs, "message_start") != 1 {
		c.fail("messages: the stream must start with its one message_start")
	}
	if evs[len(evs)-1].typ != "message_stop" || c.count(evs, "message_stop") != 1 {
		c.fail("messages: the stream must end with its one message_stop")
	}
	if n := c.count(evs, "message_delta"); n != 1 {
		c.fail("messages: %d message_delta events, want 1", n)
	}
	open := map[int]string{}
	started, textBlock := 0, -1
	for _, ev := range evs {
		if ev.name != ev.typ {
			c.fail("messages: event name %q, type %q", ev.name, ev.typ)
		}
		idx := int(ev.json.Get("index").Int())
		switch ev.typ {
		case "content_block_start":
			if idx != started {
				c.fail("messages: block %d started, want %d", idx, started)
			}
			started++
			if _, ok := open[textBlock]; ok {
				c.fail("messages: block %d started while text block %d is open", idx, textBlock)
			}
			typ := ev.json.Get("content_block.type").String()
			open[idx] = typ
			switch typ {
			case "text":
				c.res.TextBlocks++
				textBlock = idx
				c.text.WriteString(ev.json.Get("content_block.text").String())
			case "tool_use":
				c.res.ToolCalls = append(c.res.ToolCalls, ev.json.Get("content_block.name").String())
			}
		case "content_block_delta":
			typ, ok := open[idx]
			if !ok {
				c.fail("messages: delta for block %d that is not open", idx)
			}
			if d := ev.json.Get("delta"); d.Get("type").String() == "text_delta" {
				if typ != "text" {
					c.fail("messages: text delta for a %s block", typ)
				}
				c.text.WriteString(d.Get("text").String())
			}
		case "content_block_stop":
			if _, ok := open[idx]; !ok {
				c.fail("messages: stop for block %d that is not open", idx)
			}
			delete(open, idx)
		case "message_delta", "message_stop":
			if len(open) > 0 {
				c.fail("messages: %s with blocks still open: %v", ev.typ, open)
			}
		}
	}
	if c.res.TextBlocks > 1 {
		c.fail("messages: %d text blocks, want at most 1", c.res.TextBlocks)
	}
	c.res.Text = c.text.String()
}

func (c *checker) responses(evs []event) {
	if evs[0].typ != "response.created" || c.count(evs, "response.created") != 1 {
		c.fail("responses: the stream must start with its one response.created")
	}
	last := evs[len(evs)-1].typ
	if c.count(evs, "response.completed", "response.incomplete", "response.failed") != 1 ||
		(last != "response.completed" && last != "response.incomplete" && last != "response.failed") {
		c.fail("responses: the stream must end with its one terminal response event")
	}
	added, done := map[int]bool{}, map[int]bool{}
	msg, msgOpen := -1, false
	for i, ev := range evs {
		if ev.name != ev.typ {
			c.fail("responses: event name %q, type %q", ev.name, ev.typ)
		}
		if seq := ev.json.Get("sequence_number"); seq.Type != gjson.Number || int(seq.Int()) != i {
			c.fail("responses: %s has sequence_number %s, want %d", ev.typ, seq.Raw, i)
		}
		idx := int(ev.json.Get("output_index").Int())
		text := c.text.String()
		switch ev.typ {
		case "response.output_item.added":
			if added[idx] || idx != len(added) {
				c.fail("responses: output_index %d added out of order or twice", idx)
			}
			added[idx] = true
			if msgOpen {
				c.fail("responses: item %d added while message item %d is open", idx, msg)
			}
			switch ev.json.Get("item.type").String() {
			case "message":
				c.res.TextBlocks++
				msg, msgOpen = idx, true
			case "function_call":
				c.res.ToolCalls = append(c.res.ToolCalls, ev.json.Get("item.name").String())
			}
		case "response.content_part.added":
			if idx != msg || !msgOpen || ev.json.Get("content_index").Int() != 0 {
				c.fail("responses: content part %d of item %d: want one part of the open message item",
					ev.json.Get("content_index").Int(), idx)
			}
		case "response.output_text.delta":
			if idx != msg || !msgOpen {
				c.fail("responses: text outside the open message item: %s", ev.data)
			}
			c.text.WriteString(ev.json.Get("delta").String())
		case "response.output_text.done":
			if got := ev.json.Get("text").String(); got != text {
				c.fail("responses: output_text.done has %q, the deltas %q", got, text)
			}
		case "response.content_part.done":
			if got := ev.json.Get("part.text").String(); got != text {
				c.fail("responses: content_part.done has %q, the deltas %q", got, text)
			}
		case "response.output_item.done":
			if !added[idx] || done[idx] {
				c.fail("responses: output_index %d done without add, or twice", idx)
			}
			done[idx] = true
			item := ev.json.Get("item")
			if item.Get("type").String() == "message" {
				msgOpen = false
				parts := item.Get("content").Array()
				if len(parts) != 1 || parts[0].Get("text").String() != text {
					c.fail("responses: output_item.done message %s, want one part with %q", item.Get("content").Raw, text)
				}
			}
		case "response.completed", "response.incomplete", "response.failed":
			out := ev.json.Get("response.output").Array()
			if len(out) != len(added) || len(done) != len(added) {
				c.fail("responses: final output has %d items; %d added, %d done", len(out), len(added), len(done))
			}
			for _, it := range out {
				if it.Get("type").String() == "message" && it.Get("content.0.text").String() != text {
					c.fail("responses: %s message text %q, the deltas %q", ev.typ, it.Get("content.0.text").String(), text)
				}
			}
		}
	}
	if c.res.TextBlocks > 1 {
		c.fail("responses: %d message items, want at most 1", c.res.TextBlocks)
	}
	c.res.Text = c.text.String()
}
