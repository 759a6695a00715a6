package filter

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/chimehq/chime/internal/memeq"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// Skipping prepare (docs/architecture.md#skipping-prepare, RATIONALE.md).
// Each prepare answer says under which host generation it was computed
// and for how long the session stays quiet (nothing due, nothing pending,
// no stopMessage). The filter keeps that per session in proxy shared data
// (every worker's VM sees it) and forwards a request that carries no
// directive, of a session whose entry is quiet now under the generation
// the filter trusts, with what the prepare would have answered: the
// tools, the route, the template wish, and a time tag from its own clock.
// The generation comes from a long poll of the host (hostapi skip.go);
// sessions seen without a prepare are reported on the tick (PathTouch).

// MetricPrepareSkipped counts requests forwarded without a prepare call.
const MetricPrepareSkipped = "chime_prepare_skipped_total"

const (
	quietKeyPrefix = "chime.quiet.s."
	quietKeyNone   = "chime.quiet.none" // requests without a session id
	// maxQuietSessionLen bounds the session ids that get an entry.
	maxQuietSessionLen = 256
	// maxTouches bounds the sessions waiting for the tick's PathTouch.
	maxTouches = 4 * hostapi.MaxTouchSessions
)

// quietEntry is a session's last prepare answer, as far as a skipped
// request needs it.
type quietEntry struct {
	gen      int64
	until    int64 // filter clock, Unix ms: quiet before this
	created  int64 // filter clock, Unix ms: a clock that went back invalidates
	template bool
	tools    []string
	route    string
}

// encode is "v1\n<gen>\n<until>\n<created>\n<template>\n<tools,...>\n<route>";
// the route is last, so it may hold anything.
func (e quietEntry) encode() []byte {
	b := make([]byte, 0, 96+len(e.route))
	b = append(b, "v1\n"...)
	b = strconv.AppendInt(b, e.gen, 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, e.until, 10)
	b = append(b, '\n')
	b = strconv.AppendInt(b, e.created, 10)
	b = append(b, '\n')
	if e.template {
		b = append(b, '1')
	} else {
		b = append(b, '0')
	}
	b = append(b, '\n')
	b = append(b, strings.Join(e.tools, ",")...)
	b = append(b, '\n')
	return append(b, e.route...)
}

