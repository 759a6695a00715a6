package llm

import (
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/chimehq/chime/llm/internal/reqscan"
	"github.com/tidwall/gjson"
)

// DirectiveKind names what a `<**…**>` tag asks for (docs/directives.md).
type DirectiveKind int

const (
	DirectiveUnknown          DirectiveKind = iota // any other tag; stripped and ignored
	DirectiveStopMessage                           // <**stopMessage:"text",N**>
	DirectiveStopMessageClear                      // <**stopMessage:clear**>
	DirectiveClock                                 // <**clock:{"dueAt":…,"task":…}**>
	DirectiveClockClear                            // <**clock:clear**>
	DirectiveRoute                                 // <**route:NAME**>
	DirectiveRouteClear                            // <**route:clear**>
	DirectiveHeartbeat                             // <**heartbeat:"30m"**>
	DirectiveHeartbeatOff                          // <**heartbeat:off**>
)

// String returns the directive's keyword form, e.g. "stopMessage:clear".
func (k DirectiveKind) String() string {
	switch k {
	case DirectiveStopMessage:
		return "stopMessage"
	case DirectiveStopMessageClear:
		return "stopMessage:clear"
	case DirectiveClock:
		return "clock"
	case DirectiveClockClear:
		return "clock:clear"
	case DirectiveRoute:
		return "route"
	case DirectiveRouteClear:
		return "route:clear"
	case DirectiveHeartbeat:
		return "heartbeat"
	case DirectiveHeartbeatOff:
		return "heartbeat:off"
	}
	return "unknown"
}

// DefaultStopMessageRepeats is N when `<**stopMessage:"text"**>` omits it.
const DefaultStopMessageRepeats = 10

// Directive is one parsed `<**…**>` tag. A tag of a known kind that is
// malformed keeps its Kind and carries Err; callers must check Err before
// acting on it. Every tag, good or bad, is stripped.
type Directive struct {
	Kind DirectiveKind
	// Raw is the whole tag as written, `<**` and `**>` included.
	Raw string
	// Text and MaxRepeats are set for DirectiveStopMessage.
	Text       string
	MaxRepeats int
	// Clock is set for DirectiveClock.
	Clock *ClockItem
	// Route is set for DirectiveRoute.
	Route string
	// Every is set for DirectiveHeartbeat: the interval, at least
	// MinHeartbeatEvery.
	Every time.Duration
	// Position is the number of user turns before the message holding the
	// tag (Request.Directives; docs/directives.md). It stays the same when the client
	// resends that message, so the host can apply a directive once.
	Position int
	Err      error
}

// ClockItem is one reminder, as in the clock tool's items[] (docs/clock-tool.md).
// The dueAt format is checked by the host, which owns time.
type ClockItem struct {
	DueAt     string `json:"dueAt"`
	Task      string `json:"task"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"` // a JSON text; "" when absent
	Repeat    string `json:"repeat"`
	MaxRuns   int    `json:"maxRuns"`
}

const (
	tagOpen  = "<**"
	tagClose = "**>"
)

// ParseDirectives returns every tag in text, in order (docs/directives.md).
func ParseDirectives(text string) []Directive {
	_, dirs, _ := scanDirectives(text, true)
	return dirs
}

// StripDirectives removes every complete tag from text and reports how
// many it removed. Text outside tags is left byte-identical.
//
// A tag is `<**` … `**>`. A quoted stopMessage text and a clock JSON
// object are scanned structurally, so `**>` inside them does not end the
// tag. An opening `<**` with no closing `**>` before the next `<**` is not
// a tag and stays in the text: it is more likely prose than a command, and
// swallowing text up to some later tag would lose the user's words.
// Removing a tag can join its neighbours into a new tag (`<*<**a**>*b**>`),
// so stripping repeats until nothing changes; the result never contains
// `<**` followed later by `**>`.
func StripDirectives(text string) (string, int) {
	out, _, n := scanDirectives(text, false)
	return out, n
}

// scanDirectives strips text to a fixpoint, optionally parsing each tag.
func scanDirectives(text string, parse bool) (string, []Directive, int) {
	var dirs []Directive
	total := 0
	for {
		out, n := stripOnce(text, func(tag string) {
			if parse {
				dirs = append(dirs, parseTag(tag))
			}
		})
		if n == 0 {
			return text, dirs, total
		}
		total += n
		text = out
	}
}

// maxStructured bounds how far a quoted text or clock JSON is scanned, so
// a body full of unclosed `<**stopMessage:"` stays linear-ish.
const maxStructured = 4096

