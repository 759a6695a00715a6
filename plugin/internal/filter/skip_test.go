package filter

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/proxytest"
	"github.com/tidwall/gjson"
)

// skipEnv is env with a clock the test moves.
type skipEnv struct {
	*env
	now *time.Time
}

func newSkipEnv(t testing.TB, config string) *skipEnv {
	t.Helper()
	now := wall
	h := proxytest.NewHost(proxytest.Options{
		VMContext:           vmContext{now: func() time.Time { return now }},
		PluginConfiguration: []byte(config),
		Clusters:            []string{"chime_host"},
	})
	if !h.StartPlugin() {
		t.Fatalf("plugin rejected %q", config)
	}
	return &skipEnv{&env{t, h}, &now}
}

// answerPoll answers the newest generation poll with gen.
func (e *skipEnv) answerPoll(gen int64) {
	e.t.Helper()
	polls := e.calls(hostapi.PathState)
	if len(polls) == 0 {
		e.t.Fatal("no generation poll")
	}
	c := polls[len(polls)-1]
	e.h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}},
		must(json.Marshal(hostapi.StateResponse{NowMs: 1, NTP: hostapi.NTPInfo{Status: "ok"}, Generation: gen})), nil)
}

// request sends one chat request of session sid and reports whether it
// went without a prepare (and answers the prepare otherwise with ans).
func (e *skipEnv) request(sid, text string, ans hostapi.PrepareResponse) (skipped bool, forwarded string) {
	e.t.Helper()
	before := len(e.calls(hostapi.PathPrepare))
	body := `{"messages":[{"role":"user","content":` + string(must(json.Marshal(text))) + `}]}`
	id := e.send(llm.Chat, body, [2]string{"x-chime-session", sid})
	if len(e.calls(hostapi.PathPrepare)) == before {
		return true, string(e.h.GetSentRequestBody(id))
	}
	e.answer(ans)
	return false, e.forwarded(id)
}

func TestSkipPrepare(t *testing.T) {
	e := newSkipEnv(t, `{"token":"tok"}`)
	const gen = 42
	quiet := hostapi.PrepareResponse{Tools: []string{hostapi.ClockToolName}, Generation: gen, QuietMs: 60_000}

	// Before the filter trusts a generation, every request is prepared.
	if skipped, _ := e.request("s1", "hi", quiet); skipped {
		t.Fatal("skipped before any generation poll was answered")
	}
	// The VM's first request started the first poll; the tick sends no
	// second one while it is outstanding.
	if n := len(e.calls(hostapi.PathState)); n != 1 {
		t.Fatalf("polls after the first request = %d, want 1", n)
	}
	e.h.Tick()
	e.answerPoll(gen)
	if n := len(e.calls(hostapi.PathState)); n != 2 {
		t.Fatalf("polls after an answer = %d, want the next one sent at once", n)
	}
	skipped, body := e.request("s1", "again", quiet)
	if !skipped {
		t.Fatal("a quiet session's request was prepared")
	}
	if !strings.Contains(body, "[Time/Date]: utc=") || gjson.Get(body, "tools.0.function.name").Str != hostapi.ClockToolName {
		t.Fatalf("skipped request lacks the time tag or the tools: %s", body)
	}
	if e.counter(MetricPrepareSkipped) != 1 {
		t.Fatalf("skipped = %d", e.counter(MetricPrepareSkipped))
	}

	// A directive always asks the host.
	if skipped, _ := e.request("s1", "<**stopMessage:clear**>", quiet); skipped {
		t.Fatal("a request with a directive skipped prepare")
	}
	// Another session has no entry yet.
	if skipped, _ := e.request("s2", "hi", quiet); skipped {
		t.Fatal("a session never prepared skipped")
	}
	// An answer that is not quiet (a reminder reserved, a stopMessage)
	// makes the next request ask again.
	if skipped, _ := e.request("s2", "hi", hostapi.PrepareResponse{Generation: gen, MayContinue: true}); !skipped {
		t.Fatal("s2 was quiet from its first answer")
	}
	e.request("s3", "hi", hostapi.PrepareResponse{Generation: gen, MayContinue: true})
	if skipped, _ := e.request("s3", "hi", quiet); skipped {
		t.Fatal("a session with mayContinue skipped")
	}

	// The window ends: the next request asks (the generation still
	// trusted: a stale poll is replaced on the tick and answered).
	*e.now = e.now.Add(61 * time.Second)
	e.h.Tick()
	e.answerPoll(gen)
	if skipped, _ := e.request("s1", "later", quiet); skipped {
		t.Fatal("skipped after the quiet window")
	}

	// The generation moves (a change elsewhere): entries of the old one
	// are void.
	e.answerPoll(gen + 1)
	if skipped, _ := e.request("s1", "after a change", quiet); skipped {
		t.Fatal("skipped on an entry of an older generation")
	}
	// quiet above is of gen 42: still not the generation known (43).
	quiet.Generation = gen + 1
	e.request("s1", "learn", quiet)
	if skipped, _ := e.request("s1", "quiet again", quiet); !skipped {
		t.Fatal("not skipped with a fresh entry")
	}

	// Trust ends GenerationTrust after the confirming poll was sent.
	*e.now = e.now.Add(hostapi.GenerationTrust)
	if skipped, _ := e.request("s1", "late", quiet); skipped {
		t.Fatal("skipped on a generation no poll confirmed recently")
	}
}

