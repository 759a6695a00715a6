// Package mockllm is the scripted mock provider (docs/mock-provider.md "Mock provider"):
// it serves the three LLM protocols, in JSON and SSE, with canned replies
// queued through POST /__mock/script, and records every request it gets.
package mockllm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/chimehq/chime/llm"
	"github.com/tidwall/gjson"
)

// DefaultAddr is where `chime mockllm` listens (docs/mock-provider.md).
const DefaultAddr = "127.0.0.1:8788"

// maxBody bounds a request body; coding agents send 1–2 MB (docs/protocols.md).
const maxBody = 64 << 20

// Reply is one canned reply in canonical form (docs/configuration.md).
type Reply struct {
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"toolCalls,omitempty"`
	// Finish is a canonical reason or any protocol's value; empty means
	// tool_calls when there are tool calls, else stop.
	Finish string `json:"finish,omitempty"`
	// DelayMs waits before the first byte of the reply.
	DelayMs int `json:"delayMs,omitempty"`
	// ChunkDelayMs waits between SSE events, so streaming is observable.
	ChunkDelayMs int `json:"chunkDelayMs,omitempty"`
	// EventDelaysMs[i] waits before the i-th SSE event (0 is the first),
	// instead of ChunkDelayMs for that event.
	EventDelaysMs []int `json:"eventDelaysMs,omitempty"`
	// Thinking starts the reply with reasoning: Messages a signed thinking
	// block, Responses a reasoning item (with encrypted_content when the
	// request includes reasoning.encrypted_content), Chat reasoning_content.
	Thinking string `json:"thinking,omitempty"`
	// Status, when 400 or more, answers with a provider-shaped error.
	Status int `json:"status,omitempty"`
	// Error is the message of that error.
	Error string `json:"error,omitempty"`
	// Usage overrides the estimated token counts.
	Usage *llm.Usage `json:"usage,omitempty"`
}

// ToolCall is a scripted tool call. Arguments may be given as JSON text (a
// string) or as the JSON value itself; missing arguments are {}.
type ToolCall struct {
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments,omitempty"`
}

// RecordedRequest is one provider request as GET /__mock/requests lists it.
type RecordedRequest struct {
	Method     string            `json:"method"`
	Path       string            `json:"path"`    // path and query string
	Headers    map[string]string `json:"headers"` // lower-case names; repeated values joined with ", "
	Body       string            `json:"body"`    // the raw body bytes
	ReceivedAt time.Time         `json:"receivedAt"`
	// Status is the HTTP status the mock answered (0 while undecided or
	// when the client went away first).
	Status int `json:"status,omitempty"`
	// Rejection is why the mock refused the request as the real provider
	// would (docs/configuration.md); it is also sent in the RejectionHeader.
	Rejection string `json:"rejection,omitempty"`
}

// RejectionHeader carries the reason on a response to a rejected request.
const RejectionHeader = "X-Mock-Rejection"

// Clock is the time source of delays, so tests can run them without
// sleeping. The default is real time.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Server is the mock provider. It is an http.Handler; the zero value is not
// usable, use New.
type Server struct {
	// Clock times delayMs, chunkDelayMs and eventDelaysMs and stamps
	// ReceivedAt; nil means real time. Set it before serving.
	Clock Clock

	mu    sync.Mutex
	queue []Reply
	// queues are named scripts: a request with QueueHeader pops from its
	// queue, so tests running side by side do not take each other's replies.
	queues   map[string][]Reply
	requests []*RecordedRequest
	served   int
	idSeq    int
	// What the mock issued, for the rules that depend on it (docs/mock-provider.md).
	issuedToolUse map[string]bool     // Messages tool_use id → came with a thinking block
	issuedFC      map[string]string   // Responses function_call item id → its reasoning item id ("" if none)
	issuedRS      map[string]bool     // Responses reasoning item ids
	responseCalls map[string][]string // Responses response id → call_ids of its function calls
}

// New returns an empty mock provider.
func New() *Server {
	return &Server{issuedToolUse: map[string]bool{}, issuedFC: map[string]string{},
		issuedRS: map[string]bool{}, responseCalls: map[string][]string{}}
}

func (s *Server) clock() Clock {
	if s.Clock == nil {
		return realClock{}
	}
	return s.Clock
}

