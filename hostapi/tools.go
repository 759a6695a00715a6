package hostapi

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/chimehq/chime/llm"
)

// ClockToolName is the name of the one tool the model sees for time and
// reminders (docs/clock-tool.md).
const ClockToolName = "clock"

var clockActions = []string{"get", "schedule", "list", "cancel", "clear", "update"}

// ClockActions returns the values of the clock tool's "action" (docs/clock-tool.md).
func ClockActions() []string { return slices.Clone(clockActions) }

const clockDescription = `Read the current time and set reminders for yourself in this session.

Actions:
- get: current time (UTC, local, timezone, NTP status) as JSON. Use it before scheduling anything relative to "now".
- schedule: add reminders. Put one object per reminder in items. When a reminder is due, it arrives as a user message "[scheduled task:\"<task>\"]" in this conversation, and you then do the task (call tools as needed).
- list: the session's pending reminders with their taskId.
- cancel: remove the reminder taskId.
- clear: remove all of this session's reminders.
- update: change reminder taskId to the fields of items[0]; "" and 0 keep a field, repeat "once" makes it one-shot.

Every field is required. Pass items=[] and taskId="" when an action does not use them; in an item use tool="", arguments="", repeat="" and maxRuns=0 when not needed.
items[].dueAt is ISO 8601 with a UTC offset, e.g. 2026-01-21T20:30:00-08:00. items[].task says what to do, concretely (which tool to call and why). items[].tool and items[].arguments optionally suggest a tool call; arguments is a JSON string such as "{\"path\":\"build.log\"}". items[].repeat is "" (once), "daily", "weekly", "every <duration>" (e.g. "every 30m") or a 5-field cron expression; items[].maxRuns caps a repeating reminder (0 = unlimited).
Results are JSON with ok:true, or ok:false and a reason you can act on (for example a bad dueAt or an unknown taskId).`

const clockSchema = `{"type":"object","properties":{` +
	`"action":{"type":"string","enum":["get","schedule","list","cancel","clear","update"],"description":"What to do."},` +
	`"items":{"type":"array","description":"Reminders for schedule (one or more) and update (exactly one); [] otherwise.","items":{"type":"object","properties":{` +
	`"dueAt":{"type":"string","description":"When it is due: ISO 8601 with a UTC offset, e.g. 2026-01-21T20:30:00-08:00."},` +
	`"task":{"type":"string","description":"What to do when it is due."},` +
	`"tool":{"type":"string","description":"Tool to call when due, or \"\"."},` +
	`"arguments":{"type":"string","description":"Arguments for that tool as a JSON string, or \"\"."},` +
	`"repeat":{"type":"string","description":"\"\" (once), \"daily\", \"weekly\", \"every <duration>\" or a 5-field cron expression."},` +
	`"maxRuns":{"type":"integer","description":"Most deliveries of a repeating reminder; 0 = unlimited."}` +
	`},"required":["dueAt","task","tool","arguments","repeat","maxRuns"],"additionalProperties":false}},` +
	`"taskId":{"type":"string","description":"The reminder to cancel or update, from schedule or list; \"\" otherwise."}` +
	`},"required":["action","items","taskId"],"additionalProperties":false}`

// ClockToolSpec returns the strict clock tool schema of docs/clock-tool.md (seed 000
// §2.2): every property is required and no others are allowed.
func ClockToolSpec() llm.ToolSpec {
	return llm.ToolSpec{
		Name:        ClockToolName,
		Description: clockDescription,
		Parameters:  json.RawMessage(clockSchema),
		Strict:      true,
	}
}

// The timer tools (docs/timers.md; seed 004): a model waits on a timer
// inside a tool call the host holds, so a wait costs no API call.
const (
	TimerToolName       = "timer"
	ReadTimerToolName   = "read_timer"
	StopTimerToolName   = "stop_timer"
	CancelTimerToolName = "cancel_timer"
	PauseTimerToolName  = "pause_timer"
	ResumeTimerToolName = "resume_timer"
)

// TimerToolNames lists the timer tools in injection order.
func TimerToolNames() []string {
	return []string{TimerToolName, ReadTimerToolName, StopTimerToolName, CancelTimerToolName, PauseTimerToolName, ResumeTimerToolName}
}

const timerResultNote = ` Results are JSON: {ok, timer_id, status, total_s, remaining_s, elapsed_s, timed_out, reason}; ok:false carries the reason (unknown timer, wrong state, bad duration). Statuses: Running, Waiting, Paused, Background, Completed, Stopped.`

// TimerToolSpecs returns the six strict timer tool schemas of docs/timers.md:
// every property is required (unused ones take "" or 0) and no others are
// allowed.
func TimerToolSpecs() []llm.ToolSpec {
	prop := func(name, typ, desc string) string {
		return `"` + name + `":{"type":"` + typ + `","description":` + jsonString(desc) + `}`
	}
	id := prop("timer_id", "string", `The timer, from an earlier result; "" to create one (timer) or to list all (read_timer).`)
	reason := prop("reason", "string", `Why, in a few words; "" if none.`)
	schema := func(props ...string) json.RawMessage {
		names := make([]string, len(props))
		for i, p := range props {
			names[i] = p[1 : strings.Index(p[1:], `"`)+1]
		}
		return json.RawMessage(`{"type":"object","properties":{` + strings.Join(props, ",") +
			`},"required":["` + strings.Join(names, `","`) + `"],"additionalProperties":false}`)
	}
	spec := func(name, desc string, params json.RawMessage) llm.ToolSpec {
		return llm.ToolSpec{Name: name, Description: desc + timerResultNote, Parameters: params, Strict: true}
	}
	return []llm.ToolSpec{
		spec(TimerToolName, `Wait for something (a build, a deploy, a server start) without polling. With timer_id "", create a timer of total_duration seconds and wait on it; with a timer_id, keep waiting on that timer (its end stands; total_duration is ignored). The call returns when the timer completes, or after timeout_duration seconds with timed_out:true and the timer still running — check on the thing you wait for, then call timer again with the same timer_id, or stop_timer when it is done. timeout_duration 0 waits as long as allowed; every wait is capped (the result says so). Waiting costs nothing.`,
			schema(prop("total_duration", "number", "Seconds the timer runs in all (when creating); 0 when continuing."),
				prop("timeout_duration", "number", "Seconds to wait in this call before returning with timed_out:true; 0 = as long as allowed."),
				id, reason)),
		spec(ReadTimerToolName, `Read one timer of this session, or all of them with timer_id "".`, schema(id)),
		spec(StopTimerToolName, `Kill a timer: it becomes Stopped and sends no notice. Use it when what you waited for is done.`, schema(id, reason)),
		spec(CancelTimerToolName, `Stop waiting on a timer but keep it running in the background: when it ends you get a user message [timer completed: "<reason>" id=<id> after <duration>]. Use it to do other work meanwhile.`, schema(id, reason)),
		spec(PauseTimerToolName, `Freeze a timer's remaining time for pause_duration seconds; it resumes by itself after that.`,
			schema(id, prop("pause_duration", "number", "Seconds to stay paused (more than 0)."), reason)),
		spec(ResumeTimerToolName, `Resume a paused timer before its pause ends.`, schema(id, reason)),
	}
}

func jsonString(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	return string(b)
}
