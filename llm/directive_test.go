package llm

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseDirectivesKinds(t *testing.T) {
	tests := []struct {
		in   string
		want Directive
	}{
		{`<**stopMessage:"keep going",3**>`, Directive{Kind: DirectiveStopMessage, Text: "keep going", MaxRepeats: 3}},
		{`<**stopMessage:"keep going"**>`, Directive{Kind: DirectiveStopMessage, Text: "keep going", MaxRepeats: 10}},
		{`<** stopMessage : "a" , 7 **>`, Directive{Kind: DirectiveStopMessage, Text: "a", MaxRepeats: 7}},
		{`<**stopMessage:"say \"hi\" **> now",2**>`, Directive{Kind: DirectiveStopMessage, Text: `say "hi" **> now`, MaxRepeats: 2}},
		{`<**stopMessage:"C:\dir\\x"**>`, Directive{Kind: DirectiveStopMessage, Text: `C:\dir\x`, MaxRepeats: 10}},
		{`<**stopMessage:"继续执行待处理任务",5**>`, Directive{Kind: DirectiveStopMessage, Text: "继续执行待处理任务", MaxRepeats: 5}},
		{`<**stopMessage:clear**>`, Directive{Kind: DirectiveStopMessageClear}},
		{`<**clock:clear**>`, Directive{Kind: DirectiveClockClear}},
		{`<**route:fast-1**>`, Directive{Kind: DirectiveRoute, Route: "fast-1"}},
		{`<**route:clear**>`, Directive{Kind: DirectiveRouteClear}},
		{`<**heartbeat:"30m"**>`, Directive{Kind: DirectiveHeartbeat, Every: 30 * time.Minute}},
		{`<**heartbeat: "2s" **>`, Directive{Kind: DirectiveHeartbeat, Every: 2 * time.Second}},
		{`<**heartbeat:off**>`, Directive{Kind: DirectiveHeartbeatOff}},
		{`<**!glm**>`, Directive{Kind: DirectiveUnknown}},
		{`<****>`, Directive{Kind: DirectiveUnknown}},
	}
	for _, tt := range tests {
		got := ParseDirectives("before " + tt.in + " after")
		if len(got) != 1 {
			t.Fatalf("%s: got %d directives", tt.in, len(got))
		}
		d := got[0]
		if d.Err != nil || d.Kind != tt.want.Kind || d.Text != tt.want.Text || d.MaxRepeats != tt.want.MaxRepeats || d.Route != tt.want.Route || d.Every != tt.want.Every {
			t.Errorf("%s: got %+v, want %+v", tt.in, d, tt.want)
		}
		if d.Raw != tt.in {
			t.Errorf("%s: Raw = %q", tt.in, d.Raw)
		}
		if out, n := StripDirectives("before " + tt.in + " after"); out != "before  after" || n != 1 {
			t.Errorf("%s: strip = %q, %d", tt.in, out, n)
		}
	}
}

func TestParseClockDirective(t *testing.T) {
	in := `x <**clock:{"dueAt":"2026-01-21T20:30:00-08:00","task":"check {build} \"**>\"","tool":"exec","arguments":{"cmd":"make"},"repeat":"every 30m","maxRuns":4}**> y`
	got := ParseDirectives(in)
	if len(got) != 1 || got[0].Err != nil || got[0].Kind != DirectiveClock {
		t.Fatalf("got %+v", got)
	}
	want := ClockItem{DueAt: "2026-01-21T20:30:00-08:00", Task: `check {build} "**>"`, Tool: "exec",
		Arguments: `{"cmd":"make"}`, Repeat: "every 30m", MaxRuns: 4}
	if *got[0].Clock != want {
		t.Errorf("clock = %+v, want %+v", *got[0].Clock, want)
	}
	if out, _ := StripDirectives(in); out != "x  y" {
		t.Errorf("strip = %q", out)
	}
	// arguments given as a JSON string stays that string.
	got = ParseDirectives(`<**clock:{"dueAt":"2026-01-21T20:30:00Z","task":"t","arguments":"{}"}**>`)
	if got[0].Err != nil || got[0].Clock.Arguments != "{}" || got[0].Clock.Tool != "" {
		t.Errorf("got %+v", got[0])
	}
}