// stripOnce makes one left-to-right pass, calling found for each tag.
func stripOnce(s string, found func(tag string)) (string, int) {
	var b strings.Builder
	t := tagScanner{s: s, close: -1}
	n, last, i := 0, 0, 0
	for {
		k := strings.Index(s[i:], tagOpen)
		if k < 0 {
			break
		}
		start := i + k
		end, next := t.end(start)
		if end < 0 {
			if next < 0 { // no closing marker anywhere after: nothing more to strip
				break
			}
			i = next // unterminated; resume at the next opener
			continue
		}
		if n == 0 {
			b.Grow(len(s))
		}
		b.WriteString(s[last:start])
		found(s[start:end])
		n++
		last, i = end, end
	}
	if n == 0 {
		return s, 0
	}
	b.WriteString(s[last:])
	return b.String(), n
}

// tagScanner finds tag ends, caching the next `**>` so that a run of
// unterminated openers costs linear time.
type tagScanner struct {
	s     string
	close int // the first `**>` after the last opener that searched, or -1
}

// end returns the index just after the tag opening at s[start], or -1 and
// the next opener to try (-1 when no `**>` follows at all).
func (t *tagScanner) end(start int) (end, next int) {
	s := t.s
	body := start + len(tagOpen)
	if e := structuredEnd(s, body); e >= 0 {
		if c := closeAfter(s, e); c >= 0 {
			return c, 0
		}
	}
	if t.close < body {
		c := strings.Index(s[body:], tagClose)
		if c < 0 {
			return -1, -1
		}
		t.close = body + c
	}
	if o := strings.Index(s[body:t.close], tagOpen); o >= 0 {
		return -1, body + o
	}
	return t.close + len(tagClose), 0
}

// closeAfter finds the `**>` that ends a tag whose structured value ended
// at i, provided no `<**` comes first.
func closeAfter(s string, i int) int {
	c := strings.Index(s[i:], tagClose)
	if c < 0 || strings.Contains(s[i:i+c], tagOpen) {
		return -1
	}
	return i + c + len(tagClose)
}

// structuredEnd returns the index after a quoted stopMessage text or a
// clock JSON object that starts the tag body at i, or -1.
func structuredEnd(s string, i int) int {
	head := s[i:min(len(s), i+32)]
	c := strings.IndexByte(head, ':')
	if c < 0 {
		return -1
	}
	name := strings.TrimSpace(head[:c])
	j := i + c + 1
	for j < len(s) && isSpaceByte(s[j]) {
		j++
	}
	if j >= len(s) {
		return -1
	}
	lim := s[:min(len(s), j+maxStructured)]
	switch {
	case strings.EqualFold(name, "stopMessage") && s[j] == '"':
		return quotedEnd(lim, j)
	case strings.EqualFold(name, "clock") && s[j] == '{':
		return objectEnd(lim, j)
	}
	return -1
}

