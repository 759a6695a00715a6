package mockllm

import (
	"encoding/json"
	"strings"
	"unicode/utf8"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"

	"github.com/chimehq/chime/llm"
)

// chunkBytes is the size of a thinking or summary delta, like llm's text
// deltas (a token or two).
const chunkBytes = 8

// plan is one reply ready to render: the canonical turn plus what llm's
// renderers do not know (docs/configuration.md scripted thinking): the thinking text and
// its signature, the Responses reasoning item and realistic item ids.
type plan struct {
	p        llm.Protocol
	turn     *llm.Turn
	thinking string
	sig      string   // Messages: signature of the thinking block
	rsID     string   // Responses: reasoning item id
	blob     string   // Responses: encrypted_content, when the request included it
	msgID    string   // Responses: the message item's id
	fcIDs    []string // Responses: function_call item ids, in call order
	renamed  map[string]string
	nextFC   int
	opts     llm.RenderOptions
}

// itemID maps an id llm rendered for a Responses output item to the plan's
// realistic one, the same way for every event that names it.
func (pl *plan) itemID(old, typ string) string {
	if id, ok := pl.renamed[old]; ok {
		return id
	}
	id := old
	switch typ {
	case "message":
		id = pl.msgID
	case "function_call":
		if pl.nextFC < len(pl.fcIDs) {
			id = pl.fcIDs[pl.nextFC]
			pl.nextFC++
		}
	}
	if pl.renamed == nil {
		pl.renamed = map[string]string{}
	}
	pl.renamed[old] = id
	return id
}

type summaryText struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

type reasoningItem struct {
	ID               string        `json:"id"`
	Type             string        `json:"type"`
	EncryptedContent string        `json:"encrypted_content,omitempty"`
	Summary          []summaryText `json:"summary"`
}

func (pl *plan) reasoningItem(done bool) []byte {
	it := reasoningItem{ID: pl.rsID, Type: "reasoning", Summary: []summaryText{}}
	if done {
		it.EncryptedContent = pl.blob
		it.Summary = []summaryText{{"summary_text", pl.thinking}}
	}
	return mustJSON(it)
}

type thinkingBlock struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking"`
	Signature string `json:"signature"`
}

// renderJSON renders the non-streaming body.
func (pl *plan) renderJSON() []byte {
	out := llm.RenderJSON(pl.p, pl.turn)
	switch pl.p {
	case llm.Chat:
		if pl.thinking != "" {
			out, _ = sjson.SetBytes(out, "choices.0.message.reasoning_content", pl.thinking)
		}
	case llm.Messages:
		if pl.thinking != "" {
			block := mustJSON(thinkingBlock{"thinking", pl.thinking, pl.sig})
			out, _ = sjson.SetRawBytes(out, "content", prepend(block, gjson.GetBytes(out, "content").Raw))
		}
	case llm.Responses:
		out, _ = sjson.SetRawBytes(out, "output", pl.responsesOutput(gjson.GetBytes(out, "output")))
	}
	return out
}

// prepend puts item first in the JSON array arr.
func prepend(item []byte, arr string) []byte {
	rest := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(arr), "["))
	if rest == "]" || rest == "" {
		return append(append([]byte{'['}, item...), ']')
	}
	return append(append(append([]byte{'['}, item...), ','), rest...)
}

// responsesOutput is llm's output array with realistic item ids and the
// reasoning item first.
func (pl *plan) responsesOutput(arr gjson.Result) []byte {
	out := []byte{'['}
	n := 0
	if pl.thinking != "" {
		out = append(out, pl.reasoningItem(true)...)
		n++
	}
	for _, it := range arr.Array() {
		if n > 0 {
			out = append(out, ',')
		}
		raw, _ := sjson.SetBytes([]byte(it.Raw), "id", pl.itemID(it.Get("id").String(), it.Get("type").String()))
		out = append(out, raw...)
		n++
	}
	return append(out, ']')
}

// renderSSE renders the event stream, one element per SSE event.
func (pl *plan) renderSSE() [][]byte {
	stream := llm.RenderSSE(pl.p, pl.turn, pl.opts)
	reader := llm.NewStreamReader(pl.p)
	evs, _ := reader.Feed(stream)
	rest, _ := reader.Close()
	evs = append(evs, rest...)
	switch pl.p {
	case llm.Chat:
		return pl.chatSSE(evs)
	case llm.Messages:
		return pl.messagesSSE(evs)
	case llm.Responses:
		return pl.responsesSSE(evs)
	}
	return nil
}

func frame(name string, data []byte) []byte {
	var b []byte
	if name != "" {
		b = append(append(append(b, "event: "...), name...), '\n')
	}
	b = append(append(append(b, "data: "...), data...), "\n\n"...)
	return b
}

// chatSSE adds reasoning_content deltas after the role chunk, as
// DeepSeek-style providers stream them.
func (pl *plan) chatSSE(evs []llm.Event) [][]byte {
	var out [][]byte
	for i, ev := range evs {
		out = append(out, ev.Raw)
		if i == 0 && pl.thinking != "" {
			for _, piece := range chunk(pl.thinking) {
				choices := `[{"index":0,"delta":{"reasoning_content":` + string(mustJSON(piece)) + `},"logprobs":null,"finish_reason":null}]`
				data, _ := sjson.SetRawBytes(append([]byte(nil), ev.Data...), "choices", []byte(choices))
				out = append(out, frame("", data))
			}
		}
	}
	return out
}

type blockEvent struct {
	Type         string `json:"type"`
	Index        int    `json:"index"`
	ContentBlock any    `json:"content_block,omitempty"`
	Delta        any    `json:"delta,omitempty"`
}