// QueueHeader names the script queue a request takes its reply from
// (docs/mock-provider.md); without it, the default queue.
const QueueHeader = "x-mock-queue"

// Script queues replies, consumed in order by the next provider requests.
func (s *Server) Script(replies ...Reply) { s.ScriptQueue("", replies...) }

// ScriptQueue queues replies on the named queue ("" is the default).
func (s *Server) ScriptQueue(name string, replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if name == "" {
		s.queue = append(s.queue, replies...)
		return
	}
	if s.queues == nil {
		s.queues = map[string][]Reply{}
	}
	s.queues[name] = append(s.queues[name], replies...)
}

// Requests returns a copy of the recorded provider requests.
func (s *Server) Requests() []RecordedRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]RecordedRequest, len(s.requests))
	for i, r := range s.requests {
		out[i] = *r
	}
	return out
}

// ListenAndServe serves on addr (DefaultAddr if empty) until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	if addr == "" {
		addr = DefaultAddr
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	return s.Serve(ctx, ln)
}

// Serve serves on ln until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(shut)
		case <-done:
		}
	}()
	err := srv.Serve(ln)
	close(done)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeHTTP routes the control endpoints and the three provider paths.
// A provider request the real API would refuse gets its 400 without
// consuming a scripted reply (docs/configuration.md); it is recorded all the same.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/__mock/script":
		s.handleScript(w, r)
		return
	case "/__mock/requests":
		s.handleRequests(w, r)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeJSON(w, http.StatusRequestEntityTooLarge, map[string]any{"error": map[string]string{"message": err.Error()}})
		return
	}
	rec := s.record(r, body)
	p := llm.DetectProtocol(r.URL.Path)
	if p == llm.Unknown {
		s.finish(rec, http.StatusNotFound, "")
		writeError(w, p, &Rejection{Status: http.StatusNotFound, Message: "mockllm: no such endpoint " + r.URL.Path})
		return
	}
	if r.Method != http.MethodPost {
		s.finish(rec, http.StatusMethodNotAllowed, "")
		w.Header().Set("Allow", http.MethodPost)
		writeError(w, p, &Rejection{Status: http.StatusMethodNotAllowed, Message: "mockllm: use POST"})
		return
	}
	if rej := s.Validate(p, body); rej != nil {
		s.finish(rec, rej.Status, rej.Message)
		w.Header().Set(RejectionHeader, headerSafe(rej.Message))
		writeError(w, p, rej)
		return
	}
	reply, pl := s.next(p, body, r.Header.Get(QueueHeader))
	if !s.sleep(r.Context(), reply.DelayMs) {
		return // the client went away; Status stays 0
	}
	if reply.Status >= 400 {
		msg := reply.Error
		if msg == "" {
			msg = fmt.Sprintf("mockllm: scripted status %d", reply.Status)
		}
		s.finish(rec, reply.Status, "")
		writeError(w, p, &Rejection{Status: reply.Status, Message: msg})
		return
	}
	s.finish(rec, http.StatusOK, "")
	if gjson.GetBytes(body, "stream").Bool() {
		s.streamSSE(w, r, pl.renderSSE(), reply)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(pl.renderJSON())
}

// headerSafe keeps a message within what an HTTP header value may hold.
func headerSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r > 0x7e {
			return ' '
		}
		return r
	}, s)
}

// next pops the next scripted reply, or the default text "ok" with finish
// stop (docs/configuration.md), plans its rendering and remembers what it issues.
func (s *Server) next(p llm.Protocol, body []byte, queue string) (Reply, *plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.served++
	r := Reply{Text: "ok", Finish: "stop"}
	if queue == "" && len(s.queue) > 0 {
		r = s.queue[0]
		s.queue = s.queue[1:]
	} else if q := s.queues[queue]; queue != "" && len(q) > 0 {
		r = q[0]
		s.queues[queue] = q[1:]
	}
	if r.Status >= 400 {
		return r, nil
	}
	return r, s.plan(p, r, s.served, body)
}

