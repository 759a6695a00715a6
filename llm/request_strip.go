package llm

import (
	"strings"

	"github.com/chimehq/chime/llm/internal/reqscan"
)

// StrippedPlaceholder replaces a Messages user turn whose only text was
// directives. Anthropic rejects empty and whitespace-only text, so an
// emptied turn would fail every later request that carries it in history.
const StrippedPlaceholder = "(chime directive)"

// Directives returns the directives typed in the user input that is new
// in this request (docs/directives.md; see FirstNewUserMessage): every tag of every
// user turn after the last model-produced item, in order, including
// Unknown and malformed ones, each with its Position. Tags in older turns
// are stripped but not returned. It reads the original body, so it answers
// the same before and after StripDirectives.
func (r *Request) Directives() []Directive {
	r.scan()
	return r.dirs
}

// StripDirectives removes every `<**…**>` tag from all user text (docs/directives.md)
// and returns how many it removed. User text is a user message's string
// content or its text parts (Chat "text", Responses "input_text",
// Messages "text" blocks), and a Responses string input. Tool results,
// system prompts and assistant text are left alone.
//
// Only edited strings are re-encoded. In Messages, a text block left
// blank is dropped when the turn has other content, and a turn left with
// no content gets StrippedPlaceholder. Calling it again returns 0.
func (r *Request) StripDirectives() int {
	r.scan()
	if r.stripped {
		return 0
	}
	r.stripped = true
	for _, e := range r.strip {
		r.addEdit(e)
	}
	r.strip = r.strip[:0]
	return r.removed
}

// part is one element of a user message's content: a text part with its
// string span, or any other part (text.s < 0).
type part struct {
	elem    span
	text    span
	changed bool
	newText string
}

// scan finds directives, new user turns and their positions, and plans
// the strip edits, in one pass.
func (r *Request) scan() {
	if r.scanned {
		return
	}
	r.scanned = true
	r.firstNew = -1
	textType := "text"
	if r.proto == Responses {
		textType = "input_text"
	}
	start := r.newInputStart()
	parts := r.partBuf[:0]
	defer func() { r.partBuf = parts[:0] }()
	if !r.tagHint {
		// No string can hold a tag: nothing to read or strip, and only
		// the first new user turn is left to find.
		for i := start; i < len(r.msgs); i++ {
			m := r.msgs[i]
			if !m.user || !m.content.ok() {
				continue
			}
			var ok bool
			if parts, ok = r.userContentParts(m, textType, parts[:0]); ok && userTurn(parts) {
				r.firstNew = i
				return
			}
		}
		return
	}
	turns := 0 // user turns before the current message
	for i, m := range r.msgs {
		if !m.user || !m.content.ok() {
			continue
		}
		var ok bool
		if parts, ok = r.userContentParts(m, textType, parts[:0]); !ok || !userTurn(parts) {
			continue
		}
		position := turns
		turns++
		isNew := i >= start
		if isNew && r.firstNew < 0 {
			r.firstNew = i
		}
		n := 0
		for j := range parts {
			p := &parts[j]
			if !p.text.ok() || !reqscan.MayHoldTag(r.body[p.text.s:p.text.e]) {
				continue
			}
			text, ok := reqscan.Unquote(r.body[p.text.s:p.text.e])
			if !ok || !strings.Contains(text, tagOpen) {
				continue
			}
			out, found, removed := scanDirectives(text, isNew)
			if removed == 0 {
				continue
			}
			p.changed, p.newText = true, out
			for _, d := range found {
				d.Position = position
				r.dirs = append(r.dirs, d)
			}
			n += removed
		}
		if n == 0 {
			continue
		}
		r.removed += n
		r.planStrip(parts)
	}
}

// textOfPart returns the "text" span of a content part whose "type" is
// textType, or noSpan.
func (r *Request) textOfPart(vs int, textType string) span {
	b := r.body
	if b[vs] != '{' {
		return noSpan
	}
	isText, text := false, noSpan
	reqscan.Members(b, vs, func(key []byte, s, e int) bool {
		switch {
		case reqscan.KeyIs(key, "type"):
			isText = stringIs(b[s:e], textType)
		case reqscan.KeyIs(key, "text"):
			text = noSpan
			if b[s] == '"' {
				text = span{s, e}
			}
		}
		return true
	})
	if !isText {
		return noSpan
	}
	return text
}

// planStrip turns one message's changed parts into edits.
func (r *Request) planStrip(parts []part) {
	replace := func(p *part, text string, placeholder bool) {
		r.strip = append(r.strip, edit{start: p.text.s, end: p.text.e,
			repl: reqscan.AppendQuote(nil, text), placeholder: placeholder})
	}
	if r.proto != Messages {
		for i := range parts {
			if parts[i].changed {
				replace(&parts[i], parts[i].newText, false)
			}
		}
		return
	}
	blank := func(p *part) bool { return p.changed && strings.TrimSpace(p.newText) == "" }
	keep := -1 // the part that stays when every part would go
	survivors := 0
	for i := range parts {
		if !blank(&parts[i]) {
			survivors++
		} else if keep < 0 {
			keep = i
		}
	}
	if survivors > 0 {
		keep = -1
	}
	firstKept := -1
	for i := range parts {
		p := &parts[i]
		switch {
		case i == keep:
			replace(p, StrippedPlaceholder, true)
		case blank(p):
			// Drop the element with one adjoining comma: the one before it
			// if an element is kept earlier, else the one after it.
			if firstKept >= 0 {
				r.strip = append(r.strip, edit{start: parts[i-1].elem.e, end: p.elem.e})
			} else {
				r.strip = append(r.strip, edit{start: p.elem.s, end: parts[i+1].elem.s})
			}
			continue
		case p.changed:
			replace(p, p.newText, false)
		}
		if firstKept < 0 {
			firstKept = i
		}
	}
}
