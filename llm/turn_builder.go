package llm

import (
	"slices"
	"strings"
	"unsafe"

	"github.com/chimehq/chime/llm/internal/reqscan"

	"github.com/tidwall/gjson"
	"github.com/tidwall/sjson"
)

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

	// Provider content other than text and tool calls (docs/architecture.md).
	items  itemList
	blocks map[int]*rawBlock // Messages: content block index -> block in progress
	fields []streamField     // Chat: extra delta members, in first-seen order
}

// rawBlock is a Messages content block other than text and tool_use, as
// content_block_start gave it plus what its deltas added.
type rawBlock struct {
	pos       int    // its entry in items
	start     string // the content_block of content_block_start
	appended  []streamField
	input     []byte   // input_json_delta pieces (server_tool_use)
	citations []string // citations_delta citations
}

// streamField is one member accumulated from deltas: string pieces are
// concatenated; any other value replaces the previous one.
type streamField struct {
	name string
	str  []byte // the concatenated string pieces
	raw  string // a non-string value; "" while the value is a string
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
		b.items.addText()
	}
	b.addPart(ev)
	for _, c := range ev.Calls {
		if blk := b.blocks[c.Index]; blk != nil && ev.Type == "content_block_delta" {
			blk.input = append(blk.input, c.Arguments...) // server_tool_use input
			continue
		}
		pos, ok := b.byIndex[c.Index]
		if !ok || (ev.Kind.Has(KindToolCallStart) && c.ID != "" && b.calls[pos].ID != "" && b.calls[pos].ID != c.ID) {
			if b.byIndex == nil {
				b.byIndex = make(map[int]int)
			}
			pos = len(b.calls)
			b.byIndex[c.Index] = pos
			b.calls = append(b.calls, ToolCall{})
			b.args = append(b.args, nil)
			b.items.addCall()
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

// Finish returns the finish seen so far (the zero Finish if none).
func (b *TurnBuilder) Finish() Finish { return b.finish }

// CountCalls returns how many of the calls started so far are named one of
// names: Turn().ServerCalls(names) counted without building the turn, which
// for an answer that thinks renders each thinking block as JSON.
func (b *TurnBuilder) CountCalls(names []string) int {
	n := 0
	for _, c := range b.calls {
		if slices.Contains(names, c.Name) {
			n++
		}
	}
	return n
}

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
	t.Items = b.turnItems()
	return t
}

// addPart folds an event's provider content into the items (docs/architecture.md:
// thinking and signature deltas, whole redacted_thinking blocks, Responses
// reasoning items, Chat reasoning_content).
func (b *TurnBuilder) addPart(ev Event) {
	switch ev.PartKind {
	case PartBlockStart:
		if b.blocks == nil {
			b.blocks = make(map[int]*rawBlock)
		}
		b.blocks[ev.Index] = &rawBlock{pos: len(b.items.items), start: ev.Part}
		b.items.addRaw(ev.Part)
	case PartBlockDelta:
		blk := b.blocks[ev.Index]
		if blk == nil {
			return // a delta of a text or tool_use block (citations, …), or of no block
		}
		if key, val, ok := plainDelta(ev.Part); ok {
			accumulateString(&blk.appended, key, val)
			return
		}
		blk.addDelta(ev.Part)
	case PartItemDone:
		b.items.addRaw(ev.Part)
	case PartFields:
		gjson.Parse(ev.Part).ForEach(func(k, v gjson.Result) bool {
			accumulate(&b.fields, k.String(), v)
			return true
		})
	}
}

// addDelta folds a block delta into blk: a citation, or each string
// member but the type appended to the member of that name.
func (blk *rawBlock) addDelta(part string) {
	d := gjson.Parse(part)
	if c := d.Get("citation"); d.Get("type").String() == "citations_delta" && c.Exists() {
		blk.citations = append(blk.citations, c.Raw)
		return
	}
	d.ForEach(func(k, v gjson.Result) bool {
		if k.Str != "type" && v.Type == gjson.String && plainKey(k.Str) {
			accumulate(&blk.appended, k.Str, v)
		}
		return true
	})
}

// plainDelta reads a block delta laid out as the Messages API sends a
// thinking or signature delta, {"type":"<t>","<key>":"<string>"} with <t>
// not citations_delta and <key> a plainKey other than type, as addDelta
// would: the key and the string's text. ok is false for anything else.
// part is valid JSON, as the classifier leaves a delta.
// Most of a thinking answer's events are these; addDelta read each with
// three gjson passes, several times the classifier's cost in the guest.
func plainDelta(part string) (key, val string, ok bool) {
	const head = `{"type":"`
	if len(part) < len(head)+8 || part[:len(head)] != head || part[len(part)-2:] != `"}` {
		return "", "", false
	}
	rest := part[len(head):]
	te := strings.IndexByte(rest, '"')
	if te < 0 || strings.IndexByte(rest[:te], '\\') >= 0 || rest[:te] == "citations_delta" {
		return "", "", false
	}
	rest = rest[te+1:]
	if !strings.HasPrefix(rest, `,"`) {
		return "", "", false
	}
	rest = rest[2:]
	ke := strings.IndexByte(rest, '"')
	if ke < 0 || !plainKey(rest[:ke]) || rest[:ke] == "type" || !strings.HasPrefix(rest[ke:], `":"`) {
		return "", "", false
	}
	key, lit := rest[:ke], rest[ke+2:len(rest)-1]
	b := unsafe.Slice(unsafe.StringData(lit), len(lit))
	if reqscan.StringEnd(b, 0) != len(b) {
		return "", "", false
	}
	return key, literalText(b), true
}

// accumulate adds v to the field name of fs: strings concatenate, other
// values replace.
func accumulate(fs *[]streamField, name string, v gjson.Result) {
	if v.Type == gjson.String {
		accumulateString(fs, name, v.Str)
		return
	}
	f := fieldNamed(fs, name)
	f.str = f.str[:0]
	f.raw = v.Raw
}

// accumulateString appends s to the string field name of fs.
func accumulateString(fs *[]streamField, name, s string) {
	f := fieldNamed(fs, name)
	if f.raw != "" {
		f.raw = ""
		f.str = f.str[:0]
	}
	f.str = append(f.str, s...)
}

// fieldNamed returns the field name of fs, added when missing.
func fieldNamed(fs *[]streamField, name string) *streamField {
	for i := range *fs {
		if (*fs)[i].name == name {
			return &(*fs)[i]
		}
	}
	*fs = append(*fs, streamField{name: name})
	return &(*fs)[len(*fs)-1]
}

// plainKey reports whether k can be used as an sjson path as is.
func plainKey(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// turnItems returns the items with every raw block completed by its deltas.
func (b *TurnBuilder) turnItems() []Item {
	if len(b.fields) == 0 && !hasProviderItems(b.items.items) {
		return nil
	}
	items := make([]Item, 0, len(b.items.items)+1)
	if len(b.fields) > 0 {
		items = append(items, Item{Kind: ItemFields, Raw: fieldsObject(b.fields)})
	}
	base := len(items)
	items = append(items, b.items.items...)
	for _, blk := range b.blocks {
		items[base+blk.pos].Raw = blk.json()
	}
	return compactItems(items)
}

// json is the block as a non-streaming response would hold it: the start
// block with each streamed member set to its start value plus the deltas.
func (blk *rawBlock) json() string {
	out := blk.start
	for i := range blk.appended {
		f := &blk.appended[i]
		prev := gjson.Get(out, f.name)
		val := string(f.str)
		if prev.Type == gjson.String {
			val = prev.Str + val
		}
		// SetRaw with the package's own quoting: sjson would escape <, > and &.
		if s, err := sjson.SetRaw(out, f.name, string(appendQuoted(nil, val))); err == nil {
			out = s
		}
	}
	if len(blk.input) > 0 && gjson.ValidBytes(blk.input) {
		if s, err := sjson.SetRaw(out, "input", string(blk.input)); err == nil {
			out = s
		}
	}
	if len(blk.citations) > 0 {
		var all []string
		gjson.Get(out, "citations").ForEach(func(_, c gjson.Result) bool {
			all = append(all, c.Raw)
			return true
		})
		all = append(all, blk.citations...)
		if s, err := sjson.SetRaw(out, "citations", "["+strings.Join(all, ",")+"]"); err == nil {
			out = s
		}
	}
	return out
}

// fieldsObject renders accumulated fields as one JSON object.
func fieldsObject(fs []streamField) string {
	b := []byte{'{'}
	for i := range fs {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendQuoted(b, fs[i].name)
		b = append(b, ':')
		if fs[i].raw != "" {
			b = append(b, fs[i].raw...)
		} else {
			b = appendQuoted(b, string(fs[i].str))
		}
	}
	return string(append(b, '}'))
}
