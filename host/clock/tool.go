package clock

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/chimehq/chime/storage"
)

// toolArgs is the strict `clock` schema (docs/clock-tool.md): unused fields arrive as
// "" or [].
type toolArgs struct {
	Action string    `json:"action"`
	Items  []itemArg `json:"items"`
	TaskID string    `json:"taskId"`
}

type itemArg struct {
	DueAt     string          `json:"dueAt"`
	Task      string          `json:"task"`
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"` // a JSON string; an object is tolerated
	Repeat    string          `json:"repeat"`
	MaxRuns   json.RawMessage `json:"maxRuns"` // an integer; a numeric string is tolerated
}

// toolError is a failure reported to the model as {ok:false, error}.
type toolError struct {
	reason string
	err    error // underlying cause, for logs and errors.Is
}

func (e *toolError) Error() string { return e.reason }
func (e *toolError) Unwrap() error { return e.err }

func badInput(format string, a ...any) *toolError {
	return &toolError{reason: fmt.Sprintf(format, a...)}
}

func storageFailure(err error) *toolError {
	return &toolError{reason: "storage failure, nothing was changed; try again later (" + err.Error() + ")", err: err}
}

// ErrNoSession is the cause of every session-scoped failure without a session.
var ErrNoSession = errors.New("no session id")

var noSession = &toolError{
	reason: "no session id on this request, so clock tasks are unavailable; the client must send a session id (e.g. header x-chime-session). action \"get\" still works",
	err:    ErrNoSession,
}

type errorResult struct {
	OK     bool   `json:"ok"`
	Action string `json:"action,omitempty"`
	Error  string `json:"error"`
}

// Execute runs one `clock` tool call for the requesting session and returns
// its JSON result (docs/clock-tool.md). Every failure — bad input, no session, unknown
// task, storage — is a result with ok:false, never a Go error.
func (e *Engine) Execute(ctx context.Context, sessionID, requestID string, args json.RawMessage) json.RawMessage {
	var a toolArgs
	if err := decodeArgs(args, &a); err != nil {
		return marshal(errorResult{Error: err.Error()})
	}
	action := strings.ToLower(strings.TrimSpace(a.Action))
	var res any
	var terr *toolError
	switch action {
	case "get":
		res = e.get(ctx)
	case "schedule", "list", "cancel", "clear", "update":
		if sessionID == "" {
			terr = noSession
			break
		}
		switch action {
		case "schedule":
			res, terr = e.scheduleAction(ctx, sessionID, requestID, a.Items)
		case "list":
			res, terr = e.list(sessionID)
		case "cancel":
			res, terr = e.cancel(sessionID, a.TaskID)
		case "clear":
			res, terr = e.clear(sessionID)
		case "update":
			res, terr = e.update(ctx, sessionID, requestID, a.TaskID, a.Items)
		}
	default:
		terr = badInput("unknown action %q; use one of get, schedule, list, cancel, clear, update", a.Action)
	}
	if terr != nil {
		if terr.err != nil && !errors.Is(terr.err, ErrNoSession) {
			e.log.Warn("clock tool failed", "action", action, "err", terr.err)
		}
		return marshal(errorResult{Action: action, Error: terr.reason})
	}
	return marshal(res)
}

// decodeArgs accepts the arguments object, or that object encoded once more
// as a JSON string (how Chat Completions carries tool arguments).
func decodeArgs(raw json.RawMessage, a *toolArgs) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err == nil {
			raw = []byte(s)
		}
	}
	if len(raw) == 0 {
		return errors.New("empty arguments; send {\"action\":\"get\",\"items\":[],\"taskId\":\"\"}")
	}
	if err := json.Unmarshal(raw, a); err != nil {
		return fmt.Errorf("arguments are not a valid clock call object: %v", err)
	}
	return nil
}

func marshal(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil { // only plain structs are marshalled; keep a valid result anyway
		b, _ = json.Marshal(errorResult{Error: "internal error encoding the result"})
	}
	return b
}

// --- get ---

type ntpResult struct {
	Status    string `json:"status"`
	OffsetMs  int64  `json:"offsetMs"`
	Server    string `json:"server"`
	UpdatedAt string `json:"updatedAt"`
}

type getResult struct {
	OK       bool      `json:"ok"`
	Action   string    `json:"action"`
	NowMs    int64     `json:"nowMs"`
	UTC      string    `json:"utc"`
	Local    string    `json:"local"`
	Timezone string    `json:"timezone"`
	NTP      ntpResult `json:"ntp"`
}

