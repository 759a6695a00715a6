package llm

import (
	"bytes"
	"slices"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

// Splicer continues an SSE stream the filter has partly forwarded (docs/architecture.md
// response path, SSE). The filter passes every event of the original stream
// to Add, saying whether it reached the client; then Continue renders the
// continuation turn as the rest of the same assistant turn.
//
// The filter must withhold everything from the first server-tool call on
// (Event.StartsToolCall) and from the first event for which Event.MustHold
// is true (the close of the text block or message item, finish, terminal,
// Chat's usage-only chunk): the client then still has the assistant's text
// block (Messages) or message item (Responses) open, and Continue streams
// the rest of the text into it as more deltas before closing it once with
// the whole merged text. The client sees one text block and one message,
// the same turn Merge gives for JSON: the original's text, a separator, the
// continuation's text, its tool calls (after the text block) and finish,
// and usage summed. Text inside withheld events is not lost: it comes first.
// Non-text items the client already saw (thinking, reasoning) keep their
// place; withheld ones of the original are dropped. Continue is called once
// per stream.
type Splicer struct {
	p         Protocol
	id, model string
	created   int64
	started   bool  // a start event reached the client
	usage     Usage // the original's cumulative usage
	chatUsage bool  // Chat: the original stream carried usage
	next      int   // first index the client has not seen
	seq       int   // Responses: next sequence_number
	heldText  []byte
	lastText  string // the last text fragment of the original, for the separator
	open      []int  // Messages: blocks started but not stopped
	textBlock int    // Messages: the open text block, or -1
	items     []*splicedItem
}

// splicedItem is a Responses output item the client has (partly) seen.
type splicedItem struct {
	index        int
	id, typ      string
	added        []byte // the item as output_item.added carried it
	callID, name string
	args         []byte
	parts        []splicedPart // per content index
	argsDone     bool
	done         bool
	finished     []byte // the item as output_item.done carried it
}

// splicedPart is one output_text part of a Responses message item.
type splicedPart struct {
	text               []byte
	textDone, partDone bool
}

// NewSplicer returns a splicer for protocol p.
func NewSplicer(p Protocol) *Splicer { return &Splicer{p: p, textBlock: -1} }

// Add records one event of the original stream, in order. forwarded says
// whether the filter passed it to the client.
func (s *Splicer) Add(ev Event, forwarded bool) {
	if ev.Kind.Has(KindStart) {
		s.id, s.model = ev.ID, ev.Model
		switch s.p {
		case Chat:
			s.created = gjson.GetBytes(ev.Data, "created").Int()
		case Responses:
			s.created = gjson.GetBytes(ev.Data, "response.created_at").Int()
		}
		if forwarded {
			s.started = true
		}
	}
	if ev.Kind.Has(KindUsage) {
		s.usage = ev.Usage
		if s.p == Chat {
			s.chatUsage = true
		}
	}
	if ev.Kind.Has(KindTextDelta) {
		s.lastText = ev.Text
		if !forwarded {
			s.heldText = append(s.heldText, ev.Text...)
		}
	}
	if !forwarded {
		return
	}
	// A start event the client got counts even when its data is not
	// JSON (no KindStart): the client's stream has started, and a second
	// start would break it (docs/failures.md).
	if (s.p == Messages && ev.Type == "message_start") || (s.p == Responses && ev.Type == "response.created") {
		s.started = true
	}
	switch s.p {
	case Chat:
		if !s.started && ev.Type == "chat.completion.chunk" {
			s.started = true
		}
		for _, c := range ev.Calls {
			s.next = max(s.next, c.Index+1)
		}
	case Messages:
		switch ev.Type {
		case "content_block_start":
			s.next = max(s.next, ev.Index+1)
			s.open = append(s.open, ev.Index)
			if gjson.GetBytes(ev.Data, "content_block.type").String() == "text" {
				s.textBlock = ev.Index
			}
		case "content_block_stop":
			if i := slices.Index(s.open, ev.Index); i >= 0 {
				s.open = slices.Delete(s.open, i, i+1)
			}
			if ev.Index == s.textBlock {
				s.textBlock = -1
			}
		}
	case Responses:
		s.addResponses(ev)
	}
}

func (s *Splicer) addResponses(ev Event) {
	if seq := gjson.GetBytes(ev.Data, "sequence_number"); seq.Exists() {
		s.seq = max(s.seq, int(seq.Int())+1)
	}
	if ev.Index < 0 {
		return
	}
	s.next = max(s.next, ev.Index+1)
	item := s.item(ev.Index)
	switch ev.Type {
	case "response.output_item.added":
		it := gjson.GetBytes(ev.Data, "item")
		item.id = it.Get("id").String()
		item.typ = it.Get("type").String()
		item.callID = it.Get("call_id").String()
		item.name = it.Get("name").String()
		item.args = append(item.args[:0], it.Get("arguments").String()...)
		item.added = []byte(it.Raw)
	case "response.content_part.added":
		item.part(ev.Data)
	case "response.output_text.delta":
		part := item.part(ev.Data)
		part.text = append(part.text, ev.Text...)
	case "response.output_text.done":
		part := item.part(ev.Data)
		part.text = append(part.text[:0], gjson.GetBytes(ev.Data, "text").String()...)
		part.textDone = true
	case "response.content_part.done":
		item.part(ev.Data).partDone = true
	case "response.function_call_arguments.delta":
		for _, c := range ev.Calls {
			item.args = append(item.args, c.Arguments...)
		}
	case "response.function_call_arguments.done":
		item.args = append(item.args[:0], gjson.GetBytes(ev.Data, "arguments").String()...)
		item.argsDone = true
	case "response.output_item.done":
		item.done = true
		item.finished = []byte(gjson.GetBytes(ev.Data, "item").Raw)
	}
}

// part returns the part an event's content_index names, growing as needed.
func (it *splicedItem) part(data []byte) *splicedPart {
	ci := max(0, int(gjson.GetBytes(data, "content_index").Int()))
	for len(it.parts) <= ci {
		it.parts = append(it.parts, splicedPart{})
	}
	return &it.parts[ci]
}

func (s *Splicer) item(index int) *splicedItem {
	for _, it := range s.items {
		if it.index == index {
			return it
		}
	}
	it := &splicedItem{index: index}
	s.items = append(s.items, it)
	return it
}

// Continue renders cont as the remainder of the stream: withheld text and
// the continuation's text streamed into the open text block or message
// item (a new one only if none is open), open blocks or items closed with
// the whole text, the continuation's tool calls at indices after those the
// client has seen, then one finish and one terminal with usage summed. A
// start event is emitted only if none was forwarded.
func (s *Splicer) Continue(cont *Turn, opts RenderOptions) []byte {
	if cont == nil {
		cont = &Turn{}
	}
	id, model := s.id, s.model
	if id == "" {
		id = cont.ID
	}
	if model == "" {
		model = cont.Model
	}
	created := s.created
	if created == 0 {
		created = opts.Created
	}
	w := newSSEWriter(s.p, opts, id, model, created)
	w.chatUsage = s.chatUsage || opts.ChatUsage
	w.next, w.seq = s.next, s.seq
	total := s.usage.Add(cont.Usage)
	if !s.started {
		w.start(total)
	}
	sep := ""
	if len(s.heldText) > 0 || s.lastText != "" {
		sep = textSeparator(s.lastText, cont.Text)
	}
	text := string(s.heldText) + sep + cont.Text
	if s.closeOpen(w, text) {
		text = ""
	}
	w.body(text, cont.ToolCalls)
	w.end(cont.effectiveFinish(), total)
	return w.buf
}

// closeOpen ends what the client saw begin but not end, so the framing stays
// valid, and collects Responses items for the final response object. text
// goes into the open text block or message item first; it reports whether
// there was one to take it.
func (s *Splicer) closeOpen(w *sseWriter, text string) (merged bool) {
	switch s.p {
	case Messages:
		for _, idx := range s.open {
			if idx == s.textBlock && !merged {
				w.messagesTextDeltas(idx, text)
				merged = true
			}
			w.blockStop(idx)
		}
	case Responses:
		items := slices.Clone(s.items)
		slices.SortFunc(items, func(a, b *splicedItem) int { return a.index - b.index })
		for _, it := range items {
			switch {
			case it.done:
				w.items = append(w.items, it.finished)
			case it.typ == "message":
				if !merged && it.open() {
					if len(it.parts) == 0 {
						w.responsesTextEvent("response.content_part.added", it.id, it.index, 0, "part", "")
						it.parts = append(it.parts, splicedPart{})
					}
					last := len(it.parts) - 1
					w.responsesTextDeltas(it.id, it.index, last, text)
					it.parts[last].text = append(it.parts[last].text, text...)
					merged = true
				}
				texts := make([]string, len(it.parts))
				for i, p := range it.parts {
					texts[i] = string(p.text)
					if !p.textDone {
						w.responsesTextEvent("response.output_text.done", it.id, it.index, i, "text", texts[i])
					}
					if !p.partDone {
						w.responsesTextEvent("response.content_part.done", it.id, it.index, i, "part", texts[i])
					}
				}
				w.finishResponsesMessage(it.id, it.index, texts)
			case it.typ == "function_call":
				if !it.argsDone {
					w.responsesArgsDone(it.id, it.index, it.name, string(it.args))
				}
				w.finishResponsesCall(it.id, it.index, it.callID, it.name, string(it.args))
			case len(it.added) > 0:
				// Another item type (reasoning, …) cut short: done as it was added.
				item, err := sjson.SetBytes(bytes.Clone(it.added), "status", "completed")
				if err != nil {
					item = it.added
				}
				w.responsesItemEvent("response.output_item.done", it.index, item)
				w.items = append(w.items, item)
			}
		}
	}
	return merged
}

// open reports whether more text can stream into a message item: its last
// content part, if any, has not been closed.
func (it *splicedItem) open() bool {
	if len(it.parts) == 0 {
		return true
	}
	p := it.parts[len(it.parts)-1]
	return !p.textDone && !p.partDone
}