type thinkingDelta struct {
	Type      string `json:"type"`
	Thinking  string `json:"thinking,omitempty"`
	Signature string `json:"signature,omitempty"`
}

// messagesSSE streams the thinking block at index 0 (start, thinking
// deltas, signature delta, stop) after message_start and ping, and moves
// the other blocks up by one.
func (pl *plan) messagesSSE(evs []llm.Event) [][]byte {
	var out [][]byte
	inserted := pl.thinking == ""
	for _, ev := range evs {
		if !inserted && ev.Type != "message_start" && ev.Type != "ping" {
			out = append(out, pl.thinkingEvents()...)
			inserted = true
		}
		if pl.thinking != "" && strings.HasPrefix(ev.Type, "content_block_") {
			data, _ := sjson.SetBytes(append([]byte(nil), ev.Data...), "index", gjson.GetBytes(ev.Data, "index").Int()+1)
			out = append(out, frame(ev.Name, data))
			continue
		}
		out = append(out, ev.Raw)
	}
	return out
}

func (pl *plan) thinkingEvents() [][]byte {
	out := [][]byte{frame("content_block_start", mustJSON(blockEvent{Type: "content_block_start",
		ContentBlock: thinkingBlock{Type: "thinking"}}))}
	for _, piece := range chunk(pl.thinking) {
		out = append(out, frame("content_block_delta", mustJSON(blockEvent{Type: "content_block_delta",
			Delta: thinkingDelta{Type: "thinking_delta", Thinking: piece}})))
	}
	out = append(out, frame("content_block_delta", mustJSON(blockEvent{Type: "content_block_delta",
		Delta: thinkingDelta{Type: "signature_delta", Signature: pl.sig}})))
	return append(out, frame("content_block_stop", mustJSON(blockEvent{Type: "content_block_stop"})))
}

// responsesSSE streams the reasoning item at output index 0 (added, summary
// part and text events, done) after response.in_progress, renumbers the
// other items and sequence numbers, and gives items realistic ids.
func (pl *plan) responsesSSE(evs []llm.Event) [][]byte {
	var out [][]byte
	shift := 0 // sequence numbers taken by inserted events
	inserted := pl.thinking == ""
	for _, ev := range evs {
		if !inserted && ev.Type != "response.created" && ev.Type != "response.in_progress" {
			added := pl.reasoningEvents(int(gjson.GetBytes(ev.Data, "sequence_number").Int()))
			out = append(out, added...)
			shift = len(added)
			inserted = true
		}
		data := append([]byte(nil), ev.Data...)
		if seq := gjson.GetBytes(data, "sequence_number"); seq.Exists() {
			data, _ = sjson.SetBytes(data, "sequence_number", seq.Int()+int64(shift))
		}
		if oi := gjson.GetBytes(data, "output_index"); oi.Exists() && pl.thinking != "" {
			data, _ = sjson.SetBytes(data, "output_index", oi.Int()+1)
		}
		if item := gjson.GetBytes(data, "item"); item.Exists() {
			data, _ = sjson.SetBytes(data, "item.id", pl.itemID(item.Get("id").String(), item.Get("type").String()))
		}
		if id := gjson.GetBytes(data, "item_id"); id.Exists() {
			data, _ = sjson.SetBytes(data, "item_id", pl.itemID(id.String(), ""))
		}
		if resp := gjson.GetBytes(data, "response"); resp.Exists() {
			if output := resp.Get("output"); len(output.Array()) > 0 || pl.thinking != "" && ev.Kind.Has(llm.KindTerminal) {
				data, _ = sjson.SetRawBytes(data, "response.output", pl.responsesOutput(output))
			}
		}
		out = append(out, frame(ev.Name, data))
	}
	return out
}

type responsesEvent struct {
	Type         string  `json:"type"`
	Seq          int     `json:"sequence_number"`
	ItemID       string  `json:"item_id,omitempty"`
	OutputIndex  int     `json:"output_index"`
	SummaryIndex *int    `json:"summary_index,omitempty"`
	Item         any     `json:"item,omitempty"`
	Part         any     `json:"part,omitempty"`
	Delta        string  `json:"delta,omitempty"`
	Text         *string `json:"text,omitempty"`
}

func (pl *plan) reasoningEvents(seq int) [][]byte {
	zero := 0
	var out [][]byte
	add := func(e responsesEvent) {
		e.Seq = seq
		seq++
		out = append(out, frame(e.Type, mustJSON(e)))
	}
	add(responsesEvent{Type: "response.output_item.added", Item: json.RawMessage(pl.reasoningItem(false))})
	add(responsesEvent{Type: "response.reasoning_summary_part.added", ItemID: pl.rsID, SummaryIndex: &zero,
		Part: summaryText{"summary_text", ""}})
	for _, piece := range chunk(pl.thinking) {
		add(responsesEvent{Type: "response.reasoning_summary_text.delta", ItemID: pl.rsID, SummaryIndex: &zero, Delta: piece})
	}
	text := pl.thinking
	add(responsesEvent{Type: "response.reasoning_summary_text.done", ItemID: pl.rsID, SummaryIndex: &zero, Text: &text})
	add(responsesEvent{Type: "response.reasoning_summary_part.done", ItemID: pl.rsID, SummaryIndex: &zero,
		Part: summaryText{"summary_text", text}})
	add(responsesEvent{Type: "response.output_item.done", Item: json.RawMessage(pl.reasoningItem(true))})
	return out
}

// chunk splits s into pieces of about chunkBytes, never inside a UTF-8
// sequence.
func chunk(s string) []string {
	var out []string
	for len(s) > 0 {
		cut := min(chunkBytes, len(s))
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++
		}
		out = append(out, s[:cut])
		s = s[cut:]
	}
	return out
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic("mockllm: " + err.Error())
	}
	return b
}