func isSpaceByte(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// quotedEnd returns the index after the `"`-quoted text at s[i], where a
// backslash escapes the next byte, or -1.
func quotedEnd(s string, i int) int {
	for j := i + 1; j < len(s); j++ {
		switch s[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// objectEnd returns the index after the balanced {…} at s[i], skipping
// braces inside JSON strings, or -1.
func objectEnd(s string, i int) int {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"':
			q := quotedEnd(s, j)
			if q < 0 {
				return -1
			}
			j = q - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return j + 1
			}
		}
	}
	return -1
}

// Errors a malformed directive can carry.
var (
	ErrDirectiveSyntax = errors.New("malformed directive")
	ErrDirectiveCount  = errors.New("stopMessage count must be an integer >= 1")
	ErrDirectiveQuote  = errors.New("stopMessage text must be a closed \"quoted\" string")
	ErrDirectiveEmpty  = errors.New("stopMessage text is empty")
	ErrDirectiveClock  = errors.New(`clock directive needs a JSON object with string "dueAt" and "task"`)
	ErrDirectiveRoute  = errors.New("route name must be letters, digits, '.', '_' or '-'")
)

// withDetail wraps a directive error with the offending text.
func withDetail(err error, detail string) error { return &directiveErr{err: err, detail: detail} }

type directiveErr struct {
	err    error
	detail string
}

func (e *directiveErr) Error() string { return e.err.Error() + ": " + e.detail }
func (e *directiveErr) Unwrap() error { return e.err }

// parseTag parses one whole tag, `<**` and `**>` included.
func parseTag(tag string) Directive {
	d := Directive{Raw: tag}
	body := strings.TrimSpace(tag[len(tagOpen) : len(tag)-len(tagClose)])
	name, arg, hasArg := strings.Cut(body, ":")
	name = strings.TrimSpace(name)
	arg = strings.TrimSpace(arg)
	switch {
	case strings.EqualFold(name, "stopMessage"):
		d.Kind = DirectiveStopMessage
		if !hasArg {
			d.Err = ErrDirectiveSyntax
			return d
		}
		if arg == "clear" {
			d.Kind = DirectiveStopMessageClear
			return d
		}
		parseStopMessage(&d, arg)
	case strings.EqualFold(name, "clock"):
		d.Kind = DirectiveClock
		if !hasArg {
			d.Err = ErrDirectiveSyntax
			return d
		}
		if arg == "clear" {
			d.Kind = DirectiveClockClear
			return d
		}
		d.Clock, d.Err = parseClockItem(arg)
	case strings.EqualFold(name, "route"):
		d.Kind = DirectiveRoute
		switch {
		case arg == "clear":
			d.Kind = DirectiveRouteClear
		case !validRouteName(arg):
			d.Err = ErrDirectiveRoute
		default:
			d.Route = arg
		}
	case strings.EqualFold(name, "heartbeat"):
		d.Kind = DirectiveHeartbeat
		switch {
		case arg == "off":
			d.Kind = DirectiveHeartbeatOff
		case !hasArg:
			d.Err = ErrDirectiveSyntax
		default:
			d.Every, d.Err = parseHeartbeatEvery(arg)
		}
	default:
		d.Kind = DirectiveUnknown
	}
	return d
}

// MinHeartbeatEvery and MaxHeartbeatEvery bound a heartbeat interval
// (docs/scheduler.md): seconds for tests and demos, a week at most.
const (
	MinHeartbeatEvery = time.Second
	MaxHeartbeatEvery = 7 * 24 * time.Hour
)

// ErrDirectiveHeartbeat is a heartbeat interval that is not a quoted Go
// duration within the bounds.
var ErrDirectiveHeartbeat = errors.New(`heartbeat must be "off" or a quoted duration from 1s to 168h, e.g. "30m"`)

func parseHeartbeatEvery(arg string) (time.Duration, error) {
	if len(arg) < 2 || arg[0] != '"' || arg[len(arg)-1] != '"' {
		return 0, ErrDirectiveHeartbeat
	}
	every, err := time.ParseDuration(strings.TrimSpace(arg[1 : len(arg)-1]))
	if err != nil || every < MinHeartbeatEvery || every > MaxHeartbeatEvery {
		return 0, ErrDirectiveHeartbeat
	}
	return every, nil
}

func parseStopMessage(d *Directive, arg string) {
	if arg == "" || arg[0] != '"' {
		d.Err = ErrDirectiveQuote
		return
	}
	q := quotedEnd(arg, 0)
	if q < 0 {
		d.Err = ErrDirectiveQuote
		return
	}
	d.Text = unescapeQuoted(arg[1 : q-1])
	d.MaxRepeats = DefaultStopMessageRepeats
	rest := strings.TrimSpace(arg[q:])
	if rest != "" {
		num, ok := strings.CutPrefix(rest, ",")
		num = strings.TrimSpace(num)
		n, err := strconv.Atoi(num)
		if !ok || err != nil || n < 1 || num[0] == '+' {
			d.Err = withDetail(ErrDirectiveCount, strconv.Quote(rest))
			return
		}
		d.MaxRepeats = n
	}
	if strings.TrimSpace(d.Text) == "" {
		d.Err = ErrDirectiveEmpty
	}
}

// unescapeQuoted turns `\"` into `"` and `\\` into `\`; any other
// backslash is kept, so Windows paths survive.
func unescapeQuoted(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) && (s[i+1] == '"' || s[i+1] == '\\') {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func parseClockItem(arg string) (*ClockItem, error) {
	if arg == "" || arg[0] != '{' || !reqscan.Valid([]byte(arg)) {
		return nil, ErrDirectiveClock
	}
	obj := gjson.Parse(arg)
	due, task := obj.Get("dueAt"), obj.Get("task")
	if due.Type != gjson.String || task.Type != gjson.String ||
		strings.TrimSpace(due.Str) == "" || strings.TrimSpace(task.Str) == "" {
		return nil, ErrDirectiveClock
	}
	it := &ClockItem{DueAt: due.Str, Task: task.Str}
	if v := obj.Get("tool"); v.Type == gjson.String {
		it.Tool = v.Str
	}
	switch v := obj.Get("arguments"); {
	case v.Type == gjson.String:
		it.Arguments = v.Str
	case v.IsObject() || v.IsArray():
		it.Arguments = v.Raw
	}
	if v := obj.Get("repeat"); v.Type == gjson.String {
		it.Repeat = v.Str
	}
	if v := obj.Get("maxRuns"); v.Exists() {
		if v.Type != gjson.Number || v.Num < 0 || v.Num != float64(int(v.Num)) {
			return nil, withDetail(ErrDirectiveClock, "maxRuns must be an integer >= 0")
		}
		it.MaxRuns = int(v.Num)
	}
	return it, nil
}

func validRouteName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
