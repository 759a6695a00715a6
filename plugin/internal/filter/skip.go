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

// keyCache memoizes the shared-data keys of recent sessions: each is a
// prefix and the session id, a concatenation (an allocation in the
// guest) that would otherwise run three times per request. The guest is
// single-threaded; the map is this VM's.
var keyCache = map[string]*[3]string{}

const maxKeyCache = 1024

// sessionKey is the shared-data key of kind for session sid (not empty).
func sessionKey(kind int, sid string) string {
	if sid == lastKeys.sid && lastKeys.keys != nil {
		return lastKeys.keys[kind]
	}
	k, ok := keyCache[sid]
	if !ok {
		if len(keyCache) >= maxKeyCache {
			clear(keyCache)
		}
		sid = strings.Clone(sid) // not a view into a header or body buffer
		k = &[3]string{quietKeyPrefix + sid, keptKeyPrefix + sid, routeKeyPrefix + sid}
		keyCache[sid] = k
	}
	lastKeys.sid, lastKeys.keys = sid, k
	return k[kind]
}

// lastKeys is the session of the latest sessionKey: most requests in a
// row are one session's, and a compare is cheaper than a string hash.
var lastKeys struct {
	sid  string
	keys *[3]string
}

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

// maxDecodedQuiet bounds the VM's cache of decoded quiet entries.
const maxDecodedQuiet = 1024

// loadQuietCached is loadQuiet for the request path: an entry whose bytes
// this VM decoded before is not decoded again (its tools slice is shared
// and never written).
func (p *pluginContext) loadQuietCached(key string) (quietEntry, bool) {
	raw, _, err := proxywasm.GetSharedData(key)
	if err != nil {
		if err != proxywasm.ErrNotFound {
			proxywasm.LogDebugf("chime: read quiet entry: %v", err)
		}
		return quietEntry{}, false
	}
	// The bytes are only read here (the decoding holds copies): the
	// buffer goes back for the next read.
	defer proxywasm.RecycleBuffer(raw)
	if p.lastQuiet.ok && memeq.Equal(raw, p.lastQuiet.raw) {
		return p.lastQuiet.e, true
	}
	if e, ok := p.decodedQuiet[string(raw)]; ok {
		p.rememberQuiet(raw, e)
		return e, true
	}
	e, ok := decodeQuietEntry(raw)
	if !ok {
		return quietEntry{}, false
	}
	if p.decodedQuiet == nil || len(p.decodedQuiet) >= maxDecodedQuiet {
		p.decodedQuiet = make(map[string]quietEntry)
	}
	p.decodedQuiet[string(raw)] = e
	p.rememberQuiet(raw, e)
	return e, true
}

// rememberQuiet keeps the latest entry read and its bytes, checked
// before decodedQuiet: a compare instead of a string hash.
func (p *pluginContext) rememberQuiet(raw []byte, e quietEntry) {
	p.lastQuiet.raw = append(p.lastQuiet.raw[:0], raw...)
	p.lastQuiet.e, p.lastQuiet.ok = e, true
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
	touches   map[string]int64 // session → host time of its latest skipped request
	// lastTouch is the latest touch, kept out of touches until another
	// session's comes: one session's run of requests costs no map write
	// each (string keys hash slowly in wasm).
	lastTouch struct {
		sid string
		at  int64
	}
}

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
	key := quietKey(sid)
	if key == "" {
		return quietEntry{}, false
	}
	e, ok := p.loadQuietCached(key)
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
	if g.lastTouch.sid == sid {
		g.lastTouch.at = at
		return
	}
	g.commitTouch()
	g.lastTouch.sid, g.lastTouch.at = sid, at
}

// commitTouch moves lastTouch into touches.
func (g *genState) commitTouch() {
	sid := g.lastTouch.sid
	if sid == "" {
		return
	}
	g.lastTouch.sid = ""
	if g.touches == nil {
		g.touches = map[string]int64{}
	}
	if _, ok := g.touches[sid]; !ok && len(g.touches) >= maxTouches {
		return // the host hears of it with the session's next prepare
	}
	g.touches[sid] = g.lastTouch.at
}

// flushTouches sends the sessions seen without a prepare (the tick).
func (p *pluginContext) flushTouches() {
	g := &p.gen
	g.commitTouch()
	if len(g.touches) == 0 {
		return
	}
	req := hostapi.TouchRequest{Sessions: make([]hostapi.SessionTouch, 0, min(len(g.touches), hostapi.MaxTouchSessions))}
	for sid, at := range g.touches {
		if len(req.Sessions) == hostapi.MaxTouchSessions {
			break
		}
		req.Sessions = append(req.Sessions, hostapi.SessionTouch{SessionID: sid, AtMs: at})
		delete(g.touches, sid)
	}
	body := encodeTouches(req)
	if err := p.callHost(hostapi.PathTouch, body, backgroundTimeoutMs, func(numHeaders, bodySize, _ int) {
		if failure := readAnswer(numHeaders, bodySize, nil); failure != "" {
			p.hostFailures.inc()
			proxywasm.LogDebugf("chime: touch failed: %s", failure)
		}
	}); err != nil {
		p.hostFailures.inc()
		proxywasm.LogDebugf("chime: cannot send touches: %v", err)
	}
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