func TestSkipStopsWhenThePollFails(t *testing.T) {
	e := newSkipEnv(t, `{}`)
	quiet := hostapi.PrepareResponse{Generation: 7, QuietMs: 60_000}
	e.h.Tick()
	e.answerPoll(7)
	e.request("s", "hi", quiet)
	if skipped, _ := e.request("s", "hi", quiet); !skipped {
		t.Fatal("not skipped")
	}
	polls := e.calls(hostapi.PathState)
	e.h.CallOnHttpCallResponse(polls[len(polls)-1].ID, nil, nil, nil) // reset
	if skipped, _ := e.request("s", "hi", quiet); skipped {
		t.Fatal("skipped after the generation poll failed")
	}
	for _, l := range e.h.GetLogs(proxywasm.LogLevelWarn) {
		t.Errorf("a failed poll logged loudly: %s", l)
	}
}

func TestSkipPrepareOff(t *testing.T) {
	e := newSkipEnv(t, `{"skipPrepare":false}`)
	e.h.Tick()
	if p, _ := header(e.calls(hostapi.PathState)[0].Headers, ":path"); p != hostapi.PathState {
		t.Fatalf("skipPrepare off still polls: %s", p)
	}
	quiet := hostapi.PrepareResponse{Generation: 7, QuietMs: 60_000}
	for range 2 {
		if skipped, _ := e.request("s", "hi", quiet); skipped {
			t.Fatal("skipped with skipPrepare off")
		}
	}
}

// A resolve (its tools may change the session) voids the session's entry
// until a prepare of the generation the chain ended with.
func TestResolveRaisesTheFloor(t *testing.T) {
	raiseQuietFloor("s", 0) // no generation: nothing written
	e := newSkipEnv(t, `{}`)
	quiet := hostapi.PrepareResponse{Generation: 7, QuietMs: 60_000}
	e.h.Tick()
	e.answerPoll(7)
	e.request("s", "hi", quiet)
	storeQuiet("s", quietEntry{gen: 8}) // as onResolveAnswer does with the chain's generation
	if skipped, _ := e.request("s", "hi", quiet); skipped {
		t.Fatal("skipped after a resolve")
	}
	// The late answer of generation 7 did not overwrite the floor.
	if got, _, _ := loadQuiet(quietKey("s")); got.gen != 8 {
		t.Fatalf("entry generation = %d, want 8", got.gen)
	}
}

// touchedEnv is a skip env whose session sid was prepared once and then
// skipped its prepare: one touch waits for the tick.
func touchedEnv(t *testing.T, sid string) *skipEnv {
	t.Helper()
	e := newSkipEnv(t, `{}`)
	quiet := hostapi.PrepareResponse{Generation: 7, QuietMs: 60_000}
	e.h.Tick()
	e.answerPoll(7)
	e.request(sid, "hi", quiet)
	e.request(sid, "hi", quiet)
	return e
}

