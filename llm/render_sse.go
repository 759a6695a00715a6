package llm

import (
	"strconv"
	"time"
)

// RenderOptions tunes the SSE renderers.
type RenderOptions struct {
	// ChunkBytes is the approximate size of each text or arguments delta
	// (never inside a UTF-8 sequence). Zero means 8, roughly a token or two.
	ChunkBytes int
	// ChatUsage ends a Chat stream with the usage chunk, as OpenAI does when
	// the request sets stream_options.include_usage.
	ChatUsage bool
	// Created is written as created/created_at (Unix seconds); zero means now.
	Created int64
}

// RenderSSE renders t as a complete event stream of protocol p, framed and
// chunked the way the provider streams it (docs/architecture.md#response-path, SSE):
//   - Chat: chat.completion.chunk objects (role, content deltas, tool call
//     start then argument deltas, finish, optional usage), then data: [DONE].
//   - Responses: response.created, response.in_progress, output items with
//     their part/delta/done events, then response.completed (or
//     response.incomplete) carrying the full response.
//   - Messages: message_start, ping, content_block_start/delta/stop per
//     block, message_delta with stop_reason and usage, message_stop.
func RenderSSE(p Protocol, t *Turn, opts RenderOptions) []byte {
	if t == nil {
		t = &Turn{}
	}
	w := newSSEWriter(p, opts, t.ID, t.Model, opts.Created)
	w.chatUsage = opts.ChatUsage
	w.start(t.Usage)
	w.body(t.Text, t.ToolCalls)
	w.end(t.effectiveFinish(), t.Usage)
	return w.buf
}

// sseWriter renders events while tracking what a continuation must respect:
// the next free index, the Responses sequence number and output items.
type sseWriter struct {
	p         Protocol
	chunk     int
	buf       wireBuf
	scratch   wireBuf
	id, model string
	created   int64
	seq       int      // Responses sequence_number of the next event
	next      int      // next free index: Chat tool call, Responses output item, Messages block
	items     [][]byte // Responses: finished output items, for the final response object
	chatUsage bool
}

func newSSEWriter(p Protocol, opts RenderOptions, id, model string, created int64) *sseWriter {
	if created == 0 {
		created = time.Now().Unix()
	}
	w := &sseWriter{p: p, chunk: opts.ChunkBytes, created: created, model: orDefault(model, "unknown")}
	switch p {
	case Chat:
		w.id = orDefault(id, "chatcmpl-chime")
	case Responses:
		w.id = orDefault(id, "resp_chime")
	default:
		w.id = orDefault(id, "msg_chime")
	}
	return w
}

// event starts a JSON event object in scratch; emit finishes and frames it.
func (w *sseWriter) event(typ string) *wireBuf {
	w.scratch = append(w.scratch[:0], '{')
	if w.p == Chat {
		w.scratch.kstr("id", w.id)
		w.scratch.kraw("object", `"chat.completion.chunk"`)
		w.scratch.key("created")
		w.scratch = strconv.AppendInt(w.scratch, w.created, 10)
		w.scratch.kstr("model", w.model)
		return &w.scratch
	}
	w.scratch.kstr("type", typ)
	if w.p == Responses {
		w.scratch.kint("sequence_number", w.seq)
		w.seq++
	}
	return &w.scratch
}

func (w *sseWriter) emit(name string) {
	w.scratch.raw("}")
	w.buf.sseEvent(name, w.scratch)
}

// start emits the protocol's opening events.
func (w *sseWriter) start(u Usage) {
	switch w.p {
	case Chat:
		b := w.event("")
		b.raw(`,"choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}]`)
		w.emit("")
	case Responses:
		for _, typ := range []string{"response.created", "response.in_progress"} {
			b := w.event(typ)
			b.key("response")
			b.responsesObject(responsesMeta{w.id, w.model, w.created}, Finish{}, nil, Usage{}, false)
			w.emit(typ)
		}
	case Messages:
		b := w.event("message_start")
		b.raw(`,"message":{`)
		b.kstr("id", w.id)
		b.raw(`,"type":"message","role":"assistant"`)
		b.kstr("model", w.model)
		b.raw(`,"content":[],"stop_reason":null,"stop_sequence":null,"usage":`)
		b.messagesUsage(Usage{InputTokens: u.InputTokens, OutputTokens: min(u.OutputTokens, 1)})
		b.raw(`}`)
		w.emit("message_start")
		w.event("ping")
		w.emit("ping")
	}
}

