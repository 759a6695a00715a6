package resolve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/llm"
)

// chain is one resolve call's state: the conversation so far and the
// followup turns it produced. It is the Chain its steps see.
type chain struct {
	r          *Resolver
	req        *hostapi.ResolveRequest
	proto      llm.Protocol
	ctx        context.Context
	body       []byte    // the last request sent upstream (original, then each followup)
	turn       *llm.Turn // the answer to body
	turns      []*llm.Turn
	hops       int
	seen       map[[32]byte]int
	compaction bool
	// failure is the short reason of a failed followup ("" if none): the
	// client's text gets a note with it (docs/failures.md).
	failure string
}

var _ Chain = (*chain)(nil)

func (c *chain) Turn() *llm.Turn         { return c.turn }
func (c *chain) SessionID() string       { return c.req.SessionID }
func (c *chain) RequestID() string       { return c.req.RequestID }
func (c *chain) ServerTools() []string   { return c.req.ServerTools }
func (c *chain) Streaming() bool         { return c.req.Streaming }
func (c *chain) Compaction() bool        { return c.compaction }
func (c *chain) Clock() timesource.Clock { return c.r.cfg.Clock }
func (c *chain) AssignCallIDs()          { llm.AssignCallIDs(c.proto, c.body, c.turn) }

// NextID is the followup request id: `<parent>:<kind><hop>`, so that
// notBeforeRequestId prefix matching covers every followup of the chain.
func (c *chain) NextID(kind string) string {
	return c.req.RequestID + ":" + kind + strconv.Itoa(c.hops+1)
}

// Guard is the hop guard: at most MaxHops followups per chain (docs/continuation.md).
func (c *chain) Guard() string {
	if c.hops >= c.r.cfg.MaxHops {
		return ReasonMaxHops
	}
	return ""
}

// run loops until the chain ends and returns why. After each turn the
// steps decide in their order (docs/continuation.md#the-followup-chain); the first one that
// continues the turn gets its followup sent. The cancel, duration and
// repetition guards are checked here, the hop guard by the steps through
// Guard before they act.
func (c *chain) run() string {
	for {
		if reason := Stopped(c.ctx); reason != "" {
			return reason
		}
		step, f, reason := c.next()
		if reason != "" {
			return reason
		}
		if step == nil {
			return ReasonDone
		}
		if reason := c.send(step.Kind(), f); reason != "" {
			return reason
		}
	}
}

// next asks the steps in order. It returns the step that continues the
// turn and its followup, or the reason the chain ends, or neither when no
// step applies.
func (c *chain) next() (Step, Followup, string) {
	for _, s := range c.r.cfg.Steps {
		f, ok, reason := s.Next(c.ctx, c)
		switch {
		case reason != "":
			return nil, Followup{}, reason
		case ok:
			return s, f, ""
		}
	}
	return nil, Followup{}, ""
}

// send builds and posts one followup and advances the chain with its
// answer. It returns the reason the chain ends, or "" to go on. f settles
// exactly once.
func (c *chain) send(kind string, f Followup) string {
	cfg := &c.r.cfg
	id := f.ID
	if id == "" {
		id = c.NextID(kind)
	}
	body, err := llm.BuildFollowup(c.proto, c.body, c.turn, f.Results, f.UserText)
	if err != nil {
		c.r.log.Warn("followup cannot be built", "request", c.req.RequestID, "kind", kind, "err", err)
		f.settle(Unsent)
		c.fail(kind, FailureUnsent, "the followup could not be built")
		return ReasonError
	}
	c.hops++
	cfg.Observer.Followup(kind)
	turn, status, err := c.post(id, body)
	if status >= 200 && status < 300 {
		f.settle(Delivered)
	} else {
		f.settle(Failed)
	}
	if err != nil {
		if reason := Stopped(c.ctx); reason != "" {
			return reason
		}
		// The provider's status and short reason only: never the body
		// sent, which holds the conversation and reminder text.
		c.r.log.Warn("followup failed; the client gets the last good turn with a note",
			"request", id, "kind", kind, "status", status, "reason", err)
		code := FailureNoAnswer
		if status != 0 {
			code = strconv.Itoa(status)
		}
		c.fail(kind, code, err.Error())
		if status >= 400 && status < 500 {
			return ReasonRejected
		}
		return ReasonUpstreamError
	}
	key := pairKey(c.turn, f.Results, f.UserText, turn)
	c.body, c.turn = body, turn
	c.turns = append(c.turns, turn)
	c.seen[key]++
	if c.seen[key] >= cfg.RepeatLimit {
		return ReasonRepeated
	}
	return ""
}

// fail records a failed followup: counted, and noted for the client.
func (c *chain) fail(kind, code, reason string) {
	c.r.cfg.Observer.FollowupFailed(kind, code)
	c.failure = reason
}