func (e *Engine) get(ctx context.Context) getResult {
	now := e.now()
	loc := e.location(ctx)
	n := ntpResult{Status: "disabled"}
	if e.cfg.NTP != nil {
		s := e.cfg.NTP()
		n = ntpResult{Status: string(s.Status), OffsetMs: s.OffsetMs, Server: s.Server}
		if !s.UpdatedAt.IsZero() {
			n.UpdatedAt = s.UpdatedAt.UTC().Format(utcLayout)
		}
	}
	return getResult{
		OK: true, Action: "get", NowMs: now.UnixMilli(),
		UTC: now.UTC().Format(utcLayout), Local: now.In(loc).Format(localLayout),
		Timezone: loc.String(), NTP: n,
	}
}

// --- schedule ---

// Scheduled describes one created task.
type Scheduled struct {
	TaskID string `json:"taskId"`
	DueAt  string `json:"dueAt"`
	Task   string `json:"task"`
}

type scheduleResult struct {
	OK        bool        `json:"ok"`
	Action    string      `json:"action"`
	Scheduled []Scheduled `json:"scheduled"`
	Warning   string      `json:"warning,omitempty"`
}

// newTask is a validated item, ready to store.
type newTask struct {
	due       time.Time
	task      string
	tool      string
	arguments string
	repeat    string
	maxRuns   int
}

func (e *Engine) scheduleAction(ctx context.Context, sessionID, requestID string, items []itemArg) (any, *toolError) {
	scheduled, warning, terr := e.schedule(ctx, sessionID, requestID, items)
	if terr != nil {
		return nil, terr
	}
	return scheduleResult{OK: true, Action: "schedule", Scheduled: scheduled, Warning: warning}, nil
}