// plan builds the turn of the n-th response with realistic ids and
// records the ids the validator later checks replays against. The caller
// holds s.mu.
func (s *Server) plan(p llm.Protocol, r Reply, n int, reqBody []byte) *plan {
	t := &llm.Turn{Model: gjson.GetBytes(reqBody, "model").String(), Text: r.Text}
	if t.Model == "" {
		t.Model = "mock-model"
	}
	pl := &plan{p: p, turn: t, thinking: r.Thinking,
		opts: llm.RenderOptions{ChatUsage: gjson.GetBytes(reqBody, "stream_options.include_usage").Bool()}}
	switch p {
	case llm.Chat:
		t.ID = fmt.Sprintf("chatcmpl-mock%d", n)
	case llm.Responses:
		t.ID = fmt.Sprintf("resp_mock%d", n)
		pl.msgID = s.newID("msg")
		if r.Thinking != "" {
			pl.rsID = s.newID("rs")
			s.issuedRS[pl.rsID] = true
			for _, inc := range gjson.GetBytes(reqBody, "include").Array() {
				if inc.String() == "reasoning.encrypted_content" {
					pl.blob = reasoningBlob(pl.rsID)
				}
			}
		}
	default:
		t.ID = fmt.Sprintf("msg_mock%d", n)
		if r.Thinking != "" {
			pl.sig = thinkingSignature(r.Thinking)
		}
	}
	out := len(r.Text) + len(r.Thinking)
	var callIDs []string
	lastResult := LastToolOutput(p, reqBody)
	for _, c := range r.ToolCalls {
		args, _ := c.argumentsText()
		args = fillFromResult(args, lastResult)
		id := c.ID
		if id == "" {
			id = s.newID(map[bool]string{true: "toolu", false: "call"}[p == llm.Messages])
		}
		switch p {
		case llm.Messages:
			s.issuedToolUse[id] = r.Thinking != ""
		case llm.Responses:
			fc := s.newID("fc")
			pl.fcIDs = append(pl.fcIDs, fc)
			s.issuedFC[fc] = pl.rsID
		}
		callIDs = append(callIDs, id)
		t.ToolCalls = append(t.ToolCalls, llm.ToolCall{ID: id, Name: c.Name, Arguments: args})
		out += len(c.Name) + len(args)
	}
	if p == llm.Responses {
		s.responseCalls[t.ID] = callIDs
	}
	if r.Finish != "" {
		t.Finish = llm.ParseFinish(r.Finish)
	}
	if r.Usage != nil {
		t.Usage = *r.Usage
	} else {
		// About four bytes per token, like real tokenizers on English text.
		t.Usage = llm.Usage{InputTokens: len(reqBody)/4 + 1, OutputTokens: out/4 + 1}
	}
	return pl
}

func (s *Server) record(r *http.Request, body []byte) *RecordedRequest {
	headers := make(map[string]string, len(r.Header)+1)
	for name, values := range r.Header {
		headers[strings.ToLower(name)] = strings.Join(values, ", ")
	}
	if r.Host != "" {
		headers["host"] = r.Host
	}
	rec := &RecordedRequest{Method: r.Method, Path: r.URL.RequestURI(), Headers: headers, Body: string(body), ReceivedAt: s.clock().Now()}
	s.mu.Lock()
	s.requests = append(s.requests, rec)
	s.mu.Unlock()
	return rec
}

// finish records how the mock answered a recorded request.
func (s *Server) finish(rec *RecordedRequest, status int, rejection string) {
	s.mu.Lock()
	rec.Status, rec.Rejection = status, rejection
	s.mu.Unlock()
}

func (s *Server) handleScript(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		replies, err := ParseScript(body)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
			return
		}
		name := r.URL.Query().Get("queue")
		s.ScriptQueue(name, replies...)
		s.mu.Lock()
		pending := len(s.queue)
		if name != "" {
			pending = len(s.queues[name])
		}
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]int{"queued": len(replies), "pending": pending})
	case http.MethodGet:
		s.mu.Lock()
		q := append([]Reply{}, s.queue...)
		s.mu.Unlock()
		writeJSON(w, http.StatusOK, q)
	case http.MethodDelete:
		s.mu.Lock()
		s.queue, s.queues = nil, nil
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, POST, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use GET, POST or DELETE"})
	}
}

