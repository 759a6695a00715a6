package filter

import (
	"strings"
	"testing"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// TestLargeBodyBuffersAreNotSharedWhileInUse: large request bodies are
// read into and rebuilt in recycled buffers. A buffer goes back only when
// its stream is done, so requests in flight together never share one, and
// a later request reusing one forwards its own bytes.
func TestLargeBodyBuffersAreNotSharedWhileInUse(t *testing.T) {
	e := newEnv(t, `{"token":"tok"}`)
	body := func(fill string) string {
		return `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat(fill, 200<<10) + `"}]}`
	}
	check := func(id uint32, fill string) {
		t.Helper()
		got := string(e.h.GetSentRequestBody(id))
		texts := userTexts(t, llm.Chat, got)
		if len(texts) != 2 || texts[0] != strings.Repeat(fill, 200<<10) || !strings.HasPrefix(texts[1], "[Time/Date]") {
			t.Fatalf("stream %d forwarded %d bytes starting %.80q", id, len(got), got)
		}
	}
	a := e.send(llm.Chat, body("a"))
	e.answer(hostapi.PrepareResponse{NTP: ntp(0)})
	b := e.send(llm.Chat, body("b")) // while a is still in flight
	e.answer(hostapi.PrepareResponse{NTP: ntp(0)})
	check(a, "a")
	check(b, "b")
	e.h.CompleteHttpContext(a) // a's buffers go back
	c := e.send(llm.Chat, body("c"))
	e.answer(hostapi.PrepareResponse{NTP: ntp(0)})
	check(b, "b")
	check(c, "c")
	e.h.CompleteHttpContext(b)
	e.h.CompleteHttpContext(c)
	d := e.send(llm.Chat, body("d"))
	e.answer(hostapi.PrepareResponse{NTP: ntp(0)})
	check(d, "d")
}