// schedule validates every item first, then writes them all in one
// synchronous transaction (all or nothing).
func (e *Engine) schedule(ctx context.Context, sessionID, requestID string, items []itemArg) ([]Scheduled, string, *toolError) {
	now := e.now()
	valid, terr := e.validateItems(items, now)
	if terr != nil {
		return nil, "", terr
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Scheduled
	var warning string
	err := e.store.Update(func(tx *storage.Tx) error {
		var err error
		out, warning, err = e.stageSchedule(ctx, tx, sessionID, requestID, valid, now)
		return err
	})
	if err != nil {
		var te *toolError
		if errors.As(err, &te) {
			return nil, "", te
		}
		return nil, "", storageFailure(err)
	}
	return out, warning, nil
}

// validateItems checks every item of a schedule call before anything is
// written.
func (e *Engine) validateItems(items []itemArg, now time.Time) ([]newTask, *toolError) {
	if len(items) == 0 {
		return nil, badInput("schedule needs at least one entry in items[] with dueAt and task")
	}
	if len(items) > maxItemsPerCall {
		return nil, badInput("at most %d items per schedule call, got %d", maxItemsPerCall, len(items))
	}
	valid := make([]newTask, 0, len(items))
	for i, it := range items {
		nt, terr := e.validateItem(i, it, now)
		if terr != nil {
			return nil, terr
		}
		valid = append(valid, nt)
	}
	return valid, nil
}

// stageSchedule writes validated tasks within tx. It returns a *toolError
// (the session is full) before writing anything, or a storage error.
func (e *Engine) stageSchedule(ctx context.Context, tx *storage.Tx, sessionID, requestID string, valid []newTask, now time.Time) ([]Scheduled, string, error) {
	var out []Scheduled
	var warnings []string
	existing, err := tx.Tasks(sessionID)
	if err != nil {
		return nil, "", err
	}
	live := existing[:0:0]
	for _, t := range existing {
		if !e.isExpired(t, now) && t.Notice == "" {
			live = append(live, t)
		}
	}
	if len(live)+len(valid) > e.cfg.MaxTasks {
		return nil, "", badInput("this session already has %d tasks; at most %d are allowed. Cancel or clear some first", len(live), e.cfg.MaxTasks)
	}
	for _, nt := range valid {
		t := e.buildTask(ctx, sessionID, requestID, nt, now)
		for {
			_, taken, err := tx.Task(sessionID, t.TaskID)
			if err != nil {
				return nil, "", err
			}
			if !taken {
				break
			}
			t.TaskID = newTaskID()
		}
		for _, other := range live {
			if w := e.nearDuplicate(t, other); w != "" {
				warnings = append(warnings, w)
			}
		}
		if err := tx.PutTask(t); err != nil {
			return nil, "", err
		}
		live = append(live, t)
		out = append(out, Scheduled{TaskID: t.TaskID, DueAt: formatDue(e.dueTime(t)), Task: t.Task})
	}
	return out, strings.Join(warnings, "; "), touchSession(tx, sessionID, now)
}

func touchSession(tx *storage.Tx, sessionID string, now time.Time) error {
	s, ok, err := tx.Session(sessionID)
	if err != nil {
		return err
	}
	if !ok {
		s = storage.Session{ID: sessionID, CreatedAt: now.UnixMilli()}
	}
	s.LastSeenAt = now.UnixMilli()
	return tx.PutSession(s)
}

func (e *Engine) validateItem(i int, it itemArg, now time.Time) (newTask, *toolError) {
	nt := newTask{task: strings.TrimSpace(it.Task), tool: strings.TrimSpace(it.Tool)}
	if nt.task == "" {
		return nt, badInput("items[%d].task is empty; describe what to do when it is due", i)
	}
	if len(nt.task) > maxTaskLen {
		return nt, badInput("items[%d].task is %d bytes; keep it under %d", i, len(nt.task), maxTaskLen)
	}
	args, err := normalizeArguments(it.Arguments)
	if err != nil {
		return nt, badInput("items[%d].arguments: %v", i, err)
	}
	nt.arguments = args
	repeat, rec, err := parseRepeat(it.Repeat, now)
	if err != nil {
		return nt, badInput("items[%d]: %v", i, err)
	}
	nt.repeat = repeat
	if nt.maxRuns, err = parseMaxRuns(it.MaxRuns); err != nil {
		return nt, badInput("items[%d].maxRuns: %v", i, err)
	}
	if rec == nil {
		nt.maxRuns = 0 // meaningless for a one-shot task
	}
	if strings.TrimSpace(it.DueAt) == "" && rec != nil {
		// A repeating task may leave dueAt empty: first occurrence after now.
		first, ok := rec.nextAfter(now, now)
		if !ok {
			return nt, badInput("items[%d]: repeat %q has no next occurrence", i, repeat)
		}
		nt.due = first
		return nt, nil
	}
	due, err := parseDueAt(it.DueAt)
	if err != nil {
		return nt, badInput("items[%d]: %v", i, err)
	}
	if now.Sub(due) > e.cfg.Retention {
		if rec == nil {
			return nt, badInput("items[%d].dueAt %s is more than %s in the past (now is %s); pick a future time",
				i, it.DueAt, e.cfg.Retention, now.In(due.Location()).Format(time.RFC3339))
		}
		if due, _ = rec.nextAfter(due, now); due.IsZero() {
			return nt, badInput("items[%d]: repeat %q has no next occurrence", i, repeat)
		}
	}
	nt.due = due
	return nt, nil
}

func (e *Engine) buildTask(ctx context.Context, sessionID, requestID string, nt newTask, now time.Time) storage.ClockTask {
	_, off := nt.due.Zone()
	t := storage.ClockTask{
		TaskID: newTaskID(), SessionID: sessionID, DueAt: nt.due.UnixMilli(), UTCOffsetSec: off,
		Task: nt.task, Tool: nt.tool, Arguments: nt.arguments, Repeat: nt.repeat, MaxRuns: nt.maxRuns,
		CreatedAt: now.UnixMilli(), UpdatedAt: now.UnixMilli(),
	}
	t.TimeZone = e.zoneFor(ctx, nt.due)
	e.stampIfInWindow(&t, requestID, now)
	return t
}

// zoneFor names the request's IANA zone when it agrees with due's written
// offset, so that repeats follow its DST rules; "" means the fixed offset is
// the zone.
func (e *Engine) zoneFor(ctx context.Context, due time.Time) string {
	loc := e.location(ctx)
	if loc == time.Local {
		return "" // not portable across hosts
	}
	_, off := due.Zone()
	if _, locOff := due.In(loc).Zone(); locOff != off {
		return ""
	}
	return loc.String()
}

// stampIfInWindow applies notBeforeRequestId (docs/clock-tool.md): a task already due
// when written is not injected into the writing request's own chain.
func (e *Engine) stampIfInWindow(t *storage.ClockTask, requestID string, now time.Time) {
	t.NotBeforeRequestID = ""
	if requestID != "" && t.DueAt <= now.UnixMilli()+e.cfg.DueWindow.Milliseconds() {
		t.NotBeforeRequestID = requestID
	}
}

func (e *Engine) nearDuplicate(t, other storage.ClockTask) string {
	gap := time.Duration(t.DueAt-other.DueAt) * time.Millisecond
	if gap < 0 {
		gap = -gap
	}
	if gap > e.cfg.NearDuplicate {
		return ""
	}
	return fmt.Sprintf("task %s %q (%s) is within %s of existing task %s %q (%s); cancel one if they are duplicates",
		t.TaskID, t.Task, formatDue(e.dueTime(t)), e.cfg.NearDuplicate, other.TaskID, other.Task, formatDue(e.dueTime(other)))
}

// normalizeArguments turns the arguments hint into compact JSON text ("" for
// none). The schema makes it a JSON string; a bare object is accepted too.
func normalizeArguments(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	text := raw
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", err
		}
		s = strings.TrimSpace(s)
		if s == "" {
			return "", nil
		}
		text = []byte(s)
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, text); err != nil {
		return "", fmt.Errorf("must be JSON text such as \"{}\" or \"{\\\"path\\\":\\\"a.txt\\\"}\"")
	}
	return buf.String(), nil
}

