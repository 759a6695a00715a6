package host

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/host/delivery"
	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/host/route"
	"github.com/chimehq/chime/host/scheduler"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/storage"
)

// Wake runs (docs/scheduler.md#runs): the host runs the model for a
// session whose client is away, from the session's template — its last
// request through chime and the answer it got — plus one user item with
// the heartbeat prompt, the queued system events, the due reminders and a
// time tag, and delivers the reply.

// Run statuses of docs/scheduler.md#runs.
const (
	RunSent    = "sent"
	RunOKAck   = "ok-ack"
	RunOKEmpty = "ok-empty"
	RunSkipped = "skipped"
	RunFailed  = "failed"
)

// Limits of the run history and what a run record keeps.
const (
	maxRunsKept   = 50
	maxReplyKept  = 4000
	busyRetry     = 5 * time.Second
	maxWakeAnswer = 32 << 20
)

// credentialHeaders are the request headers that are never written to
// disk: the host keeps them in memory only (docs/scheduler.md#credentials).
var credentialHeaders = map[string]bool{
	"authorization": true, "x-api-key": true, "api-key": true, "x-goog-api-key": true,
	"proxy-authorization": true, "cookie": true,
}

// wakeState is the memory side of templates and run budgets.
type wakeState struct {
	mu        sync.Mutex
	creds     map[string]map[string]string  // session → credential headers
	templated map[string]bool               // sessions with a stored template
	hbOn      map[string]bool               // sessions whose effective heartbeat is on
	budget    map[string][]time.Time        // session → recent non-manual run starts
	seq       map[string]int64              // session → the last run number
	mcp       map[string]*mcp.ServerSession // session → its latest MCP connection

	pendingRuns map[string][]storage.WakeRun // run records waiting for the next flush
	nPending    int
	flushNow    chan struct{}
	flushMu     sync.Mutex
}

func newWakeState() wakeState {
	return wakeState{creds: map[string]map[string]string{}, templated: map[string]bool{},
		hbOn: map[string]bool{}, budget: map[string][]time.Time{}, seq: map[string]int64{}, mcp: map[string]*mcp.ServerSession{},
		pendingRuns: map[string][]storage.WakeRun{}, flushNow: make(chan struct{}, 1)}
}

// wakeRunner adapts the service to scheduler.Runner.
type wakeRunner struct{ s *Service }

func (r wakeRunner) Run(ctx context.Context, sid string, reason scheduler.Reason, attempt int) scheduler.Outcome {
	return r.s.runWake(ctx, sid, reason, attempt)
}

// RequestWake asks the scheduler for a run of the session
// (docs/scheduler.md): the one entry point of every wake.
func (s *Service) RequestWake(sid string, reason scheduler.Reason) {
	if s.cfg.Wake.Disabled || sid == "" {
		return
	}
	s.sched.RequestWake(sid, reason)
}

// wantsTemplate reports whether a session can be woken, so its requests
// are worth keeping as its template: its heartbeat is on, or it has
// queued events, clock tasks or live timers, or it was woken before.
func (s *Service) wantsTemplate(sid string) bool {
	return s.wantsTemplateGiven(sid, func() (bool, error) { return s.store.HasTasks(sid) })
}

// wantsTemplateGiven is wantsTemplate with the session's has-tasks read
// supplied (the prepare call has read the session already).
func (s *Service) wantsTemplateGiven(sid string, hasTasks func() (bool, error)) bool {
	if s.cfg.Wake.Disabled || sid == "" {
		return false
	}
	s.wake.mu.Lock()
	on := s.wake.hbOn[sid] || s.wake.templated[sid]
	s.wake.mu.Unlock()
	if on || s.cfg.Heartbeat.Enabled {
		return true
	}
	if _, ok := s.timers.NextNotice(sid); ok {
		return true
	}
	if s.cron.HasJobs(sid) { // a cron job will wake it (docs/cron.md)
		return true
	}
	has, err := hasTasks()
	return err == nil && has
}

