package llm

import (
	"fmt"
	"strings"

	"github.com/tidwall/gjson"
)

// ItemKind says what one Turn.Items entry is.
type ItemKind string

const (
	// ItemText marks where the turn's text goes (one text block/item).
	ItemText ItemKind = "text"
	// ItemToolCall marks where the turn's next tool call goes.
	ItemToolCall ItemKind = "tool_call"
	// ItemRaw is provider content kept verbatim: a Messages content block
	// other than text and tool_use (thinking with its signature,
	// redacted_thinking, server_tool_use, unknown types) or a Responses
	// output item other than message and function_call (reasoning with its
	// encrypted_content, unknown types). Raw is its JSON text.
	ItemRaw ItemKind = "raw"
	// ItemFields holds Chat's extra members of the assistant message
	// (reasoning_content, provider extras). Raw is a JSON object of them.
	ItemFields ItemKind = "fields"
)

// Item is one entry of a turn's provider content, in the provider's order
// (docs/architecture.md: provider content is replayed verbatim). Text and tool calls
// stay in Turn.Text and Turn.ToolCalls; ItemText and ItemToolCall only
// record their position relative to the raw items. Raw is a JSON string on
// the host API, so its bytes survive any JSON round trip.
type Item struct {
	Kind ItemKind `json:"kind"`
	Raw  string   `json:"raw,omitempty"`
}

// HasProviderItems reports whether t carries raw provider content (an
// ItemRaw or ItemFields entry).
func (t *Turn) HasProviderItems() bool {
	return hasProviderItems(t.Items)
}

func hasProviderItems(items []Item) bool {
	for _, it := range items {
		if it.Kind == ItemRaw || it.Kind == ItemFields {
			return true
		}
	}
	return false
}

// isObject reports whether s is one valid JSON object.
func isObject(s string) bool {
	return gjson.Valid(s) && gjson.Parse(s).IsObject()
}

// CheckItems reports the first of t.Items whose Raw is not what its kind
// needs (a JSON object for ItemRaw and ItemFields) or whose kind is unknown.
func (t *Turn) CheckItems() error { return checkItems(t.Items) }

func checkItems(items []Item) error {
	for i, it := range items {
		switch it.Kind {
		case ItemText, ItemToolCall:
		case ItemRaw, ItemFields:
			if !isObject(it.Raw) {
				return fmt.Errorf("item %d (%s) is not a JSON object", i, it.Kind)
			}
		default:
			return fmt.Errorf("item %d has unknown kind %q", i, it.Kind)
		}
	}
	return nil
}

// itemList accumulates a turn's items while parsing; markers for text are
// recorded once (the renderers keep one text block).
type itemList struct {
	items []Item
	text  bool
}

func (l *itemList) addText() {
	if !l.text {
		l.text = true
		l.items = append(l.items, Item{Kind: ItemText})
	}
}

func (l *itemList) addCall() { l.items = append(l.items, Item{Kind: ItemToolCall}) }

func (l *itemList) addRaw(raw string) { l.items = append(l.items, Item{Kind: ItemRaw, Raw: raw}) }

// result returns the items, or nil when there is no provider content: a
// turn of only text and tool calls needs no layout.
func (l *itemList) result() []Item { return compactItems(l.items) }

// compactItems drops what carries no information: everything when there is
// no provider content, the position markers when nothing is positional
// (only ItemFields).
func compactItems(items []Item) []Item {
	if !hasProviderItems(items) {
		return nil
	}
	for _, it := range items {
		if it.Kind == ItemRaw {
			return items
		}
	}
	out := items[:0:0]
	for _, it := range items {
		if it.Kind == ItemFields {
			out = append(out, it)
		}
	}
	return out
}

// segment is one piece of an assistant message in render order.
type segment struct {
	kind ItemKind // ItemText, ItemToolCall or ItemRaw
	call int      // ItemToolCall: index into Turn.ToolCalls
	raw  string   // ItemRaw
}