func parseMaxRuns(raw json.RawMessage) (int, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" || string(raw) == `""` {
		return 0, nil
	}
	s := string(raw)
	if raw[0] == '"' {
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, err
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || f != math.Trunc(f) || f < 0 || f > 1e6 {
		return 0, fmt.Errorf("want a whole number 0..1000000 (0 = unlimited), got %s", raw)
	}
	return int(f), nil
}

// --- list / cancel / clear ---

// ListedTask is one entry of the list result.
type ListedTask struct {
	TaskID        string `json:"taskId"`
	DueAt         string `json:"dueAt"`
	Task          string `json:"task"`
	Repeat        string `json:"repeat"`
	DeliveredAt   string `json:"deliveredAt,omitempty"`
	DeliveryCount int    `json:"deliveryCount"`
}

type listResult struct {
	OK     bool         `json:"ok"`
	Action string       `json:"action"`
	Items  []ListedTask `json:"items"`
}

func (e *Engine) list(sessionID string) (any, *toolError) {
	ts, err := e.store.ListTasks(sessionID)
	if err != nil {
		return nil, storageFailure(err)
	}
	now := e.now()
	items := []ListedTask{}
	for _, t := range ts {
		if e.isExpired(t, now) || t.Notice != "" {
			continue
		}
		lt := ListedTask{TaskID: t.TaskID, DueAt: formatDue(e.dueTime(t)), Task: t.Task, Repeat: t.Repeat, DeliveryCount: t.DeliveryCount}
		if t.DeliveredAt != 0 {
			lt.DeliveredAt = formatDue(time.UnixMilli(t.DeliveredAt).In(e.taskLocation(t)))
		}
		items = append(items, lt)
	}
	return listResult{OK: true, Action: "list", Items: items}, nil
}

type cancelResult struct {
	OK      bool   `json:"ok"`
	Action  string `json:"action"`
	Removed string `json:"removed"`
}

func unknownTask(id string) *toolError {
	return badInput("unknown taskId %q in this session; call clock with action \"list\" to see the task ids", id)
}

