package llm

import (
	"bytes"
	"slices"
	"unsafe"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// classifyState is what a reader remembers across events to give each event
// its full meaning: whether the turn has started, the usage so far and
// (Messages) which content blocks are text, since a block stop names only
// its index.
type classifyState struct {
	started    bool
	usage      Usage
	textBlocks []int
}

// classify fills ev's canonical meaning from its Data. Data that is not JSON
// leaves the event KindOther, to be forwarded untouched.
func (s *classifyState) classify(p Protocol, ev *Event) {
	if p == Chat && bytes.Equal(bytes.TrimSpace(ev.Data), []byte("[DONE]")) {
		ev.Type = "[DONE]"
		ev.Kind = KindTerminal
		return
	}
	if p == Messages && (messagesTextDelta(ev) || s.messagesFixed(ev)) {
		return
	}
	if p == Chat && s.started && chatTextDelta(ev) {
		return
	}
	if p == Responses && responsesTextDelta(ev) {
		return
	}
	s.general(p, ev)
}

// general is classify for any event: validate, then read the fields.
func (s *classifyState) general(p Protocol, ev *Event) {
	if !gjson.ValidBytes(ev.Data) {
		ev.Type = ev.Name
		return
	}
	root := gjson.Parse(frozenString(ev.Data))
	if !root.IsObject() {
		ev.Type = ev.Name
		return
	}
	switch p {
	case Chat:
		s.chat(root, ev)
	case Responses:
		s.responses(root, ev)
	case Messages:
		s.messages(root, ev)
	default:
		ev.Type = ev.Name
	}
}

// Messages' text delta exactly as the API writes it. Most events of a
// streamed answer are these; reading them with gjson (validate, then five
// lookups from the start) cost the wasm guest about 10 µs each.
const (
	textDeltaHead = `{"type":"content_block_delta","index":`
	textDeltaMid  = `,"delta":{"type":"text_delta","text":`
	textDeltaTail = `}}`
)

// messagesTextDelta classifies ev as general would when its data is a
// text delta laid out byte for byte as the Messages API sends it
// (textDeltaHead, a small index, textDeltaMid, a string, textDeltaTail);
// it reports false, leaving ev alone, for anything else.
func messagesTextDelta(ev *Event) bool {
	d := ev.Data
	index, s, ok := indexedHead(d, textDeltaHead, textDeltaMid)
	if !ok || s >= len(d) || d[s] != '"' {
		return false
	}
	e := reqscan.StringEnd(d, s)
	if e < 0 || string(d[e:]) != textDeltaTail || !gjson.ValidBytes(d[s:e]) {
		return false
	}
	lit := d[s:e]
	var text string
	if bytes.IndexByte(lit, '\\') >= 0 {
		text = gjson.ParseBytes(lit).String()
	} else {
		text = frozenString(lit[1 : len(lit)-1])
	}
	ev.Type, ev.Index = "content_block_delta", index
	if text != "" {
		ev.Kind |= KindTextDelta
		ev.Text = text
	}
	return true
}

// indexedHead reads the start of d laid out as head, a small index, then
// mid: the index and where what follows mid begins; ok false otherwise.
func indexedHead(d []byte, head, mid string) (index, rest int, ok bool) {
	if !bytes.HasPrefix(d, []byte(head)) {
		return 0, 0, false
	}
	index, j, ok := smallIndex(d, len(head))
	if !ok || !bytes.HasPrefix(d[j:], []byte(mid)) {
		return 0, 0, false
	}
	return index, j + len(mid), true
}

// smallIndex reads the index at d[i:] as the Messages API writes it: up
// to nine digits, no leading zero. j is where it ends.
func smallIndex(d []byte, i int) (index, j int, ok bool) {
	j = i
	for j < len(d) && j-i < 9 && d[j] >= '0' && d[j] <= '9' {
		index = index*10 + int(d[j]-'0')
		j++
	}
	return index, j, j > i && (d[i] != '0' || j == i+1)
}

// The other Messages events whose layout the API fixes: a block's end,
// the message's end, a keep-alive, and the deltas of tool arguments,
// thinking and signatures (most of a streamed tool call or thinking
// block). Read by gjson, each cost the wasm guest about 9 µs.
const (
	blockStopHead  = `{"type":"content_block_stop","index":`
	deltaKey       = `,"delta":`
	deltaTypeHead  = `{"type":"`
	argsDeltaHead  = `{"type":"input_json_delta","partial_json":`
	messageStopRaw = `{"type":"message_stop"}`
	pingRaw        = `{"type":"ping"}`
	blockStartHead = `{"type":"content_block_start","index":`
	blockKey       = `,"content_block":`
	textBlockHead  = `{"type":"text","text":`
	toolBlockHead  = `{"type":"tool_use","id":`
	toolBlockName  = `,"name":`
	toolBlockTail  = `,"input":{}}`
)

// messagesFixed classifies ev as general would when its data is laid out
// byte for byte as the Messages API sends message_stop, ping,
// content_block_stop or a content_block_delta other than text (whose
// delta object, validated here, opens with its type as a plain string);
// it reports false, leaving ev alone, for anything else.
func (s *classifyState) messagesFixed(ev *Event) bool {
	d := ev.Data
	switch string(d) {
	case messageStopRaw:
		ev.Type = "message_stop"
		ev.Kind |= KindTerminal
		return true
	case pingRaw:
		ev.Type = "ping"
		return true
	}
	if bytes.HasPrefix(d, []byte(blockStopHead)) {
		index, j, ok := smallIndex(d, len(blockStopHead))
		if !ok || string(d[j:]) != "}" {
			return false
		}
		ev.Type, ev.Index = "content_block_stop", index
		if slices.Contains(s.textBlocks, index) {
			ev.Kind |= KindTextEnd
		}
		return true
	}
	if bytes.HasPrefix(d, []byte(blockStartHead)) {
		return s.messagesBlockStart(ev)
	}
	if bytes.HasPrefix(d, []byte(messageStartHead)) || bytes.HasPrefix(d, []byte(messageDeltaHead)) {
		return s.messagesEnvelope(ev)
	}
	index, o, ok := indexedHead(d, textDeltaHead, deltaKey)
	if !ok || len(d) < o+len(deltaTypeHead)+2 {
		return false
	}
	delta := d[o : len(d)-1]
	if d[len(d)-1] != '}' || !bytes.HasPrefix(delta, []byte(deltaTypeHead)) || delta[len(delta)-1] != '}' {
		return false
	}
	te := reqscan.StringEnd(delta, len(deltaTypeHead)-1)
	if te < 0 || bytes.IndexByte(delta[:te], '\\') >= 0 || !reqscan.Valid(delta) {
		return false
	}
	switch typ := string(delta[len(deltaTypeHead) : te-1]); typ {
	case "text_delta":
		return false // messagesTextDelta's, or general's when not laid out as the API does
	case "input_json_delta":
		if !bytes.HasPrefix(delta, []byte(argsDeltaHead)) {
			return false
		}
		lit := delta[len(argsDeltaHead) : len(delta)-1]
		if len(lit) < 2 || lit[0] != '"' || reqscan.StringEnd(lit, 0) != len(lit) {
			return false
		}
		if a := literalText(lit); a != "" {
			ev.Kind |= KindToolCallArgs
			ev.Calls = []CallDelta{{Index: index, Arguments: a}}
		}
	default:
		ev.PartKind, ev.Part = PartBlockDelta, frozenString(delta)
	}
	ev.Type, ev.Index = "content_block_delta", index
	return true
}

// messagesBlockStart is messagesFixed for content_block_start: a text
// block opened empty, a tool_use block with its id, name and an empty
// input, or any other block (thinking, …) whose object opens with its
// type as a plain string.
func (s *classifyState) messagesBlockStart(ev *Event) bool {
	d := ev.Data
	index, o, ok := indexedHead(d, blockStartHead, blockKey)
	if !ok {
		return false
	}
	if len(d) < o+len(deltaTypeHead)+2 || d[len(d)-1] != '}' {
		return false
	}
	block := d[o : len(d)-1]
	if !bytes.HasPrefix(block, []byte(deltaTypeHead)) || block[len(block)-1] != '}' {
		return false
	}
	te := reqscan.StringEnd(block, len(deltaTypeHead)-1)
	if te < 0 || bytes.IndexByte(block[:te], '\\') >= 0 || !reqscan.Valid(block) {
		return false
	}
	switch string(block[len(deltaTypeHead) : te-1]) {
	case "text":
		lit, ok := onlyString(block, textBlockHead, "}")
		if !ok {
			return false
		}
		if !slices.Contains(s.textBlocks, index) {
			s.textBlocks = append(s.textBlocks, index)
		}
		if t := literalText(lit); t != "" {
			ev.Kind |= KindTextDelta
			ev.Text = t
		}
	case "tool_use":
		if !bytes.HasPrefix(block, []byte(toolBlockHead)) {
			return false
		}
		rest := block[len(toolBlockHead):]
		ie := reqscan.StringEnd(rest, 0)
		if len(rest) == 0 || rest[0] != '"' || ie < 0 {
			return false
		}
		name, ok := onlyString(rest[ie:], toolBlockName, toolBlockTail)
		if !ok {
			return false
		}
		ev.Kind |= KindToolCallStart
		ev.Calls = []CallDelta{{Index: index, ID: literalText(rest[:ie]), Name: literalText(name)}}
	default:
		ev.PartKind, ev.Part = PartBlockStart, frozenString(block)
	}
	ev.Type, ev.Index = "content_block_start", index
	return true
}

// onlyString returns the JSON string literal b holds between head and
// tail, and whether b is exactly that.
func onlyString(b []byte, head, tail string) ([]byte, bool) {
	if len(b) < len(head)+len(tail) || !bytes.HasPrefix(b, []byte(head)) || !bytes.HasSuffix(b, []byte(tail)) {
		return nil, false
	}
	lit := b[len(head) : len(b)-len(tail)]
	if len(lit) < 2 || lit[0] != '"' || reqscan.StringEnd(lit, 0) != len(lit) {
		return nil, false
	}
	return lit, true
}

// The members a Chat text-delta chunk may have (chatTextDelta), as bits
// of a set, so that a duplicate is seen.
const (
	ccID = 1 << iota
	ccObject
	ccCreated
	ccModel
	ccServiceTier
	ccFingerprint
	ccChoices
	ccUsage
	ccObfuscation
	ccIndex
	ccDelta
	ccLogprobs
	ccFinish
)

var chatChunkMembers = map[string]uint16{
	"id": ccID, "object": ccObject, "created": ccCreated, "model": ccModel, "service_tier": ccServiceTier,
	"system_fingerprint": ccFingerprint, "choices": ccChoices, "usage": ccUsage, "obfuscation": ccObfuscation,
	"index": ccIndex, "delta": ccDelta, "logprobs": ccLogprobs, "finish_reason": ccFinish,
}

// chatTextDelta classifies ev as general would when its data is a Chat
// chunk of text after the first: top-level members among id, object,
// created, model, service_tier, system_fingerprint, usage (null) and
// obfuscation, and one choice of index 0 whose delta holds only content
// (a string), with logprobs and finish_reason null or absent. Those are
// most of a streamed answer's events, and general's validation and
// lookups cost the wasm guest about 12 µs each. It validates as it reads
// (reqscan) and reports false, leaving ev alone, for anything else.
func chatTextDelta(ev *Event) bool {
	d := ev.Data
	ck := reqscan.NewChecker(d)
	var seen uint16
	object, content := span{-1, -1}, span{-1, -1}
	// member checks one member name: a known one, not seen before, with
	// no escape (a key with one is left to general).
	member := func(key []byte) uint16 {
		bit := chatChunkMembers[string(key)]
		if bit == 0 || seen&bit != 0 {
			return 0
		}
		seen |= bit
		return bit
	}
	isNull := func(vs int) bool { return vs+4 <= len(d) && string(d[vs:vs+4]) == "null" }
	top := reqscan.SkipSpace(d, 0)
	end := ck.Members(top, func(key []byte, vs int) int {
		switch member(key) {
		case 0:
			return -1
		case ccObject:
			if vs >= len(d) || d[vs] != '"' {
				return -1
			}
			ve := ck.Value(vs, 1)
			object = span{vs, ve}
			return ve
		case ccUsage:
			if !isNull(vs) {
				return -1
			}
		case ccChoices:
			return chatOnlyChoice(ck, d, vs, member, isNull, &content)
		case ccIndex, ccDelta, ccLogprobs, ccFinish:
			return -1 // a choice's member at the top
		}
		return ck.Value(vs, 1)
	})
	if end < 0 || reqscan.SkipSpace(d, end) != len(d) || !object.ok() || !content.ok() {
		return false
	}
	ev.Type = literalText(d[object.s:object.e])
	ev.Index = 0
	if text := literalText(d[content.s:content.e]); text != "" {
		ev.Kind |= KindTextDelta
		ev.Text = text
	}
	return true
}

// chatOnlyChoice checks the choices array at vs of chatTextDelta: one
// choice, of index 0, whose delta is {"content": a string}; it sets
// content and returns the array's end, or -1.
func chatOnlyChoice(ck *reqscan.Checker, d []byte, vs int, member func([]byte) uint16, isNull func(int) bool, content *span) int {
	if vs >= len(d) || d[vs] != '[' {
		return -1
	}
	n := 0
	return reqscan.WalkElements(d, vs, func(es int) int {
		if n++; n > 1 {
			return -1
		}
		return ck.Members(es, func(key []byte, ms int) int {
			switch member(key) {
			case ccIndex:
				if ms >= len(d) || d[ms] != '0' {
					return -1
				}
				if me := ck.Value(ms, 3); me == ms+1 {
					return me
				}
				return -1
			case ccLogprobs, ccFinish:
				if !isNull(ms) {
					return -1
				}
				return ck.Value(ms, 3)
			case ccDelta:
				keys := 0
				return ck.Members(ms, func(key []byte, cs int) int {
					if keys++; keys > 1 || string(key) != "content" || cs >= len(d) || d[cs] != '"' {
						return -1
					}
					ce := ck.Value(cs, 4)
					*content = span{cs, ce}
					return ce
				})
			}
			return -1
		})
	})
}

// The members a Responses text delta may have (responsesTextDelta).
var responsesDeltaMembers = map[string]uint8{
	"type": 1 << 0, "sequence_number": 1 << 1, "item_id": 1 << 2, "output_index": 1 << 3,
	"content_index": 1 << 4, "delta": 1 << 5, "logprobs": 1 << 6, "obfuscation": 1 << 7,
}

// The type members of a text delta and of a function call's arguments
// delta, as sent.
const (
	responsesOutputTextDelta = `"response.output_text.delta"`
	responsesArgsDelta       = `"response.function_call_arguments.delta"`
)

// responsesTextDelta classifies ev as general would when its data is a
// Responses output_text delta, or a function call's arguments delta,
// with only the members the API sends (responsesDeltaMembers), the type
// written plainly, a small plain output_index and a string delta. It
// validates as it reads (reqscan) and reports false, leaving ev alone,
// for anything else.
func responsesTextDelta(ev *Event) bool {
	d := ev.Data
	ck := reqscan.NewChecker(d)
	var seen uint8
	typ, delta, index := "", span{-1, -1}, 0
	end := ck.Members(reqscan.SkipSpace(d, 0), func(key []byte, vs int) int {
		bit := responsesDeltaMembers[string(key)]
		if bit == 0 || seen&bit != 0 {
			return -1
		}
		seen |= bit
		switch string(key) {
		case "type":
			for _, t := range [...]string{responsesOutputTextDelta, responsesArgsDelta} {
				if bytes.HasPrefix(d[vs:], []byte(t)) {
					typ = t
					return vs + len(t)
				}
			}
			return -1
		case "output_index":
			j := vs
			for j < len(d) && j-vs < 9 && d[j] >= '0' && d[j] <= '9' {
				index = index*10 + int(d[j]-'0')
				j++
			}
			if j == vs || d[vs] == '0' && j > vs+1 || ck.Value(vs, 1) != j {
				return -1
			}
			return j
		case "delta":
			if vs >= len(d) || d[vs] != '"' {
				return -1
			}
			ve := ck.Value(vs, 1)
			delta = span{vs, ve}
			return ve
		}
		return ck.Value(vs, 1)
	})
	if end < 0 || reqscan.SkipSpace(d, end) != len(d) || typ == "" || !delta.ok() {
		return false
	}
	ev.Type = typ[1 : len(typ)-1]
	if seen&responsesDeltaMembers["output_index"] != 0 {
		ev.Index = index
	}
	text := literalText(d[delta.s:delta.e])
	switch {
	case text == "":
	case typ == responsesArgsDelta:
		ev.Kind |= KindToolCallArgs
		ev.Calls = []CallDelta{{Index: ev.Index, Arguments: text}}
	default:
		ev.Kind |= KindTextDelta
		ev.Text = text
	}
	return true
}

// literalText is the text of the JSON string literal lit, decoded as gjson
// decodes it; without escapes, the bytes themselves.
func literalText(lit []byte) string {
	if bytes.IndexByte(lit, '\\') >= 0 {
		return gjson.ParseBytes(lit).String()
	}
	return frozenString(lit[1 : len(lit)-1])
}

// setUsage records usage; in/out < 0 keep the previous value, so each usage
// event reports the cumulative total known so far.
func (s *classifyState) setUsage(ev *Event, in, out int) {
	if in >= 0 {
		s.usage.InputTokens = in
	}
	if out >= 0 {
		s.usage.OutputTokens = out
	}
	ev.Kind |= KindUsage
	ev.Usage = s.usage
}

func intOr(v gjson.Result, def int) int {
	if v.Type != gjson.Number {
		return def
	}
	return int(v.Int())
}

// members sets out[i] to the first member of obj named names[i] (zero
// when absent), in one pass over obj: a Get per name scans the object
// from its start each time, which the wasm guest paid on every streamed
// event (a Chat chunk took eight scans).
func members(obj gjson.Result, out []gjson.Result, names ...string) {
	if !obj.IsObject() {
		return
	}
	left := len(names)
	obj.ForEach(func(k, v gjson.Result) bool {
		for i, n := range names {
			if k.Str == n && !out[i].Exists() {
				out[i] = v
				left--
				break
			}
		}
		return left > 0
	})
}

// eachOf calls fn for each element v.Array() would return, until fn
// returns false, without building the slice.
func eachOf(v gjson.Result, fn func(gjson.Result) bool) {
	switch {
	case v.Type == gjson.Null:
	case v.IsArray():
		v.ForEach(func(_, e gjson.Result) bool { return fn(e) })
	default:
		fn(v)
	}
}

func (s *classifyState) chat(root gjson.Result, ev *Event) {
	var f [6]gjson.Result
	members(root, f[:], "object", "error", "id", "model", "choices", "usage")
	object, errv, id, model, choices, usage := f[0], f[1], f[2], f[3], f[4], f[5]
	ev.Type = object.String()
	if errv.Exists() {
		ev.Kind = KindError
		ev.ErrorMessage = errorText(errv)
		return
	}
	if !s.started {
		s.started = true
		ev.Kind |= KindStart
		ev.ID = id.String()
		ev.Model = model.String()
	}
	eachOf(choices, func(choice gjson.Result) bool {
		var c [3]gjson.Result
		members(choice, c[:], "index", "delta", "finish_reason")
		if c[0].Int() != 0 {
			return true // only the first choice is canonical (n>1 is not supported)
		}
		ev.Index = 0
		delta := c[1]
		var d [2]gjson.Result
		members(delta, d[:], "content", "tool_calls")
		if c := d[0]; c.Type == gjson.String && c.Str != "" {
			ev.Kind |= KindTextDelta
			ev.Text = c.Str
		}
		for _, tc := range d[1].Array() {
			cd := CallDelta{Index: int(tc.Get("index").Int()), ID: tc.Get("id").String()}
			fn := tc.Get("function")
			cd.Name = fn.Get("name").String()
			cd.Arguments = fn.Get("arguments").String()
			if cd.ID != "" || cd.Name != "" {
				ev.Kind |= KindToolCallStart
			}
			if cd.Arguments != "" {
				ev.Kind |= KindToolCallArgs
			}
			ev.Calls = append(ev.Calls, cd)
		}
		if extra := chatExtraFields(delta); extra != "" {
			ev.PartKind, ev.Part = PartFields, extra
		}
		if fr := c[2]; fr.Type == gjson.String && fr.Str != "" {
			ev.Kind |= KindFinish
			ev.Finish = Finish{Reason: classifyFinish(Chat, fr.Str), Raw: fr.Str}
		}
		return false
	})
	if usage.IsObject() {
		s.setUsage(ev, intOr(usage.Get("prompt_tokens"), -1), intOr(usage.Get("completion_tokens"), -1))
	}
}

func (s *classifyState) responses(root gjson.Result, ev *Event) {
	ev.Type = root.Get("type").String()
	if ev.Type == "" {
		ev.Type = ev.Name
	}
	if oi := root.Get("output_index"); oi.Type == gjson.Number {
		ev.Index = int(oi.Int())
	}
	switch ev.Type {
	case "response.created":
		if !s.started {
			s.started = true
			ev.Kind |= KindStart
			resp := root.Get("response")
			ev.ID = resp.Get("id").String()
			ev.Model = resp.Get("model").String()
		}
	case "response.output_item.added":
		item := root.Get("item")
		if item.Get("type").String() == "function_call" {
			cd := CallDelta{Index: ev.Index, ID: item.Get("call_id").String(), Name: item.Get("name").String(),
				Arguments: item.Get("arguments").String()}
			ev.Kind |= KindToolCallStart
			if cd.Arguments != "" {
				ev.Kind |= KindToolCallArgs
			}
			ev.Calls = []CallDelta{cd}
		}
	case "response.output_item.done":
		switch item := root.Get("item"); item.Get("type").String() {
		case "message":
			ev.Kind |= KindTextEnd
		case "function_call":
		default:
			if item.IsObject() {
				ev.PartKind, ev.Part = PartItemDone, item.Raw
			}
		}
	case "response.output_text.delta":
		if d := root.Get("delta").String(); d != "" {
			ev.Kind |= KindTextDelta
			ev.Text = d
		}
	case "response.function_call_arguments.delta":
		if d := root.Get("delta").String(); d != "" {
			ev.Kind |= KindToolCallArgs
			ev.Calls = []CallDelta{{Index: ev.Index, Arguments: d}}
		}
	case "response.output_text.done", "response.content_part.done":
		// Content parts exist only in message items.
		ev.Kind |= KindTextEnd
	case "response.completed", "response.incomplete", "response.failed":
		resp := root.Get("response")
		hasCalls := false
		for _, item := range resp.Get("output").Array() {
			if item.Get("type").String() == "function_call" {
				hasCalls = true
				break
			}
		}
		ev.Kind |= KindTerminal | KindFinish
		ev.Finish = responsesFinish(resp, hasCalls)
		if u := resp.Get("usage"); u.IsObject() {
			s.setUsage(ev, intOr(u.Get("input_tokens"), -1), intOr(u.Get("output_tokens"), -1))
		}
	case "error":
		ev.Kind |= KindError
		ev.ErrorMessage = errorText(root)
	}
}

func (s *classifyState) messages(root gjson.Result, ev *Event) {
	ev.Type = root.Get("type").String()
	if ev.Type == "" {
		ev.Type = ev.Name
	}
	if ix := root.Get("index"); ix.Type == gjson.Number {
		ev.Index = int(ix.Int())
	}
	switch ev.Type {
	case "message_start":
		msg := root.Get("message")
		if !s.started {
			s.started = true
			ev.Kind |= KindStart
			ev.ID = msg.Get("id").String()
			ev.Model = msg.Get("model").String()
		}
		if u := msg.Get("usage"); u.IsObject() {
			s.setUsage(ev, intOr(u.Get("input_tokens"), -1), intOr(u.Get("output_tokens"), -1))
		}
	case "content_block_start":
		block := root.Get("content_block")
		switch block.Get("type").String() {
		case "tool_use":
			cd := CallDelta{Index: ev.Index, ID: block.Get("id").String(), Name: block.Get("name").String()}
			// Streams send input {}; a proxy that sends the whole input up front is honoured.
			if in := block.Get("input"); in.IsObject() && len(in.Map()) > 0 {
				cd.Arguments = in.Raw
				ev.Kind |= KindToolCallArgs
			}
			ev.Kind |= KindToolCallStart
			ev.Calls = []CallDelta{cd}
		case "text":
			if !slices.Contains(s.textBlocks, ev.Index) {
				s.textBlocks = append(s.textBlocks, ev.Index)
			}
			if t := block.Get("text").String(); t != "" {
				ev.Kind |= KindTextDelta
				ev.Text = t
			}
		default:
			if block.IsObject() {
				ev.PartKind, ev.Part = PartBlockStart, block.Raw
			}
		}
	case "content_block_stop":
		if slices.Contains(s.textBlocks, ev.Index) {
			ev.Kind |= KindTextEnd
		}
	case "content_block_delta":
		delta := root.Get("delta")
		switch delta.Get("type").String() {
		case "text_delta":
			if t := delta.Get("text").String(); t != "" {
				ev.Kind |= KindTextDelta
				ev.Text = t
			}
		case "input_json_delta":
			if a := delta.Get("partial_json").String(); a != "" {
				ev.Kind |= KindToolCallArgs
				ev.Calls = []CallDelta{{Index: ev.Index, Arguments: a}}
			}
		default:
			if delta.IsObject() {
				ev.PartKind, ev.Part = PartBlockDelta, delta.Raw
			}
		}
	case "message_delta":
		if sr := root.Get("delta.stop_reason"); sr.Type == gjson.String {
			ev.Kind |= KindFinish
			ev.Finish = Finish{Reason: classifyFinish(Messages, sr.Str), Raw: sr.Str}
		}
		if u := root.Get("usage"); u.IsObject() {
			s.setUsage(ev, intOr(u.Get("input_tokens"), -1), intOr(u.Get("output_tokens"), -1))
		}
	case "message_stop":
		ev.Kind |= KindTerminal
	case "error":
		ev.Kind |= KindError
		ev.ErrorMessage = errorText(root.Get("error"))
	}
}

// errorText extracts a readable message from an error value or object.
func errorText(e gjson.Result) string {
	if m := e.Get("message"); m.Exists() {
		return m.String()
	}
	if e.Get("error.message").Exists() {
		return e.Get("error.message").String()
	}
	return e.String()
}

// frozenString is b as a string without a copy. b must never be written
// again: it is an event's bytes, which the StreamReader keeps in its
// arena (dispatch) or builds once, and which nothing writes. The strings
// gjson and the classifier cut from it then need no copies either.
func frozenString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }
