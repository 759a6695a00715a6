package mockllm

import (
	"regexp"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/chimehq/chime/llm"
)

// A scripted tool call's arguments may quote the last tool result the
// request carries: {{lastResult.PATH}} becomes the value at the gjson PATH
// of that result's JSON (docs/mock-provider.md). A scripted model can so
// continue what a server tool created, such as a timer id it was handed.
var lastResultRef = regexp.MustCompile(`\{\{lastResult\.([A-Za-z0-9_.#-]+)\}\}`)

// fillFromResult replaces the references in args; with no result, or a
// path it lacks, a reference becomes "".
func fillFromResult(args, result string) string {
	if !strings.Contains(args, "{{lastResult.") {
		return args
	}
	return lastResultRef.ReplaceAllStringFunc(args, func(ref string) string {
		path := lastResultRef.FindStringSubmatch(ref)[1]
		return gjson.Get(result, path).String()
	})
}

// LastToolOutput is the text of the request's last tool result: Chat's
// last role "tool" message, Responses' last function_call_output, the last
// tool_result block of Messages.
func LastToolOutput(p llm.Protocol, body []byte) string {
	out := ""
	switch p {
	case llm.Chat:
		gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
			if m.Get("role").String() == "tool" {
				out = textOf(m.Get("content"))
			}
			return true
		})
	case llm.Responses:
		gjson.GetBytes(body, "input").ForEach(func(_, it gjson.Result) bool {
			if it.Get("type").String() == "function_call_output" {
				out = textOf(it.Get("output"))
			}
			return true
		})
	case llm.Messages:
		gjson.GetBytes(body, "messages").ForEach(func(_, m gjson.Result) bool {
			m.Get("content").ForEach(func(_, b gjson.Result) bool {
				if b.Get("type").String() == "tool_result" {
					out = textOf(b.Get("content"))
				}
				return true
			})
			return true
		})
	}
	return out
}

// textOf is a string content, or its text parts joined.
func textOf(v gjson.Result) string {
	if v.Type == gjson.String {
		return v.String()
	}
	var b strings.Builder
	v.ForEach(func(_, part gjson.Result) bool {
		b.WriteString(part.Get("text").String())
		return true
	})
	return b.String()
}