func (e *Engine) cancel(sessionID, taskID string) (any, *toolError) {
	taskID = strings.TrimSpace(taskID)
	if taskID == "" {
		return nil, badInput("cancel needs taskId; call clock with action \"list\" to see the task ids")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	removed := false
	err := e.store.Update(func(tx *storage.Tx) error {
		t, ok, err := tx.Task(sessionID, taskID)
		if err != nil || !ok || t.Notice != "" {
			return err
		}
		removed, err = tx.DeleteTask(sessionID, taskID)
		return err
	})
	if err != nil {
		return nil, storageFailure(err)
	}
	if !removed {
		return nil, unknownTask(taskID)
	}
	return cancelResult{OK: true, Action: "cancel", Removed: taskID}, nil
}

type clearResult struct {
	OK           bool   `json:"ok"`
	Action       string `json:"action"`
	RemovedCount int    `json:"removedCount"`
}

func (e *Engine) clear(sessionID string) (any, *toolError) {
	n, err := e.ApplyClear(context.Background(), sessionID)
	if err != nil {
		return nil, storageFailure(err)
	}
	return clearResult{OK: true, Action: "clear", RemovedCount: n}, nil
}

// --- update ---

// UpdatedTask is the update result's task.
type UpdatedTask struct {
	TaskID    string `json:"taskId"`
	DueAt     string `json:"dueAt"`
	Task      string `json:"task"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
	Repeat    string `json:"repeat"`
	MaxRuns   int    `json:"maxRuns"`
}

type updateResult struct {
	OK      bool        `json:"ok"`
	Action  string      `json:"action"`
	Updated UpdatedTask `json:"updated"`
}

// update changes one task. In items[0], "" and 0 keep the current value;
// repeat "once" makes the task one-shot.
func (e *Engine) update(ctx context.Context, sessionID, requestID, taskID string, items []itemArg) (any, *toolError) {
	taskID = strings.TrimSpace(taskID)
	if taskID == "" {
		return nil, badInput("update needs taskId; call clock with action \"list\" to see the task ids")
	}
	if len(items) != 1 {
		return nil, badInput("update needs exactly one entry in items[] with the new values (\"\" keeps a field), got %d", len(items))
	}
	it := items[0]
	now := e.now()

	var due time.Time
	if strings.TrimSpace(it.DueAt) != "" {
		d, err := parseDueAt(it.DueAt)
		if err != nil {
			return nil, badInput("items[0]: %v", err)
		}
		due = d
	}
	repeatSet := strings.TrimSpace(it.Repeat) != ""
	repeat, _, err := parseRepeat(it.Repeat, now)
	if err != nil {
		return nil, badInput("items[0]: %v", err)
	}
	args, err := normalizeArguments(it.Arguments)
	if err != nil {
		return nil, badInput("items[0].arguments: %v", err)
	}
	maxRuns, err := parseMaxRuns(it.MaxRuns)
	if err != nil {
		return nil, badInput("items[0].maxRuns: %v", err)
	}
	task := strings.TrimSpace(it.Task)
	if len(task) > maxTaskLen {
		return nil, badInput("items[0].task is %d bytes; keep it under %d", len(task), maxTaskLen)
	}

	e.mu.Lock()
	defer e.mu.Unlock()
	var out storage.ClockTask
	err = e.store.Update(func(tx *storage.Tx) error {
		t, ok, err := tx.Task(sessionID, taskID)
		if err != nil {
			return err
		}
		if !ok || t.Notice != "" {
			return unknownTask(taskID)
		}
		rescheduled := false
		if !due.IsZero() {
			if now.Sub(due) > e.cfg.Retention {
				return badInput("items[0].dueAt %s is more than %s in the past; pick a future time", it.DueAt, e.cfg.Retention)
			}
			_, off := due.Zone()
			t.DueAt, t.UTCOffsetSec, t.TimeZone = due.UnixMilli(), off, e.zoneFor(ctx, due)
			rescheduled = true
		}
		if task != "" {
			t.Task = task
		}
		if tool := strings.TrimSpace(it.Tool); tool != "" {
			t.Tool = tool
		}
		if args != "" {
			t.Arguments = args
		}
		if repeatSet && repeat != t.Repeat {
			t.Repeat, t.Runs = repeat, 0
			rescheduled = true
		}
		if maxRuns != 0 {
			t.MaxRuns = maxRuns
		}
		if t.Repeat == "" {
			t.MaxRuns = 0
		}
		if rescheduled {
			t.DeliveredAt = 0
			t.ReservedBy, t.ReservedAt = "", 0
			e.stampIfInWindow(&t, requestID, now)
		}
		t.UpdatedAt = now.UnixMilli()
		out = t
		return tx.PutTask(t)
	})
	if err != nil {
		var te *toolError
		if errors.As(err, &te) {
			return nil, te
		}
		return nil, storageFailure(err)
	}
	return updateResult{OK: true, Action: "update", Updated: UpdatedTask{
		TaskID: out.TaskID, DueAt: formatDue(e.dueTime(out)), Task: out.Task, Tool: out.Tool,
		Arguments: out.Arguments, Repeat: out.Repeat, MaxRuns: out.MaxRuns,
	}}, nil
}
