package hostapi

import (
	"encoding/json"
	"slices"

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