func TestTouchesFlushOnTick(t *testing.T) {
	e := touchedEnv(t, "s-touch")
	pending := touchedMemos
	e.h.Tick()
	if touchedMemos != pending-1 {
		t.Fatalf("touchedMemos %d after the flush, want %d", touchedMemos, pending-1)
	}
	touches := e.calls(hostapi.PathTouch)
	if len(touches) != 1 {
		t.Fatalf("touch calls = %d", len(touches))
	}
	var req hostapi.TouchRequest
	if err := json.Unmarshal(touches[0].Body, &req); err != nil {
		t.Fatalf("touch body %s: %v", touches[0].Body, err)
	}
	if len(req.Sessions) != 1 || req.Sessions[0].SessionID != "s-touch" || req.Sessions[0].AtMs != wall.UnixMilli() {
		t.Fatalf("touches = %+v", req)
	}
	e.h.Tick()
	if n := len(e.calls(hostapi.PathTouch)); n != 1 {
		t.Fatalf("touches sent again: %d calls", n)
	}
}

// A plugin that goes (its VM replaced, its configuration removed) sends
// the touches no tick sent yet, and finishes with proxy_done once the host
// answered; with none pending it finishes at once.
func TestTouchesFlushWhenThePluginGoes(t *testing.T) {
	for _, answer := range []string{"ok", "failed"} {
		t.Run(answer, func(t *testing.T) {
			resetMemos()
			defer resetMemos()
			e := touchedEnv(t, "s-going")
			if e.h.StopPlugin() {
				t.Fatal("the plugin finished at once with a touch unsent")
			}
			touches := e.calls(hostapi.PathTouch)
			if len(touches) != 1 || !strings.Contains(string(touches[0].Body), `"s-going"`) {
				t.Fatalf("touch calls %+v", touches)
			}
			if e.h.PluginDeleted() {
				t.Fatal("deleted before the host answered")
			}
			if answer == "ok" {
				e.h.CallOnHttpCallResponse(touches[0].ID, [][2]string{{":status", "200"}}, []byte(`{}`), nil)
			} else {
				e.h.CallOnHttpCallResponse(touches[0].ID, nil, nil, nil) // no answer
			}
			if !e.h.PluginDeleted() {
				t.Fatal("the plugin did not call proxy_done once the touch was answered")
			}
			if touchedMemos != 0 {
				t.Fatalf("touchedMemos %d after the plugin went", touchedMemos)
			}
		})
	}
	t.Run("nothing pending", func(t *testing.T) {
		e := newSkipEnv(t, `{}`)
		if !e.h.StopPlugin() || !e.h.PluginDeleted() {
			t.Fatal("a plugin with no touch pending did not finish at once")
		}
		if n := len(e.calls(hostapi.PathTouch)); n != 0 {
			t.Fatalf("%d touch calls with none pending", n)
		}
	})
}

func TestQuietEntryRoundTrip(t *testing.T) {
	in := quietEntry{gen: 9, until: 100, created: 50, template: true, tools: []string{"clock", "timer"}, route: "a\nb"}
	out, ok := decodeQuietEntry(in.encode())
	if !ok || out.gen != 9 || out.until != 100 || out.created != 50 || !out.template || strings.Join(out.tools, ",") != "clock,timer" || out.route != "a\nb" {
		t.Fatalf("round trip: %+v %v", out, ok)
	}
	for _, bad := range []string{"", "v2\n1\n2\n3\n0\n\n", "v1\nx\n2\n3\n0\n\n", "v1\n1\n2\n3\n2\n\n", "v1\n1\n2"} {
		if _, ok := decodeQuietEntry([]byte(bad)); ok {
			t.Errorf("decoded %q", bad)
		}
	}
}

// FuzzDecodeQuietEntry: shared data may hold anything a VM of the same
// vm_id wrote; the decoder never panics, and what it accepts encodes back
// to the same bytes (so it read every field the encoder wrote).
func FuzzDecodeQuietEntry(f *testing.F) {
	f.Add(quietEntry{gen: 9, until: 100, created: 50, template: true, tools: []string{hostapi.ClockToolName, "x"}, route: "a\nb"}.encode())
	f.Add([]byte("v1\n1\n2\n3\n0\n\n"))
	f.Add([]byte("v1\n1\n2\n3\n1\n,\nr"))
	f.Add([]byte("v1\n+1\n2\n3\n0\n\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		e, ok := decodeQuietEntry(raw)
		if !ok {
			return
		}
		if got := e.encode(); string(got) != string(raw) && !nonCanonicalInts(raw) {
			t.Fatalf("decoded %q, encodes back as %q", raw, got)
		}
	})
}