// post sends a followup through the proxy listener (docs/architecture.md) and parses
// the JSON answer. status is 0 when no response arrived. The error says
// what failed in a few words, fit for the client's note and the log: the
// status and the provider's error type and message, never the request.
func (c *chain) post(id string, body []byte) (*llm.Turn, int, error) {
	cfg := &c.r.cfg
	url := "http://" + c.req.Reentry + c.req.Path
	req, err := http.NewRequestWithContext(c.ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	copyHeaders(req.Header, c.req.Headers)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Request-Id", id)
	req.Header.Set(hostapi.HeaderFollowup, hostapi.FollowupMarker(cfg.Token, id, cfg.Clock.Now()))
	resp, err := cfg.Client.Do(req)
	if err != nil {
		c.r.log.Debug("followup got no answer", "request", id, "err", err)
		return nil, 0, errors.New("no answer from the provider")
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, cfg.MaxResponseBytes+1))
	if err != nil {
		return nil, resp.StatusCode, fmt.Errorf("%d, the answer could not be read", resp.StatusCode)
	}
	if int64(len(raw)) > cfg.MaxResponseBytes {
		return nil, resp.StatusCode, fmt.Errorf("%d, the answer is over %d bytes", resp.StatusCode, cfg.MaxResponseBytes)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return nil, resp.StatusCode, errors.New(statusReason(resp.StatusCode, raw))
	}
	turn, err := llm.ParseResponse(c.proto, raw)
	if err != nil {
		var perr *llm.ProviderError
		if errors.As(err, &perr) {
			return nil, resp.StatusCode, fmt.Errorf("%d, provider error %s", resp.StatusCode, shortReason(perr.Type, perr.Message))
		}
		return nil, resp.StatusCode, fmt.Errorf("%d, the answer is not a %s response", resp.StatusCode, c.proto)
	}
	return turn, resp.StatusCode, nil
}

// maxReason and maxType bound the provider message and error type quoted
// in a note or log line.
const (
	maxReason = 200
	maxType   = 60
)

// statusReason is "<status> <error type>: <message>" from a provider error
// body (Anthropic {type:error,error:{type,message}}, OpenAI
// {error:{type|code,message}}), or the status text when the body is not one.
func statusReason(status int, body []byte) string {
	e := gjson.GetBytes(body, "error")
	typ := e.Get("type").String()
	if typ == "" {
		typ = e.Get("code").String()
	}
	msg := e.Get("message").String()
	if !e.IsObject() || (typ == "" && msg == "") {
		return strings.TrimSpace(strconv.Itoa(status) + " " + http.StatusText(status))
	}
	return strconv.Itoa(status) + " " + shortReason(typ, msg)
}

// shortReason joins an error type and message on one line, at most
// maxType and maxReason runes of them.
func shortReason(typ, msg string) string {
	typ, msg = oneLine(typ, maxType), oneLine(msg, maxReason)
	switch {
	case typ == "":
		return msg
	case msg == "":
		return typ
	}
	return typ + ": " + msg
}

// dropped are headers a followup must not repeat: framing and hop-by-hop
// headers (RFC 9110 §7.6.1), compression (bodies are parsed), and the
// ones the host sets itself.
var dropped = map[string]bool{
	"content-length": true, "host": true, "connection": true, "keep-alive": true,
	"proxy-connection": true, "proxy-authenticate": true, "proxy-authorization": true,
	"te": true, "trailer": true, "transfer-encoding": true, "upgrade": true,
	"accept-encoding": true, "expect": true, "content-type": true, "accept": true,
	"x-request-id": true, hostapi.HeaderFollowup: true,
}

func copyHeaders(dst http.Header, src map[string]string) {
	listed := map[string]bool{} // named by Connection: hop-by-hop too
	for k, v := range src {
		if strings.EqualFold(k, "connection") {
			for _, name := range strings.Split(v, ",") {
				listed[strings.ToLower(strings.TrimSpace(name))] = true
			}
		}
	}
	for k, v := range src {
		lk := strings.ToLower(k)
		if dropped[lk] || listed[lk] || strings.HasPrefix(lk, ":") || strings.HasPrefix(lk, "x-envoy-") {
			continue
		}
		dst.Set(k, v)
	}
}

// answer folds the chain's followup turns into the continuation (docs/architecture.md:
// text in order, the last turn's tool calls and finish, usage summed).
// Server-tool calls never reach the client: a last turn left with only
// those ends as a plain stop.
//
// A failed followup is never silent (docs/failures.md): the continuation is the
// last good turn (the followups that came back, or nothing more than the
// original) with a note saying the continuation failed.
func (c *chain) answer(reason string) hostapi.ResolveResponse {
	resp := hostapi.ResolveResponse{Reason: reason, Hops: c.hops}
	if reason == ReasonCancelled {
		return resp
	}
	var cont *llm.Turn
	switch {
	case len(c.turns) > 0:
		cont = fold(c.turns, c.req.ServerTools)
	case c.failure != "":
		// Only the original came back: the note alone continues it.
		cont = &llm.Turn{Finish: c.req.Turn.Finish}
		if cont.Finish.Reason == llm.FinishToolCalls || cont.Finish.Reason == llm.FinishNone {
			cont.Finish = llm.Finish{Reason: llm.FinishStop}
		}
	default:
		return resp
	}
	if c.failure != "" {
		cont.Text = llm.JoinText(cont.Text, fmt.Sprintf(FailureNote, c.failure))
	}
	resp.Continued = true
	resp.Continuation = cont
	return resp
}

func fold(turns []*llm.Turn, serverTools []string) *llm.Turn {
	first := *turns[0]
	out := &first
	for _, t := range turns[1:] {
		out = llm.Merge(out, t)
	}
	last := turns[len(turns)-1]
	out.ToolCalls = last.ClientCalls(serverTools)
	if len(last.ToolCalls) > 0 && len(out.ToolCalls) == 0 {
		out.Finish = llm.Finish{Reason: llm.FinishStop}
	}
	return out
}

// oneLine collapses s's whitespace to single spaces and cuts it to n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n]) + "…"
	}
	return s
}

// IsFollowupID reports whether id has the form NextID gives a followup,
// "<request id>:<kind><hop>": such a request is sent, and its reservation
// settled, by the host process that runs the chain.
func IsFollowupID(id string) bool {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 {
		return false
	}
	suffix := id[i+1:]
	j := strings.IndexFunc(suffix, func(r rune) bool { return r < 'a' || r > 'z' })
	if j <= 0 || j == len(suffix) {
		return false
	}
	for _, r := range suffix[j:] {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