func decodeQuietEntry(raw []byte) (quietEntry, bool) {
	// By hand, not strings.Split: this runs on every request of a quiet
	// session, and each allocation costs the guest's GC.
	var parts [7][]byte
	rest := raw
	for i := range 6 {
		j := bytes.IndexByte(rest, '\n')
		if j < 0 {
			return quietEntry{}, false
		}
		parts[i], rest = rest[:j], rest[j+1:]
	}
	parts[6] = rest
	if string(parts[0]) != "v1" {
		return quietEntry{}, false
	}
	var e quietEntry
	var err1, err2, err3 error
	e.gen, err1 = strconv.ParseInt(string(parts[1]), 10, 64)
	e.until, err2 = strconv.ParseInt(string(parts[2]), 10, 64)
	e.created, err3 = strconv.ParseInt(string(parts[3]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || (string(parts[4]) != "0" && string(parts[4]) != "1") {
		return quietEntry{}, false
	}
	e.template = string(parts[4]) == "1"
	if len(parts[5]) > 0 {
		n := bytes.Count(parts[5], []byte{','}) + 1
		e.tools = make([]string, 0, n)
		for t := range bytes.SplitSeq(parts[5], []byte{','}) {
			e.tools = append(e.tools, internToolName(t))
		}
	}
	e.route = string(parts[6])
	return e, true
}

// internToolName is string(b), without an allocation for the names of
// the filter's own tools.
func internToolName(b []byte) string {
	if spec, ok := serverTools[string(b)]; ok {
		return spec.Name
	}
	return string(b)
}

// quietKey is the shared-data key of a session's entry; "" when the
// session gets none.
func quietKey(sid string) string {
	switch {
	case sid == "":
		return quietKeyNone
	case len(sid) > maxQuietSessionLen:
		return ""
	}
	return sessionKey(keyQuiet, sid)
}

// The shared-data keys of a session, by kind.
const (
	keyQuiet = iota
	keyKept
	keyRoute
)

// sessionMemo is what this VM remembers of a recent session: its
// shared-data keys (each a prefix and the id, a concatenation and an
// allocation in the guest), the quiet entry it last decoded, and a touch
// not yet sent. One lookup per request finds them all: a proxy
// interleaves many sessions' requests, and string keys hash slowly in
// wasm. The guest is single-threaded; the memos are this VM's.
type sessionMemo struct {
	sid  string
	keys [3]string
	// quietRaw is the quiet entry's bytes last read, decoded as quiet.
	quietRaw []byte
	quiet    quietEntry
	// touchAt is the host time of the latest request skipped since the
	// last PathTouch, pending in touchOwner's list (nil: none pending).
	touchAt    int64
	touchOwner *genState
}

var (
	sessions = map[string]*sessionMemo{}
	// lastSession is the latest memo looked up: a request looks its
	// session up several times, and a compare is cheaper than a hash.
	lastSession *sessionMemo
	// noSession holds the quiet entry of requests without a session id.
	noSession = &sessionMemo{keys: [3]string{keyQuiet: quietKeyNone}}
)

// maxSessionMemos bounds the memos beside those with a touch pending
// (touchedMemos of them, at most maxTouches per root context), which
// stay when the others are cleared.
const maxSessionMemos = 1024

var touchedMemos int

// memoOf returns session sid's memo (sid not empty).
func memoOf(sid string) *sessionMemo {
	if m := lastSession; m != nil && m.sid == sid {
		return m
	}
	m, ok := sessions[sid]
	if !ok {
		m = newMemo(sid)
	}
	lastSession = m
	return m
}

// newMemo adds session sid's memo, apart from memoOf: a request under
// load runs its code cold (docs/performance.md), and most find theirs.
//
//go:noinline
func newMemo(sid string) *sessionMemo {
	if len(sessions)-touchedMemos >= maxSessionMemos {
		clear(sessions)
		// Memos with a touch pending stay: each session's touch is in
		// one memo only.
		for _, g := range touchLists {
			for _, t := range g.touched {
				sessions[t.sid] = t
			}
		}
	}
	sid = strings.Clone(sid) // not a view into a header or body buffer
	m := &sessionMemo{sid: sid, keys: [3]string{quietKeyPrefix + sid, keptKeyPrefix + sid, routeKeyPrefix + sid}}
	sessions[sid] = m
	return m
}

// sessionKey is the shared-data key of kind for session sid (not empty).
func sessionKey(kind int, sid string) string { return memoOf(sid).keys[kind] }

// loadQuiet reads a session's entry and its CAS token.
func loadQuiet(key string) (quietEntry, uint32, bool) {
	raw, cas, err := proxywasm.GetSharedData(key)
	if err != nil {
		if err != proxywasm.ErrNotFound {
			proxywasm.LogDebugf("chime: read quiet entry: %v", err)
		}
		return quietEntry{}, cas, false
	}
	e, ok := decodeQuietEntry(raw)
	return e, cas, ok
}

// loadQuietCached is loadQuiet for the request path, from m's key: an
// entry whose bytes this VM decoded before for the session is not
// decoded again (its tools slice is shared and never written).
func loadQuietCached(m *sessionMemo) (quietEntry, bool) {
	raw, _, err := proxywasm.GetSharedData(m.keys[keyQuiet])
	if err != nil {
		if err != proxywasm.ErrNotFound {
			proxywasm.LogDebugf("chime: read quiet entry: %v", err)
		}
		return quietEntry{}, false
	}
	// The bytes are only read here (the memo keeps a copy): the buffer
	// goes back for the next read.
	defer proxywasm.RecycleBuffer(raw)
	if m.quietRaw != nil && memeq.Equal(raw, m.quietRaw) {
		return m.quiet, true
	}
	return m.decodeQuiet(raw)
}

// decodeQuiet decodes raw into the memo, apart from loadQuietCached:
// most requests find the entry decoded, and a request under load runs
// its code cold (docs/performance.md).
//
//go:noinline
func (m *sessionMemo) decodeQuiet(raw []byte) (quietEntry, bool) {
	e, ok := decodeQuietEntry(raw)
	if !ok {
		m.quietRaw = nil
		return quietEntry{}, false
	}
	m.quietRaw = append(m.quietRaw[:0], raw...)
	m.quiet = e
	return e, true
}

// storeQuiet records e for sid unless the entry there is of a later
// generation (an answer that arrives late must not undo a newer one).
//
// A session with kept directives (keep.go) is never left quiet, so that a
// request need not read them to skip: a quiet entry is written first and
// the kept ones read after, while keepDirectives writes them first and
// ends the quiet after. Whichever runs second sees the other's write.
func storeQuiet(sid string, e quietEntry) {
	key := quietKey(sid)
	if key == "" {
		return
	}
	for range casRetries {
		old, cas, ok := loadQuiet(key)
		if ok && old.gen > e.gen {
			return
		}
		if proxywasm.SetSharedData(key, e.encode(), cas) == nil {
			if e.until > 0 && hasKept(sid) {
				endQuiet(sid)
			}
			return
		}
	}
}

// endQuiet makes sid's entry not quiet: its next request asks the host.
// When another VM keeps writing the entry, that VM's storeQuiet sees the
// reason (the kept directives) itself.
func endQuiet(sid string) {
	key := quietKey(sid)
	if key == "" {
		return
	}
	for range casRetries {
		e, cas, ok := loadQuiet(key)
		if !ok || e.until == 0 {
			return
		}
		e.until = 0
		if proxywasm.SetSharedData(key, e.encode(), cas) == nil {
			return
		}
	}
}

// genState is the generation this root context trusts (tick.go polls it).
type genState struct {
	instance  string
	known     int64     // 0 = none: nothing is skipped
	anchor    time.Time // send time of the poll that last confirmed known; zero = not trusted
	polling   bool      // a poll is outstanding
	pollStart time.Time
	// touched are the memos of the sessions seen without a prepare since
	// the last PathTouch, each with its latest time (touchAt) and once.
	touched []*sessionMemo
	// touches holds the touches of sessions whose memo has one pending
	// for another root context of this VM (two chime filters sharing a
	// VM and a session): session → host time.
	touches map[string]int64
	listed  bool // in touchLists
}

// touchLists are the genStates with touches pending: memoOf keeps their
// memos when it clears the others.
var touchLists = map[*genState]*genState{}

func newInstanceID() string {
	var b [8]byte
	v := rand.Uint64()
	for i := range b {
		b[i] = byte(v >> (8 * i))
	}
	return hex.EncodeToString(b[:])
}

// trusted reports whether known may be relied on at now.
func (p *pluginContext) trusted(now time.Time) bool {
	g := &p.gen
	return g.known != 0 && !g.anchor.IsZero() && !now.Before(g.anchor) && now.Sub(g.anchor) < hostapi.GenerationTrust
}

// startPoll sends the generation long poll unless one is outstanding.
func (p *pluginContext) startPoll() {
	g := &p.gen
	if !p.cfg.SkipPrepare || (g.polling && p.now().Sub(g.pollStart) < 2*hostapi.GenerationPollTimeout) {
		return
	}
	sent := p.now()
	path := hostapi.PathState + "?" + hostapi.QueryGeneration + "=" + strconv.FormatInt(g.known, 10) +
		"&" + hostapi.QueryInstance + "=" + g.instance
	err := p.callHost(path, nil, hostapi.GenerationPollTimeout.Milliseconds(), func(numHeaders, bodySize, _ int) {
		g.polling = false
		var st hostapi.StateResponse
		if failure := readAnswer(numHeaders, bodySize, &st); failure != "" {
			g.anchor = time.Time{} // the host may have moved on: ask it again
			p.hostFailures.inc()
			proxywasm.LogDebugf("chime: generation poll failed: %s", failure)
			return
		}
		p.learnNTP(st.NTP)
		defer p.hostAnswered() // resend kept outcomes (outcome.go)
		if st.Generation == 0 {
			g.known, g.anchor = 0, time.Time{} // a host without generations: always prepare
			return
		}
		g.known, g.anchor = st.Generation, sent
		p.startPoll()
	})
	if err != nil {
		g.anchor = time.Time{}
		p.hostFailures.inc()
		proxywasm.LogDebugf("chime: cannot send the generation poll: %v", err)
		return
	}
	g.polling, g.pollStart = true, sent
}

// quietFor returns the entry that lets a request of sid skip prepare.
func (p *pluginContext) quietFor(sid string, now time.Time) (quietEntry, bool) {
	if !p.cfg.SkipPrepare {
		return quietEntry{}, false
	}
	if !p.trusted(now) {
		if p.gen.pollStart.IsZero() {
			// A VM's first request starts the first poll, not its
			// first tick: it skips from one host round trip on. Later
			// polls are the tick's, so a host that is down is not
			// asked on every request.
			p.startPoll()
		}
		return quietEntry{}, false
	}
	var m *sessionMemo
	switch {
	case sid == "":
		m = noSession
	case len(sid) > maxQuietSessionLen:
		return quietEntry{}, false // no entry (quietKey)
	default:
		m = memoOf(sid)
	}
	e, ok := loadQuietCached(m)
	ms := now.UnixMilli()
	if !ok || e.gen != p.gen.known || ms >= e.until || ms < e.created {
		return quietEntry{}, false
	}
	return e, true
}

// learnQuiet records a prepare answer sent at sent for sid.
func (p *pluginContext) learnQuiet(sid string, sent time.Time, ans *hostapi.PrepareResponse) {
	if !p.cfg.SkipPrepare || ans.Generation == 0 {
		return
	}
	ms := sent.UnixMilli()
	e := quietEntry{gen: ans.Generation, created: ms, template: ans.Template, tools: ans.Tools, route: ans.Route}
	if ans.QuietMs > 0 && !ans.Reserved && !ans.MayContinue && ans.Reminders == "" {
		e.until = ms + min(ans.QuietMs, hostapi.MaxQuiet.Milliseconds())
	}
	storeQuiet(sid, e)
}

// raiseQuietFloor invalidates sid's entry up to generation gen: the host
// changed the session (a resolve ran its tools) and only a prepare of gen
// or later reflects it.
func raiseQuietFloor(sid string, gen int64) {
	if gen != 0 {
		storeQuiet(sid, quietEntry{gen: gen})
	}
}

// skip finishes a request whose session is quiet, as its prepare answer
// would have.
func (h *httpContext) skip(e quietEntry, now time.Time) {
	p := h.plugin
	p.prepareSkipped.inc()
	h.prepareSettled() // no prepare will be sent (loadtimeout.go)
	ans := hostapi.PrepareResponse{Tools: e.tools, Route: e.route, Template: e.template}
	h.wantTemplate = e.template
	h.routeFromAnswer(e.route, false)
	h.rewriteAt(&ans, now)
	if h.sessionID != "" {
		p.noteTouch(h.sessionID, now)
	}
}

// noteTouch remembers a session seen without a prepare for PathTouch.
func (p *pluginContext) noteTouch(sid string, now time.Time) {
	g := &p.gen
	at := now.UnixMilli() + p.ntpOffsetMs
	m := memoOf(sid)
	switch m.touchOwner {
	case g: // most requests: the session's touch is pending
		m.touchAt = at
	case nil:
		g.addTouch(m, at)
	default:
		g.noteOtherTouch(sid, at)
	}
}

// addTouch makes m's touch g's (once per session between PathTouches).
//
//go:noinline
func (g *genState) addTouch(m *sessionMemo, at int64) {
	if len(g.touches) > 0 {
		delete(g.touches, m.sid) // now in the memo
	}
	if len(g.touched)+len(g.touches) >= maxTouches {
		return // the host hears of it with the session's next prepare
	}
	m.touchAt, m.touchOwner = at, g
	g.touched = append(g.touched, m)
	touchedMemos++
	g.listTouches()
}

// noteOtherTouch records a touch of a session whose memo holds another
// root context's (rare: kept out of noteTouch).
//
//go:noinline
func (g *genState) noteOtherTouch(sid string, at int64) {
	if g.touches == nil {
		g.touches = map[string]int64{}
	}
	if _, ok := g.touches[sid]; !ok && len(g.touched)+len(g.touches) >= maxTouches {
		return
	}
	g.touches[sid] = at
	g.listTouches()
}

// listTouches puts g in touchLists (memoOf keeps its memos).
func (g *genState) listTouches() {
	if !g.listed {
		touchLists[g], g.listed = g, true
	}
}

// dropTouches forgets g's pending touches (its root context is done):
// their memos take other root contexts' touches again.
func (g *genState) dropTouches() {
	for _, m := range g.touched {
		m.touchAt, m.touchOwner = 0, nil
	}
	touchedMemos -= len(g.touched)
	g.touched, g.touches = nil, nil
	delete(touchLists, g)
	g.listed = false
}

// flushTouches sends the sessions seen without a prepare (the tick, and
// the plugin's end). It reports whether a call went out; then, when the
// call is answered (or fails), then runs if it is not nil.
func (p *pluginContext) flushTouches(then func()) bool {
	g := &p.gen
	n := len(g.touched) + len(g.touches)
	if n == 0 {
		return false
	}
	req := hostapi.TouchRequest{Sessions: make([]hostapi.SessionTouch, 0, min(n, hostapi.MaxTouchSessions))}
	sent := 0
	for _, m := range g.touched {
		if len(req.Sessions) == hostapi.MaxTouchSessions {
			break
		}
		req.Sessions = append(req.Sessions, hostapi.SessionTouch{SessionID: m.sid, AtMs: m.touchAt})
		m.touchAt, m.touchOwner = 0, nil
		sent++
	}
	g.touched = append(g.touched[:0], g.touched[sent:]...)
	touchedMemos -= sent
	for sid, at := range g.touches {
		if len(req.Sessions) == hostapi.MaxTouchSessions {
			break
		}
		req.Sessions = append(req.Sessions, hostapi.SessionTouch{SessionID: sid, AtMs: at})
		delete(g.touches, sid)
	}
	if len(g.touched)+len(g.touches) == 0 {
		delete(touchLists, g)
		g.listed = false
	}
	body := encodeTouches(req)
	if err := p.callHost(hostapi.PathTouch, body, backgroundTimeoutMs, func(numHeaders, bodySize, _ int) {
		if failure := readAnswer(numHeaders, bodySize, nil); failure != "" {
			p.hostFailures.inc()
			proxywasm.LogDebugf("chime: touch failed: %s", failure)
		}
		if then != nil {
			then()
		}
	}); err != nil {
		p.hostFailures.inc()
		proxywasm.LogDebugf("chime: cannot send touches: %v", err)
		return false
	}
	return true
}

// encodeTouches is json.Marshal(req).
func encodeTouches(req hostapi.TouchRequest) []byte {
	b := append(make([]byte, 0, 16+64*len(req.Sessions)), `{"sessions":[`...)
	for i, t := range req.Sessions {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"sessionId":`...)
		b = appendJSONString(b, t.SessionID)
		b = append(b, `,"atMs":`...)
		b = strconv.AppendInt(b, t.AtMs, 10)
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