// nonCanonicalInts reports whether one of raw's numbers is written in a
// form ParseInt accepts but AppendInt does not produce ("+1", "01", "-0").
func nonCanonicalInts(raw []byte) bool {
	parts := strings.SplitN(string(raw), "\n", 7)
	for _, p := range parts[1:4] {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil || strconv.FormatInt(n, 10) != p {
			return true
		}
	}
	return false
}

// TestKeptDirectiveEndsTheQuietWindow: a directive kept while the host
// was unreachable goes with the session's very next request, however
// quiet the session was; also when a prepare answered after the keeping
// (sent before it) says the session is quiet.
func TestKeptDirectiveEndsTheQuietWindow(t *testing.T) {
	e := newSkipEnv(t, `{"token":"tok"}`)
	const gen = 7
	quiet := hostapi.PrepareResponse{Tools: []string{hostapi.ClockToolName}, Generation: gen, QuietMs: 600_000}
	e.request("s1", "hi", quiet)
	e.answerPoll(gen)
	e.request("s1", "learn", quiet)
	if skipped, _ := e.request("s1", "quiet", quiet); !skipped {
		t.Fatal("the session is not quiet")
	}
	keepOne := func() string {
		e.send(llm.Chat, `{"messages":[{"role":"user","content":"<**stopMessage:\"go on\",3**> x"}]}`, [2]string{"x-chime-session", "s1"})
		_, p := e.lastPrepare()
		e.fail(nil, "") // a timeout: failed open, the directive kept
		return p.RequestID
	}
	nextCarries := func(kept string) {
		t.Helper()
		if skipped, _ := e.request("s1", "next", quiet); skipped {
			t.Fatal("the request after a kept directive skipped prepare")
		}
		// request answered it with quiet; the kept directive went with it.
		p := e.calls(hostapi.PathPrepare)
		var prep hostapi.PrepareRequest
		if err := json.Unmarshal(p[len(p)-1].Body, &prep); err != nil {
			t.Fatal(err)
		}
		if len(prep.Kept) != 1 || prep.Kept[0].RequestID != kept {
			t.Fatalf("the next prepare carries %+v, want the kept %s", prep.Kept, kept)
		}
	}
	nextCarries(keepOne())
	if skipped, _ := e.request("s1", "quiet again", quiet); !skipped {
		t.Fatal("not quiet again once the kept directive was delivered")
	}

	// A prepare sent before the keeping and answered after it: its quiet
	// answer must not hide what was kept meanwhile.
	*e.now = e.now.Add(11 * time.Minute) // the quiet window is over
	e.h.Tick()
	e.answerPoll(gen)
	early := e.send(llm.Chat, `{"messages":[{"role":"user","content":"early"}]}`, [2]string{"x-chime-session", "s1"})
	earlyCall, _ := e.lastPrepare()
	kept := keepOne()
	b, _ := json.Marshal(quiet)
	e.h.CallOnHttpCallResponse(earlyCall.ID, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, b, nil)
	e.forwarded(early)
	nextCarries(kept)
}

// pendingTouches is what g's next PathTouch would carry, by session.
func pendingTouches(g *genState) map[string]int64 {
	out := map[string]int64{}
	for _, m := range g.touched {
		if m.touchOwner != g {
			panic("a listed memo owned by another root context")
		}
		if _, dup := out[m.sid]; dup {
			panic("a session listed twice: " + m.sid)
		}
		out[m.sid] = m.touchAt
	}
	for sid, at := range g.touches {
		if _, dup := out[sid]; dup {
			panic("a session both listed and in the map: " + sid)
		}
		out[sid] = at
	}
	return out
}