// segments lays out t's content in the provider's order: raw items where
// they were, the text (when not empty) at the first text marker, each tool
// call at the next tool-call marker. Text without a marker goes before the
// first tool call, else after the raw items; calls without a marker go
// last. ItemFields are not positional and are skipped.
func (t *Turn) segments() []segment {
	out := make([]segment, 0, len(t.Items)+len(t.ToolCalls)+1)
	textDone := t.Text == ""
	textMarker := false
	for _, it := range t.Items {
		if it.Kind == ItemText {
			textMarker = true
			break
		}
	}
	next := 0
	for _, it := range t.Items {
		switch it.Kind {
		case ItemText:
			if !textDone {
				out = append(out, segment{kind: ItemText})
				textDone = true
			}
		case ItemToolCall:
			if next >= len(t.ToolCalls) {
				continue
			}
			if !textDone && !textMarker {
				out = append(out, segment{kind: ItemText})
				textDone = true
			}
			out = append(out, segment{kind: ItemToolCall, call: next})
			next++
		case ItemRaw:
			if isObject(it.Raw) { // never render broken JSON
				out = append(out, segment{kind: ItemRaw, raw: it.Raw})
			}
		}
	}
	if !textDone {
		out = append(out, segment{kind: ItemText})
	}
	for ; next < len(t.ToolCalls); next++ {
		out = append(out, segment{kind: ItemToolCall, call: next})
	}
	return out
}

// fields returns the members of t's ItemFields entries as one JSON object
// body (without braces), "" when there are none.
func (t *Turn) fields() string {
	var obj string
	for _, it := range t.Items {
		if it.Kind == ItemFields {
			obj = mergeFields(obj, it.Raw)
		}
	}
	if len(obj) < 2 {
		return ""
	}
	return obj[1 : len(obj)-1]
}

// mergeFields combines two JSON objects of message members: a member in
// both is the concatenation when both values are strings (the reasoning
// text of two turns), else b's value. A side that is not an object is
// ignored.
func mergeFields(a, b string) string {
	type member struct{ key, val string } // raw JSON
	var ms []member
	for _, obj := range []string{a, b} {
		if !gjson.Valid(obj) {
			continue
		}
		r := gjson.Parse(obj)
		if !r.IsObject() {
			continue
		}
		r.ForEach(func(k, v gjson.Result) bool {
			for i := range ms {
				if gjson.Parse(ms[i].key).Str != k.Str {
					continue
				}
				if prev := gjson.Parse(ms[i].val); prev.Type == gjson.String && v.Type == gjson.String {
					ms[i].val = string(appendQuoted(nil, prev.Str+v.Str))
				} else {
					ms[i].val = v.Raw
				}
				return true
			}
			ms = append(ms, member{k.Raw, v.Raw})
			return true
		})
	}
	if len(ms) == 0 {
		return ""
	}
	var sb strings.Builder
	sb.WriteByte('{')
	for i, m := range ms {
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(m.key)
		sb.WriteByte(':')
		sb.WriteString(m.val)
	}
	sb.WriteByte('}')
	return sb.String()
}

// appendQuoted appends s as a JSON string.
func appendQuoted(b []byte, s string) []byte {
	w := wireBuf(b)
	w.str(s)
	return w
}

// mergeItems lays out the items of a merged turn (Merge): the original's
// provider content in its place and its text marker (the merged text stays
// one block there), then the continuation's provider content and tool-call
// markers. A side without items stands for "text, then its calls".
func mergeItems(orig, cont *Turn) []Item {
	if !orig.HasProviderItems() && !cont.HasProviderItems() {
		return nil
	}
	var out []Item
	text := false
	for _, it := range implicitItems(orig) {
		if it.Kind == ItemToolCall {
			continue // the merged turn's calls are the continuation's
		}
		if it.Kind == ItemText {
			text = true
		}
		out = append(out, it)
	}
	for _, it := range implicitItems(cont) {
		if it.Kind == ItemText {
			if text {
				continue
			}
			text = true
		}
		out = append(out, it)
	}
	return compactItems(normalizeFields(out))
}

// implicitItems returns t.Items, or the layout a turn without items has.
func implicitItems(t *Turn) []Item {
	if len(t.Items) > 0 {
		return t.Items
	}
	var out []Item
	if t.Text != "" {
		out = append(out, Item{Kind: ItemText})
	}
	for range t.ToolCalls {
		out = append(out, Item{Kind: ItemToolCall})
	}
	return out
}

// normalizeFields folds every ItemFields entry into one, placed first.
func normalizeFields(items []Item) []Item {
	n := 0
	var obj string
	for _, it := range items {
		if it.Kind == ItemFields {
			n++
			obj = mergeFields(obj, it.Raw)
		}
	}
	if n == 0 {
		return items
	}
	out := make([]Item, 0, len(items)-n+1)
	if obj != "" {
		out = append(out, Item{Kind: ItemFields, Raw: obj})
	}
	for _, it := range items {
		if it.Kind != ItemFields {
			out = append(out, it)
		}
	}
	return out
}