// handleTemplate is POST /v1/filter/template.
func (s *Service) handleTemplate(w http.ResponseWriter, r *http.Request) {
	var req hostapi.ResolveRequest
	if !decodeBodyLimit(w, r, &req, maxResolveBody) {
		return
	}
	if req.SessionID == "" || req.Turn == nil || len(req.Request) == 0 || resolve.ParseProtocol(req.Protocol) == 0 {
		writeError(w, http.StatusBadRequest, "a template needs sessionId, protocol, request and turn")
		return
	}
	if err := s.keepTemplate(&req, req.Request, req.Turn); err != nil {
		s.log.Debug("template not kept", "session", req.SessionID, "err", err)
		writeError(w, http.StatusBadRequest, "template not kept: "+err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// keepTemplate stores the request body and its answer as the session's
// wake template: trimmed to the history a wake sends, credentials split
// off into memory.
func (s *Service) keepTemplate(req *hostapi.ResolveRequest, body []byte, turn *llm.Turn) error {
	if strings.HasPrefix(req.RequestID, wakePrefix) || req.SessionID == "" {
		return nil // a wake's own chain is not the client's request
	}
	p := resolve.ParseProtocol(req.Protocol)
	trimmed, err := llm.TrimHistory(p, body, s.cfg.Wake.HistoryTurns)
	if err != nil {
		return err
	}
	if _, err := llm.ParseRequest(p, trimmed); err != nil {
		return err
	}
	creds, rest := map[string]string{}, map[string]string{}
	for k, v := range req.Headers {
		lk := strings.ToLower(k)
		if credentialHeaders[lk] {
			creds[lk] = v
		} else {
			rest[lk] = v
		}
	}
	var rawTurn json.RawMessage
	if turn != nil {
		if rawTurn, err = json.Marshal(turn); err != nil {
			return err
		}
	}
	t := storage.WakeTemplate{
		SessionID: req.SessionID, Protocol: req.Protocol, Path: req.Path, Reentry: req.Reentry,
		Headers: rest, Request: trimmed, Turn: rawTurn, ServerTools: req.ServerTools, Timezone: req.Timezone,
		UpdatedAt: s.now().UnixMilli(),
	}
	if err := s.store.Update(func(tx *storage.Tx) error { return tx.PutWakeTemplate(t) }); err != nil {
		return err
	}
	s.wake.mu.Lock()
	first := !s.wake.templated[req.SessionID]
	s.wake.templated[req.SessionID] = true
	if len(creds) > 0 {
		s.wake.creds[req.SessionID] = creds
	}
	s.wake.mu.Unlock()
	s.metrics.WakeTemplates.Inc()
	if first {
		// Now it can be woken: what it already has due or configured arms.
		s.armHeartbeat(req.SessionID)
		s.noteTasksChanged(context.Background(), req.SessionID)
	}
	return nil
}

// chainFinished keeps a resolved chain's last request and answer as the
// template of a session that can be woken.
func (s *Service) chainFinished(req *hostapi.ResolveRequest, body []byte, last *llm.Turn) {
	if !s.wantsTemplate(req.SessionID) {
		return
	}
	if err := s.keepTemplate(req, body, last); err != nil {
		s.log.Debug("template of a chain not kept", "session", req.SessionID, "err", err)
	}
}

const wakePrefix = clock.WakePrefix

// runWake is one wake run of a session (scheduler.Runner).
func (s *Service) runWake(ctx context.Context, sid string, reason scheduler.Reason, attempt int) scheduler.Outcome {
	start := s.now()
	hb := s.heartbeatFor(sid)
	if reason == scheduler.ReasonInterval {
		if !hb.Enabled {
			return scheduler.Outcome{}
		}
		if w, err := scheduler.ParseActiveHours(hb.ActiveHours); err == nil && !w.Contains(start) {
			s.metrics.WakeSkips.WithLabelValues("inactive_hours").Inc()
			return scheduler.Outcome{}
		}
	}
	manual := reason == scheduler.ReasonManual || reason == scheduler.ReasonHook
	if !manual && s.resolver.Busy(sid) {
		return scheduler.Outcome{Defer: busyRetry} // its client is being answered right now
	}
	if wait := s.untilIdle(sid, start); !manual && wait > 0 {
		// The client is around: what is due reaches its next request;
		// the wake is for when it has gone quiet.
		return scheduler.Outcome{Defer: wait}
	}
	tpl, ok, err := s.template(sid)
	switch {
	case err != nil:
		s.log.Warn("reading a wake template failed", "session", sid, "err", err)
		return scheduler.Outcome{Failed: true}
	case !ok && s.mcpSession(sid) != nil:
		return s.deliverDueToMCP(ctx, sid, reason, start)
	case !ok:
		s.metrics.WakeSkips.WithLabelValues("no_template").Inc()
		if manual {
			s.recordRun(sid, storage.WakeRun{Reason: string(reason), Status: RunSkipped, StartedAt: start.UnixMilli(),
				Why: "no template: the session has sent no request through chime that the host kept"})
		}
		return scheduler.Outcome{}
	}
	rt, _ := route.Pinned(s.store, sid)
	headers, why := s.wakeHeaders(sid, tpl, rt)
	if why != "" {
		s.metrics.WakeSkips.WithLabelValues("no_credentials").Inc()
		s.recordRun(sid, storage.WakeRun{Reason: string(reason), Status: RunSkipped, Why: why, StartedAt: start.UnixMilli()})
		return scheduler.Outcome{}
	}
	if !manual && !s.takeBudget(sid, start) {
		s.metrics.WakeSkips.WithLabelValues("budget").Inc()
		s.recordRun(sid, storage.WakeRun{Reason: string(reason), Status: RunSkipped, StartedAt: start.UnixMilli(),
			Why: fmt.Sprintf("over wake.maxRunsPerHour (%d)", s.cfg.Wake.MaxRunsPerHour)})
		return scheduler.Outcome{}
	}
	events, err := scheduler.Peek(s.store, sid)
	if err != nil {
		s.log.Warn("reading system events failed", "session", sid, "err", err)
		return scheduler.Outcome{Failed: true}
	}
	runID, err := s.nextRunID(sid)
	if err != nil {
		s.log.Warn("numbering a wake run failed", "session", sid, "err", err)
		return scheduler.Outcome{Failed: true}
	}
	s.timers.CompleteDue(ctx, sid)
	loc := s.location(tpl.Timezone)
	rctx := clock.WithLocation(ctx, loc)
	var reminders []clock.Reminder
	if !s.cfg.DisableClock || !s.cfg.DisableTimers {
		if reminders, err = s.engine.Reserve(rctx, sid, runID, start); err != nil {
			s.log.Warn("reserving reminders for a wake failed", "session", sid, "err", err)
			reminders = nil
		}
	}
	rec := storage.WakeRun{ID: runID, Reason: string(reason), StartedAt: start.UnixMilli(), Events: len(events), Reminders: len(reminders)}
	pending := len(events) > 0 || len(reminders) > 0
	if !pending && (reason == scheduler.ReasonTask || reason == scheduler.ReasonTimer ||
		reason == scheduler.ReasonCron || reason == scheduler.ReasonMessage || (reason == scheduler.ReasonInterval && hb.OnlyWhenPending)) {
		// What called for the wake was taken by the client's own request,
		// or the heartbeat only runs when something is pending.
		s.metrics.WakeSkips.WithLabelValues("nothing_pending").Inc()
		if _, err := s.Rollback(ctx, runID); err != nil {
			s.log.Debug("releasing an empty wake reservation failed", "err", err)
		}
		s.noteTasksChanged(ctx, sid)
		return scheduler.Outcome{}
	}
	fail := func(err error) scheduler.Outcome {
		if _, rerr := s.Rollback(ctx, runID); rerr != nil {
			s.log.Warn("rolling back a failed wake's reminders failed", "session", sid, "err", rerr)
		}
		rec.Status, rec.Error = RunFailed, err.Error()
		rec.DurationMs = s.now().Sub(start).Milliseconds()
		s.recordRun(sid, rec)
		s.metrics.WakeRuns.WithLabelValues(string(reason), RunFailed).Inc()
		s.log.Info("wake run failed", "session", sid, "run", runID, "reason", reason, "attempt", attempt, "err", err)
		return scheduler.Outcome{Failed: ctx.Err() == nil}
	}
	text := wakeText(hb, reason, events, reminders, s.timeTag(loc))
	reply, usage, err := s.sendWake(rctx, sid, runID, tpl, headers, rt, text)
	if err != nil {
		return fail(err)
	}
	rec.InputTokens, rec.OutputTokens = usage.InputTokens, usage.OutputTokens
	if _, err := s.Commit(ctx, runID); err != nil {
		s.log.Warn("committing a wake's reminders failed", "session", sid, "err", err)
	}
	if err := scheduler.Ack(s.store, sid, events); err != nil {
		s.log.Warn("acknowledging a wake's events failed; they run again", "session", sid, "err", err)
	}
	rec.Status = classify(reply, hb)
	deliverText := reply
	if rec.Status == RunOKAck && pending {
		// Never silently acked (docs/scheduler.md#ack): what came due
		// reaches the user as it was.
		deliverText = carriedText(events, reminders)
		rec.Status = RunSent
		rec.Why = "the model acked; the events and reminders it carried were delivered as they were"
	}
	if rec.Status == RunSent {
		if err := s.Deliver(ctx, delivery.Item{Session: sid, RunID: runID, Reason: string(reason), Text: deliverText, At: s.now()}); err != nil {
			rec.Error = "delivery: " + err.Error()
			s.log.Warn("delivering a wake's reply failed", "session", sid, "run", runID, "err", err)
		}
	}
	rec.Reply = truncateRunes(reply, maxReplyKept)
	rec.DurationMs = s.now().Sub(start).Milliseconds()
	s.recordRun(sid, rec)
	s.metrics.WakeRuns.WithLabelValues(string(reason), rec.Status).Inc()
	s.log.Info("wake run", "session", sid, "run", runID, "reason", reason, "status", rec.Status,
		"events", len(events), "reminders", len(reminders), "ms", rec.DurationMs)
	s.noteTasksChanged(ctx, sid)
	return scheduler.Outcome{}
}

// untilIdle is how long until the session's client has been quiet for
// wake.afterIdle, 0 when it has.
func (s *Service) untilIdle(sid string, now time.Time) time.Duration {
	idle := s.cfg.Wake.AfterIdle
	if idle <= 0 {
		return 0
	}
	last, ok := s.touches.Get(sid)
	if !ok {
		if sess, found, err := s.store.GetSession(sid); err == nil && found {
			last = sess.LastSeenAt
		}
	}
	return max(time.UnixMilli(last).Add(idle).Sub(now), 0)
}

// template reads the session's stored template.
func (s *Service) template(sid string) (t storage.WakeTemplate, ok bool, err error) {
	err = s.store.View(func(tx *storage.Tx) error {
		t, ok, err = tx.WakeTemplate(sid)
		return err
	})
	return t, ok, err
}

// wakeHeaders are the headers of a wake: the template's, the credentials
// kept in memory, then the configured wake headers. why is set when no
// credentials are known.
func (s *Service) wakeHeaders(sid string, t storage.WakeTemplate, rt string) (map[string]string, string) {
	h := map[string]string{}
	for k, v := range t.Headers {
		h[k] = v
	}
	s.wake.mu.Lock()
	creds := s.wake.creds[sid]
	s.wake.mu.Unlock()
	for k, v := range creds {
		h[k] = v
	}
	conf := s.cfg.Wake.wakeHeaders(rt)
	for k, v := range conf {
		if _, ok := creds[k]; !ok {
			h[k] = v
		}
	}
	if len(creds) == 0 && len(conf) == 0 {
		return nil, "no credentials: the host restarted since the session's last request and wake.headers gives none"
	}
	if rt != "" {
		h[hostapi.HeaderRoute] = rt
	}
	return h, ""
}

// takeBudget counts a run against the session's hourly budget.
func (s *Service) takeBudget(sid string, now time.Time) bool {
	s.wake.mu.Lock()
	defer s.wake.mu.Unlock()
	recent := s.wake.budget[sid][:0]
	for _, t := range s.wake.budget[sid] {
		if now.Sub(t) < time.Hour {
			recent = append(recent, t)
		}
	}
	if len(recent) >= s.cfg.Wake.MaxRunsPerHour {
		s.wake.budget[sid] = recent
		return false
	}
	s.wake.budget[sid] = append(recent, now)
	return true
}

// nextRunID names a run wake:<session>:<n>. n only grows: the larger of
// the last n plus one and the Unix ms now, so ids stay unique across
// restarts without a write per run (an id is part of the delivery's
// idempotency key, docs/delivery.md).
func (s *Service) nextRunID(sid string) (string, error) {
	now := s.now().UnixMilli()
	s.wake.mu.Lock()
	n := max(s.wake.seq[sid]+1, now)
	s.wake.seq[sid] = n
	s.wake.mu.Unlock()
	return wakePrefix + sid + ":" + strconv.FormatInt(n, 10), nil
}

// changed tells the dashboard's change stream that a session changed.
func (s *Service) changed(sid string) {
	s.events.Publish(sid)
	s.gens.bump() // skip.go
}

// timeTag is the time tag of a wake in the session's zone.
func (s *Service) timeTag(loc *time.Location) string {
	return llm.FormatTimeTag(s.cfg.Clock.Now(), loc, s.tracker.Snapshot().OffsetMs)
}

// wakeText is the one user item a wake appends.
func wakeText(hb scheduler.Heartbeat, reason scheduler.Reason, events []storage.SystemEvent, reminders []clock.Reminder, tag string) string {
	var b strings.Builder
	b.WriteString("[chime wake: ")
	b.WriteString(string(reason))
	b.WriteString("] ")
	b.WriteString(hb.Prompt)
	if len(events) > 0 {
		b.WriteString("\n\nSystem events:")
		for _, e := range events {
			b.WriteString("\n- ")
			b.WriteString(e.Text)
		}
	}
	if len(reminders) > 0 {
		b.WriteString("\n\n")
		b.WriteString(clock.RenderReminders(reminders))
	}
	b.WriteString("\n\n")
	b.WriteString(tag)
	return b.String()
}

// carriedText is what an acked run delivers instead of the ack.
func carriedText(events []storage.SystemEvent, reminders []clock.Reminder) string {
	var parts []string
	for _, e := range events {
		parts = append(parts, e.Text)
	}
	for _, r := range reminders {
		if r.Notice != "" {
			parts = append(parts, r.Notice)
		} else {
			parts = append(parts, "Reminder: "+r.Task)
		}
	}
	return strings.Join(parts, "\n")
}

// classify is the ack rule (docs/scheduler.md#ack): an empty reply, or the
// token at its start or end with at most AckMaxChars besides, is not
// delivered.
func classify(reply string, hb scheduler.Heartbeat) string {
	r := strings.TrimSpace(reply)
	if r == "" {
		return RunOKEmpty
	}
	tok := hb.AckToken
	rest, found := strings.CutPrefix(r, tok)
	if !found {
		rest, found = strings.CutSuffix(r, tok)
	}
	if found && utf8.RuneCountInString(strings.TrimSpace(rest)) <= hb.AckMaxChars {
		return RunOKAck
	}
	return RunSent
}

// sendWake builds the wake request from the template, sends it through
// the proxy listener like a followup, and runs server-tool calls of the
// answer through the resolve chain. It returns the reply text.
func (s *Service) sendWake(ctx context.Context, sid, runID string, t storage.WakeTemplate, headers map[string]string, rt, text string) (string, llm.Usage, error) {
	p := resolve.ParseProtocol(t.Protocol)
	body, err := wakeBody(p, t, text)
	if err != nil {
		return "", llm.Usage{}, fmt.Errorf("the wake request could not be built: %v", err)
	}
	reentry := t.Reentry
	if reentry == "" {
		reentry = s.cfg.Reentry
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+reentry+t.Path, bytes.NewReader(body))
	if err != nil {
		return "", llm.Usage{}, err
	}
	for k, v := range headers {
		switch k {
		case "host", "content-length", "content-type", "accept", "accept-encoding", "x-request-id", hostapi.HeaderFollowup, "connection", "transfer-encoding":
			continue
		}
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Request-Id", runID)
	req.Header.Set(hostapi.HeaderFollowup, hostapi.FollowupMarker(s.cfg.Token, runID, s.now()))
	resp, err := s.wakeClient().Do(req)
	if err != nil {
		return "", llm.Usage{}, errors.New("no answer from the provider")
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxWakeAnswer+1))
	if err != nil || len(raw) > maxWakeAnswer {
		return "", llm.Usage{}, fmt.Errorf("%d, the answer could not be read", resp.StatusCode)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return "", llm.Usage{}, fmt.Errorf("provider answered %d", resp.StatusCode)
	}
	turn, err := llm.ParseResponse(p, raw)
	if err != nil {
		return "", llm.Usage{}, fmt.Errorf("the answer is not a %s response: %v", p, err)
	}
	usage := turn.Usage
	reply := turn.Text
	if len(turn.ServerCalls(t.ServerTools)) > 0 {
		res, err := s.resolver.Resolve(ctx, hostapi.ResolveRequest{
			RequestID: runID, SessionID: sid, Protocol: t.Protocol, Path: t.Path, Reentry: reentry,
			Headers: headers, Request: body, Turn: turn, ServerTools: t.ServerTools, Timezone: t.Timezone,
		})
		if err != nil {
			return "", usage, fmt.Errorf("the server-tool round could not run: %v", err)
		}
		if res.Continuation != nil {
			reply = llm.JoinText(reply, res.Continuation.Text)
			usage.InputTokens += res.Continuation.Usage.InputTokens
			usage.OutputTokens += res.Continuation.Usage.OutputTokens
		}
	}
	return reply, usage, nil
}

// wakeBody appends the wake text to the template: after the answer the
// template's request got, when that answer was plain text (a turn that
// ended in tool calls is left out: its results never came).
func wakeBody(p llm.Protocol, t storage.WakeTemplate, text string) ([]byte, error) {
	turn := &llm.Turn{}
	if len(t.Turn) > 0 && string(t.Turn) != "null" {
		var last llm.Turn
		if err := json.Unmarshal(t.Turn, &last); err == nil && len(last.ToolCalls) == 0 && strings.TrimSpace(last.Text) != "" {
			turn = &last
		}
	}
	return llm.BuildFollowup(p, t.Request, turn, nil, text)
}

func (s *Service) wakeClient() *http.Client {
	if s.cfg.FollowupClient != nil {
		return s.cfg.FollowupClient
	}
	return s.wakeHTTP
}

func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// heartbeatFor is the session's effective heartbeat: its own setting over
// the config's default.
func (s *Service) heartbeatFor(sid string) scheduler.Heartbeat {
	var rec storage.Heartbeat
	var ok bool
	err := s.store.View(func(tx *storage.Tx) error {
		var err error
		rec, ok, err = tx.Heartbeat(sid)
		return err
	})
	if err != nil || !ok {
		return s.cfg.Heartbeat
	}
	return scheduler.Merge(s.cfg.Heartbeat, rec)
}

// noteTasksChanged re-arms the session's task alarm at its next clock
// task due, when it can be woken.
func (s *Service) noteTasksChanged(ctx context.Context, sid string) {
	if s.cfg.Wake.Disabled || sid == "" {
		return
	}
	s.wake.mu.Lock()
	ok := s.wake.templated[sid] || s.wake.mcp[sid] != nil
	s.wake.mu.Unlock()
	if !ok {
		return
	}
	at, due := s.engine.NextDue(ctx, sid, clock.WakePrefix)
	if !due {
		s.sched.WakeAt(sid, time.Time{}, scheduler.ReasonTask)
		return
	}
	// NextDue is when the reminder may be injected (a due window early);
	// a wake comes at the due time itself.
	s.sched.WakeAt(sid, at.Add(s.cfg.DueWindow), scheduler.ReasonTask)
	s.changed(sid)
}

// RunIsolated runs the model once for a cron job with target isolated
// (docs/scheduler.md#cron-jobs): from the session's template, in a session
// of its own (<session>:cron:<job>) so its tool calls and tasks stay
// apart, with the job's text as the user item, and delivers the reply to
// the session's user. An error means the run failed (the job backs off).
func (s *Service) RunIsolated(ctx context.Context, sid, jobID, text string) error {
	start := s.now()
	isolated := sid + ":cron:" + jobID
	tpl, ok, err := s.template(sid)
	if err != nil {
		return err
	}
	if !ok {
		s.recordRun(sid, storage.WakeRun{Reason: string(scheduler.ReasonCron), Status: RunSkipped, StartedAt: start.UnixMilli(),
			Isolated: isolated, Why: "no template: the session has sent no request through chime that the host kept"})
		return errors.New("no template for the session")
	}
	rt, _ := route.Pinned(s.store, sid)
	headers, why := s.wakeHeaders(sid, tpl, rt)
	if why != "" {
		s.recordRun(sid, storage.WakeRun{Reason: string(scheduler.ReasonCron), Status: RunSkipped, Why: why, StartedAt: start.UnixMilli(), Isolated: isolated})
		return errors.New(why)
	}
	runID, err := s.nextRunID(isolated)
	if err != nil {
		return err
	}
	loc := s.location(tpl.Timezone)
	body := "[chime cron job " + jobID + "] " + text + "\n\n" + s.timeTag(loc)
	rec := storage.WakeRun{ID: runID, Reason: string(scheduler.ReasonCron), StartedAt: start.UnixMilli(), Isolated: isolated, Events: 1}
	reply, usage, err := s.sendWake(clock.WithLocation(ctx, loc), isolated, runID, tpl, headers, rt, body)
	rec.DurationMs = s.now().Sub(start).Milliseconds()
	if err != nil {
		rec.Status, rec.Error = RunFailed, err.Error()
		s.recordRun(sid, rec)
		s.metrics.WakeRuns.WithLabelValues(string(scheduler.ReasonCron), RunFailed).Inc()
		return err
	}
	rec.InputTokens, rec.OutputTokens = usage.InputTokens, usage.OutputTokens
	rec.Status = RunSent
	if strings.TrimSpace(reply) == "" {
		rec.Status = RunOKEmpty
	} else if err := s.Deliver(ctx, delivery.Item{Session: sid, RunID: runID, Reason: string(scheduler.ReasonCron), Text: reply, At: s.now()}); err != nil {
		rec.Error = "delivery: " + err.Error()
	}
	rec.Reply = truncateRunes(reply, maxReplyKept)
	s.recordRun(sid, rec)
	s.metrics.WakeRuns.WithLabelValues(string(scheduler.ReasonCron), rec.Status).Inc()
	s.log.Info("isolated cron run", "session", sid, "run", runID, "status", rec.Status, "ms", rec.DurationMs)
	return nil
}