func (s *Server) handleRequests(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodGet:
		writeJSON(w, http.StatusOK, s.Requests())
	case http.MethodDelete:
		s.mu.Lock()
		s.requests = nil
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, DELETE")
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"error": "use GET or DELETE"})
	}
}

// ParseScript reads a POST /__mock/script body: one reply object or an
// array of them. Bad input gets an error saying what is wrong (docs/failures.md).
func ParseScript(body []byte) ([]Reply, error) {
	trimmed := bytes.TrimSpace(body)
	if len(trimmed) == 0 {
		return nil, errors.New("mockllm: empty script")
	}
	dec := func(b []byte, v any) error {
		d := json.NewDecoder(bytes.NewReader(b))
		d.DisallowUnknownFields()
		return d.Decode(v)
	}
	var replies []Reply
	if trimmed[0] == '[' {
		if err := dec(trimmed, &replies); err != nil {
			return nil, fmt.Errorf("mockllm: bad script: %w", err)
		}
	} else {
		var one Reply
		if err := dec(trimmed, &one); err != nil {
			return nil, fmt.Errorf("mockllm: bad script: %w", err)
		}
		replies = []Reply{one}
	}
	for i, r := range replies {
		if r.DelayMs < 0 || r.ChunkDelayMs < 0 || slices.ContainsFunc(r.EventDelaysMs, func(d int) bool { return d < 0 }) {
			return nil, fmt.Errorf("mockllm: reply %d: negative delay", i)
		}
		if r.Status != 0 && (r.Status < 100 || r.Status > 599) {
			return nil, fmt.Errorf("mockllm: reply %d: status %d is not an HTTP status", i, r.Status)
		}
		for j, c := range r.ToolCalls {
			if c.Name == "" {
				return nil, fmt.Errorf("mockllm: reply %d tool call %d: name is required", i, j)
			}
			if _, err := c.argumentsText(); err != nil {
				return nil, fmt.Errorf("mockllm: reply %d tool call %d: %w", i, j, err)
			}
		}
	}
	return replies, nil
}

// argumentsText returns the arguments as JSON text.
func (c ToolCall) argumentsText() (string, error) {
	raw := bytes.TrimSpace(c.Arguments)
	if len(raw) == 0 || string(raw) == "null" {
		return "{}", nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		return s, nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return "", fmt.Errorf("arguments: %w", err)
	}
	return buf.String(), nil
}

// streamSSE writes the events one by one, flushing each, waiting before
// event i eventDelaysMs[i] if given, else chunkDelayMs between events.
func (s *Server) streamSSE(w http.ResponseWriter, r *http.Request, events [][]byte, reply Reply) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	if flusher != nil {
		flusher.Flush()
	}
	for i, ev := range events {
		delay := 0
		switch {
		case i < len(reply.EventDelaysMs):
			delay = reply.EventDelaysMs[i]
		case i > 0:
			delay = reply.ChunkDelayMs
		}
		if !s.sleep(r.Context(), delay) {
			return
		}
		if _, err := w.Write(ev); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
}

// sleep waits ms milliseconds on the server's clock unless ctx ends first;
// it reports whether the wait completed.
func (s *Server) sleep(ctx context.Context, ms int) bool {
	if ms <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-s.clock().After(time.Duration(ms) * time.Millisecond):
		return true
	case <-ctx.Done():
		return false
	}
}

// writeError answers with an error body shaped like the protocol's provider.
func writeError(w http.ResponseWriter, p llm.Protocol, rej *Rejection) {
	if p == llm.Messages {
		var body struct {
			Type  string `json:"type"`
			Error struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		body.Type, body.Error.Type, body.Error.Message = "error", errorType(rej.Status, p), rej.Message
		writeJSON(w, rej.Status, body)
		return
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
			Type    string `json:"type"`
			Param   any    `json:"param"`
			Code    any    `json:"code"`
		} `json:"error"`
	}
	body.Error.Message, body.Error.Type = rej.Message, errorType(rej.Status, p)
	body.Error.Param, body.Error.Code = nullable(rej.Param), nullable(rej.Code)
	writeJSON(w, rej.Status, body)
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}
func errorType(status int, p llm.Protocol) string {
	switch {
	case status == http.StatusNotFound:
		return "not_found_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500 && p == llm.Messages:
		return "api_error"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