// body emits text (if any) and then each tool call, at indices from w.next.
func (w *sseWriter) body(text string, calls []ToolCall) {
	switch w.p {
	case Chat:
		for _, piece := range chunkText(text, w.chunk) {
			b := w.event("")
			b.raw(`,"choices":[{"index":0,"delta":{"content":`)
			b.str(piece)
			b.raw(`},"logprobs":null,"finish_reason":null}]`)
			w.emit("")
		}
		for _, c := range calls {
			idx := w.next
			w.next++
			b := w.event("")
			b.raw(`,"choices":[{"index":0,"delta":{"tool_calls":[{`)
			b.kint("index", idx)
			b.kstr("id", callID(Chat, c.ID, idx))
			b.raw(`,"type":"function","function":{`)
			b.kstr("name", c.Name)
			b.raw(`,"arguments":""}}]},"logprobs":null,"finish_reason":null}]`)
			w.emit("")
			for _, piece := range chunkText(c.Arguments, w.chunk*2) {
				b := w.event("")
				b.raw(`,"choices":[{"index":0,"delta":{"tool_calls":[{`)
				b.kint("index", idx)
				b.raw(`,"function":{`)
				b.kstr("arguments", piece)
				b.raw(`}}]},"logprobs":null,"finish_reason":null}]`)
				w.emit("")
			}
		}
	case Responses:
		if text != "" {
			w.responsesText(text)
		}
		for _, c := range calls {
			w.responsesCall(c)
		}
	case Messages:
		if text != "" {
			idx := w.next
			w.next++
			b := w.event("content_block_start")
			b.kint("index", idx)
			b.raw(`,"content_block":{"type":"text","text":""}`)
			w.emit("content_block_start")
			w.messagesTextDeltas(idx, text)
			w.blockStop(idx)
		}
		for _, c := range calls {
			idx := w.next
			w.next++
			b := w.event("content_block_start")
			b.kint("index", idx)
			b.raw(`,"content_block":{"type":"tool_use"`)
			b.kstr("id", callID(Messages, c.ID, idx))
			b.kstr("name", c.Name)
			b.raw(`,"input":{}}`)
			w.emit("content_block_start")
			args := c.Arguments
			if args != "" {
				args = messagesInput(args)
			}
			for _, piece := range chunkText(args, w.chunk*2) {
				b := w.event("content_block_delta")
				b.kint("index", idx)
				b.raw(`,"delta":{"type":"input_json_delta","partial_json":`)
				b.str(piece)
				b.raw(`}`)
				w.emit("content_block_delta")
			}
			w.blockStop(idx)
		}
	}
}

// messagesTextDeltas streams text into the open text block idx.
func (w *sseWriter) messagesTextDeltas(idx int, text string) {
	for _, piece := range chunkText(text, w.chunk) {
		b := w.event("content_block_delta")
		b.kint("index", idx)
		b.raw(`,"delta":{"type":"text_delta","text":`)
		b.str(piece)
		b.raw(`}`)
		w.emit("content_block_delta")
	}
}

func (w *sseWriter) blockStop(idx int) {
	b := w.event("content_block_stop")
	b.kint("index", idx)
	w.emit("content_block_stop")
}

// responsesItemEvent emits an output_item.added/done event for item.
func (w *sseWriter) responsesItemEvent(typ string, idx int, item []byte) {
	b := w.event(typ)
	b.kint("output_index", idx)
	b.key("item")
	b.rawBytes(item)
	w.emit(typ)
}

// responsesTextEvent emits a content-part level event of a message item.
func (w *sseWriter) responsesTextEvent(typ, itemID string, idx, part int, field, value string) {
	b := w.event(typ)
	b.kstr("item_id", itemID)
	b.kint("output_index", idx)
	b.kint("content_index", part)
	switch field {
	case "part":
		b.key("part")
		b.outputTextPart(value)
	case "":
	default:
		b.kstr(field, value)
		b.raw(`,"logprobs":[]`)
	}
	w.emit(typ)
}