// noteTouch keeps each session's latest time once, within the cap, across
// a clearing of the memos and for two root contexts sharing a session;
// a root context that is done lets go of its touches.
func TestNoteTouchKeepsLatest(t *testing.T) {
	resetMemos()
	p := &pluginContext{}
	at := func(ms int64) time.Time { return time.UnixMilli(ms) }
	p.noteTouch("a", at(1))
	p.noteTouch("a", at(2))
	p.noteTouch("b", at(3))
	p.noteTouch("a", at(5))
	if got := pendingTouches(&p.gen); len(got) != 2 || got["a"] != 5 || got["b"] != 3 {
		t.Fatalf("touches = %v, want a:5 b:3", got)
	}
	// Another root context of the VM, the same session.
	q := &pluginContext{}
	q.noteTouch("a", at(6))
	q.noteTouch("a", at(7))
	if got := pendingTouches(&q.gen); len(got) != 1 || got["a"] != 7 {
		t.Fatalf("second root context: touches = %v, want a:7", got)
	}
	// Clearing the memos keeps those with a touch pending.
	for i := range maxSessionMemos + 1 {
		memoOf(fmt.Sprint("m", i))
	}
	p.noteTouch("a", at(8))
	p.noteTouch("b", at(9))
	if got := pendingTouches(&p.gen); len(got) != 2 || got["a"] != 8 || got["b"] != 9 {
		t.Fatalf("after clearing the memos: touches = %v, want a:8 b:9", got)
	}
	for i := len(pendingTouches(&p.gen)); i < maxTouches; i++ {
		p.noteTouch(fmt.Sprint("s", i), at(10))
	}
	p.noteTouch("over", at(11))
	p.noteTouch("b", at(12))
	if got := pendingTouches(&p.gen); len(got) != maxTouches || got["b"] != 12 {
		t.Fatalf("past the cap: %d touches, b = %d", len(got), got["b"])
	} else if _, ok := got["over"]; ok {
		t.Fatal("past the cap: a new session's touch was kept")
	}
	p.OnPluginDone()
	if len(pendingTouches(&p.gen)) != 0 || memoOf("a").touchOwner != nil {
		t.Fatal("a done root context keeps its touches")
	}
	q.noteTouch("a", at(13))
	if got := pendingTouches(&q.gen); len(got) != 1 || got["a"] != 13 || len(q.gen.touched) != 1 {
		t.Fatalf("second root context after the first is done: touches = %v, in its memo %d", got, len(q.gen.touched))
	}
}

// resetMemos forgets every session memo and pending touch.
func resetMemos() {
	for g := range touchLists {
		g.dropTouches()
	}
	clear(sessions)
	lastSession = nil
}

// Sessions with a touch pending do not count against the memos' bound:
// more of them than maxSessionMemos must not make every new session
// clear the memos (and copy the pending ones back) again.
func TestMemosBeyondPendingTouches(t *testing.T) {
	resetMemos()
	defer resetMemos()
	p := &pluginContext{}
	for i := range 2 * maxSessionMemos {
		p.noteTouch(fmt.Sprint("t", i), time.UnixMilli(1))
	}
	if got := len(pendingTouches(&p.gen)); got != 2*maxSessionMemos {
		t.Fatalf("%d touches pending, want %d", got, 2*maxSessionMemos)
	}
	first := memoOf("new-0")
	for i := 1; i < maxSessionMemos/2; i++ {
		memoOf(fmt.Sprint("new-", i))
	}
	if sessions["new-0"] != first {
		t.Fatal("the memos were cleared with far fewer than maxSessionMemos new sessions")
	}
	for i := range maxSessionMemos {
		memoOf(fmt.Sprint("more-", i))
	}
	if _, ok := sessions["new-0"]; ok {
		t.Fatal("the memos beyond the pending touches are not bounded")
	}
	if got := len(pendingTouches(&p.gen)); got != 2*maxSessionMemos || sessions["t0"] == nil {
		t.Fatalf("a clearing lost pending touches: %d left", got)
	}
	if touchedMemos != 2*maxSessionMemos {
		t.Fatalf("touchedMemos %d, want %d", touchedMemos, 2*maxSessionMemos)
	}
	p.OnPluginDone()
	if touchedMemos != 0 {
		t.Fatalf("touchedMemos %d once the root context is done", touchedMemos)
	}
}
