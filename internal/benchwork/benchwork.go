// Package benchwork is the filter's request-path edit as one function, so
// the same work can be benchmarked natively and inside a wasm module under
// wazero (issue: wasm/native ratio of the protocol layer).
package benchwork

import (
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// TimeTag is a representative docs/time.md#time-tag.
const TimeTag = "[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 13:22:38.229 -08:00` tz=`America/Los_Angeles` nowMs=`1770038558229` ntpOffsetMs=`-12`"

// clockTool is rendered once, as the filter renders its tools once per VM.
var clockTool = func() llm.RenderedTool {
	rt, err := hostapi.ClockToolSpec().Render(llm.Chat)
	if err != nil {
		panic(err) // chime's own schema: a build error
	}
	return rt
}()

// Edit performs what the filter does to a Chat request: parse, read
// directives, strip every tag, append the time tag and inject the clock
// tool (rendered once). The result is appended to dst[:0], which the
// filter reuses across requests (nil allocates).
func Edit(body, dst []byte) ([]byte, error) {
	var e Editor
	return e.Edit(body, dst)
}

// Editor is Edit reusing the parsed request from one call to the next,
// as the filter does (llm.ParseRequestInto). Not safe for concurrent use.
type Editor struct{ spare *llm.Request }

// Edit is the package's Edit.
func (e *Editor) Edit(body, dst []byte) ([]byte, error) {
	r, err := llm.ParseRequestInto(e.spare, llm.Chat, body)
	if err != nil {
		return nil, err
	}
	e.spare = r
	r.Directives()
	r.StripDirectives()
	if err := r.AppendUserText(TimeTag); err != nil {
		return nil, err
	}
	if err := r.InjectRendered(clockTool); err != nil {
		return nil, err
	}
	return r.AppendBytes(dst[:0]), nil
}