func TestMalformedDirectives(t *testing.T) {
	tests := []struct {
		in   string
		kind DirectiveKind
		err  error
	}{
		{`<**stopMessage:"x",0**>`, DirectiveStopMessage, ErrDirectiveCount},
		{`<**stopMessage:"x",-2**>`, DirectiveStopMessage, ErrDirectiveCount},
		{`<**stopMessage:"x",two**>`, DirectiveStopMessage, ErrDirectiveCount},
		{`<**stopMessage:"x" 3**>`, DirectiveStopMessage, ErrDirectiveCount},
		{`<**stopMessage:"unterminated**>`, DirectiveStopMessage, ErrDirectiveQuote},
		{`<**stopMessage:bare words**>`, DirectiveStopMessage, ErrDirectiveQuote},
		{`<**stopMessage:""**>`, DirectiveStopMessage, ErrDirectiveEmpty},
		{`<**stopMessage**>`, DirectiveStopMessage, ErrDirectiveSyntax},
		{`<**clock:{"dueAt":"2026-01-01T00:00:00Z"}**>`, DirectiveClock, ErrDirectiveClock},
		{`<**clock:{"dueAt":1,"task":"t"}**>`, DirectiveClock, ErrDirectiveClock},
		{`<**clock:{"dueAt":"d","task":"t",}**>`, DirectiveClock, ErrDirectiveClock},
		{`<**clock:{"dueAt":"d","task":"t","maxRuns":1.5}**>`, DirectiveClock, ErrDirectiveClock},
		{`<**clock:{"dueAt":"d","task":"t"**>`, DirectiveClock, ErrDirectiveClock},
		{`<**clock:soon**>`, DirectiveClock, ErrDirectiveClock},
		{`<**route:a b**>`, DirectiveRoute, ErrDirectiveRoute},
		{`<**route:**>`, DirectiveRoute, ErrDirectiveRoute},
		{`<**heartbeat:30m**>`, DirectiveHeartbeat, ErrDirectiveHeartbeat},
		{`<**heartbeat:"500ms"**>`, DirectiveHeartbeat, ErrDirectiveHeartbeat},
		{`<**heartbeat:"200h"**>`, DirectiveHeartbeat, ErrDirectiveHeartbeat},
		{`<**heartbeat:"soon"**>`, DirectiveHeartbeat, ErrDirectiveHeartbeat},
		{`<**heartbeat**>`, DirectiveHeartbeat, ErrDirectiveSyntax},
	}
	for _, tt := range tests {
		text := "keep " + tt.in + " this"
		got := ParseDirectives(text)
		if len(got) != 1 {
			t.Fatalf("%s: got %d directives", tt.in, len(got))
		}
		if got[0].Kind != tt.kind || !errors.Is(got[0].Err, tt.err) {
			t.Errorf("%s: got kind %v err %v, want %v %v", tt.in, got[0].Kind, got[0].Err, tt.kind, tt.err)
		}
		if out, n := StripDirectives(text); out != "keep  this" || n != 1 {
			t.Errorf("%s: strip = %q, %d", tt.in, out, n)
		}
	}
}

func TestStripEdgeCases(t *testing.T) {
	tests := []struct{ in, out string }{
		{"no tags at all", "no tags at all"},
		{"a <** b", "a <** b"},                        // unterminated: left as is
		{"x <** y <**clock:clear**> z", "x <** y  z"}, // an unclosed opener does not swallow text
		{"<**a**><**b**>c<**d**>", "c"},               // several per message
		{"<*<**a**>*b**>", ""},                        // joined neighbours are stripped too
		{"a **> b <**", "a **> b <**"},                // markers in the wrong order
		{"<**>", "<**>"},                              // markers may not overlap
		{"<**stopMessage:\"a <** b\"**>!", "!"},       // opener inside quoted text
		{"line1\n<**clock:clear**>\nline2", "line1\n\nline2"},
	}
	for _, tt := range tests {
		got, _ := StripDirectives(tt.in)
		if got != tt.out {
			t.Errorf("StripDirectives(%q) = %q, want %q", tt.in, got, tt.out)
		}
	}
	// Multiple tags keep their order.
	ds := ParseDirectives(`<**stopMessage:clear**> hi <**route:r1**> <**clock:clear**>`)
	if len(ds) != 3 || ds[0].Kind != DirectiveStopMessageClear || ds[1].Kind != DirectiveRoute || ds[2].Kind != DirectiveClockClear {
		t.Errorf("got %+v", ds)
	}
}

// A body full of unclosed openers must not go quadratic; this finishes
// quickly only if the scan is linear.
func TestStripManyUnclosedOpeners(t *testing.T) {
	in := strings.Repeat(`<**stopMessage:"x`, 20000) + "**>"
	out, n := StripDirectives(in)
	if n != 1 || strings.Contains(out, "**>") {
		t.Fatalf("n=%d", n)
	}
}

// hasCompleteTag reports whether s still holds `<**` followed, later and
// without overlap, by `**>`.
func hasCompleteTag(s string) bool {
	i := strings.Index(s, tagOpen)
	return i >= 0 && strings.Contains(s[i+len(tagOpen):], tagClose)
}

func FuzzParseDirectives(f *testing.F) {
	for _, s := range []string{
		`<**stopMessage:"keep going",3**>`, `<**stopMessage:"a \"b\" **>",2**>`, `<**clock:clear**>`,
		`<**clock:{"dueAt":"2026-01-21T20:30:00-08:00","task":"t {x}"}**>`, `<**route:fast**>`,
		"<** unterminated", "<*<**a**>*b**>", "x<**<**y**>", `<**stopMessage:"**>`, "<****>", "",
		`<**clock:{"a":"}**>"}**>`, "中文<**stopMessage:\"继续\"**>文本",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dirs := ParseDirectives(s)
		out, n := StripDirectives(s)
		if n != len(dirs) {
			t.Fatalf("strip removed %d, parse found %d", n, len(dirs))
		}
		if hasCompleteTag(out) {
			t.Fatalf("a complete tag remains in %q", out)
		}
		if again, m := StripDirectives(out); again != out || m != 0 {
			t.Fatalf("not idempotent: %q -> %q", out, again)
		}
		if n == 0 && out != s {
			t.Fatalf("nothing removed but text changed")
		}
		for _, d := range dirs {
			if !strings.HasPrefix(d.Raw, tagOpen) || !strings.HasSuffix(d.Raw, tagClose) {
				t.Fatalf("bad Raw %q", d.Raw)
			}
		}
	})
}