func (w *sseWriter) responsesText(text string) {
	idx := w.next
	w.next++
	id := responsesItemID("msg", idx)
	w.responsesItemEvent("response.output_item.added", idx, responsesMessageItemWithID(id, nil, "in_progress"))
	w.responsesTextEvent("response.content_part.added", id, idx, 0, "part", "")
	w.responsesTextDeltas(id, idx, 0, text)
	w.responsesTextEvent("response.output_text.done", id, idx, 0, "text", text)
	w.responsesTextEvent("response.content_part.done", id, idx, 0, "part", text)
	w.finishResponsesMessage(id, idx, []string{text})
}

// responsesTextDeltas streams text into part of the open message item idx.
func (w *sseWriter) responsesTextDeltas(id string, idx, part int, text string) {
	for _, piece := range chunkText(text, w.chunk) {
		w.responsesTextEvent("response.output_text.delta", id, idx, part, "delta", piece)
	}
}

// finishResponsesMessage emits output_item.done for a message item whose
// parts hold texts, and records the finished item.
func (w *sseWriter) finishResponsesMessage(id string, idx int, texts []string) {
	item := responsesMessageItemWithID(id, texts, "completed")
	w.responsesItemEvent("response.output_item.done", idx, item)
	w.items = append(w.items, item)
}

func (w *sseWriter) responsesCall(c ToolCall) {
	idx := w.next
	w.next++
	id := responsesItemID("fc", idx)
	cid := callID(Responses, c.ID, idx)
	w.responsesItemEvent("response.output_item.added", idx, responsesCallItemWithID(id, cid, c.Name, "", "in_progress"))
	for _, piece := range chunkText(c.Arguments, w.chunk*2) {
		b := w.event("response.function_call_arguments.delta")
		b.kstr("item_id", id)
		b.kint("output_index", idx)
		b.kstr("delta", piece)
		w.emit("response.function_call_arguments.delta")
	}
	w.responsesArgsDone(id, idx, c.Name, c.Arguments)
	w.finishResponsesCall(id, idx, cid, c.Name, c.Arguments)
}

func (w *sseWriter) responsesArgsDone(id string, idx int, name, args string) {
	b := w.event("response.function_call_arguments.done")
	b.kstr("item_id", id)
	b.kint("output_index", idx)
	b.kstr("name", name)
	b.kstr("arguments", args)
	w.emit("response.function_call_arguments.done")
}

// finishResponsesCall emits output_item.done for a function_call item and
// records the finished item.
func (w *sseWriter) finishResponsesCall(id string, idx int, cid, name, args string) {
	item := responsesCallItemWithID(id, cid, name, args, "completed")
	w.responsesItemEvent("response.output_item.done", idx, item)
	w.items = append(w.items, item)
}

// end emits the finish, usage and terminal events.
func (w *sseWriter) end(f Finish, u Usage) {
	switch w.p {
	case Chat:
		b := w.event("")
		b.raw(`,"choices":[{"index":0,"delta":{},"logprobs":null`)
		b.kstr("finish_reason", finishWire(Chat, f))
		b.raw(`}]`)
		w.emit("")
		if w.chatUsage {
			b := w.event("")
			b.raw(`,"choices":[],"usage":`)
			b.chatUsage(u)
			w.emit("")
		}
		w.buf.raw("data: [DONE]\n\n")
	case Responses:
		typ := "response.completed"
		if finishWire(Responses, f) != "" {
			typ = "response.incomplete"
		}
		b := w.event(typ)
		b.key("response")
		b.responsesObject(responsesMeta{w.id, w.model, w.created}, f, w.items, u, true)
		w.emit(typ)
	case Messages:
		b := w.event("message_delta")
		b.raw(`,"delta":{`)
		b.kstr("stop_reason", finishWire(Messages, f))
		b.raw(`,"stop_sequence":null},"usage":`)
		b.messagesUsage(u)
		w.emit("message_delta")
		w.event("message_stop")
		w.emit("message_stop")
	}
}
