package clock

import (
	"bytes"
	"encoding/json"
)

// ToolName is the one tool the model sees (SPEC §6).
const ToolName = "clock"

// ToolDescription is the `clock` tool's description for the model.
const ToolDescription = "Current time and self-scheduled reminders for this session. " +
	"action get: current time (UTC, local, NTP status). " +
	"action schedule: items[] of {dueAt ISO8601 with offset, task, tool, arguments (JSON string), repeat, maxRuns}; " +
	"when due, the task is shown to you in a later request as [scheduled task:\"…\"]. " +
	"repeat is \"\" (once), daily, weekly, \"every <duration>\" (e.g. every 30m) or a 5-field cron expression; " +
	"maxRuns limits repeats (0 = unlimited). " +
	"action list: this session's tasks. action cancel: remove taskId. action clear: remove all tasks. " +
	"action update: change taskId with items[0]; \"\" or 0 keeps a field, repeat \"once\" stops repeating. " +
	"Unused fields take \"\" or []."

// toolParameters is the strict JSON schema of seed 000 §2.2 extended by
// SPEC §6: every property required, no additional properties.
const toolParameters = `{
  "type": "object",
  "properties": {
    "action": {"type": "string", "enum": ["get", "schedule", "list", "cancel", "clear", "update"]},
    "items": {
      "type": "array",
      "items": {
        "type": "object",
        "properties": {
          "dueAt": {"type": "string", "description": "ISO8601 time with offset, e.g. 2026-01-21T20:30:00-08:00"},
          "task": {"type": "string", "description": "What to do when due; name the tool or action to take."},
          "tool": {"type": "string", "description": "Suggested tool name, a hint only; \"\" for none."},
          "arguments": {"type": "string", "description": "Suggested tool arguments as a JSON string, e.g. \"{}\"."},
          "repeat": {"type": "string", "description": "\"\" once, daily, weekly, every <duration>, or 5-field cron."},
          "maxRuns": {"type": "integer", "description": "Maximum runs of a repeating task; 0 = unlimited."}
        },
        "required": ["dueAt", "task", "tool", "arguments", "repeat", "maxRuns"],
        "additionalProperties": false
      }
    },
    "taskId": {"type": "string", "description": "Task to cancel or update; \"\" otherwise."}
  },
  "required": ["action", "items", "taskId"],
  "additionalProperties": false
}`

// ToolParameters returns the `clock` tool's strict JSON schema (compact).
func ToolParameters() json.RawMessage {
	var b bytes.Buffer
	if err := json.Compact(&b, []byte(toolParameters)); err != nil {
		panic("clock: invalid tool schema: " + err.Error()) // a constant; tests cover it
	}
	return b.Bytes()
}
