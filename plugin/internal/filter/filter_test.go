package filter

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // as plugin/main.go does for chime.wasm

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/proxytest"
	"github.com/tidwall/gjson"
)

// wall is the pinned filter clock: 21:22:38.241Z, so with an NTP offset
// of -12 ms the tag shows the docs/time.md#time-tag instant 21:22:38.229Z.
var wall = time.Date(2026, 2, 2, 21, 22, 38, 241_000_000, time.UTC)

const (
	tagUTC0   = "[Time/Date]: utc=`2026-02-02T21:22:38.241Z` local=`2026-02-02 21:22:38.241 +00:00` tz=`UTC` nowMs=`1770067358241` ntpOffsetMs=`0`"
	tagUTCm12 = "[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 21:22:38.229 +00:00` tz=`UTC` nowMs=`1770067358229` ntpOffsetMs=`-12`"
	tagLAm12  = "[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-02 13:22:38.229 -08:00` tz=`America/Los_Angeles` nowMs=`1770067358229` ntpOffsetMs=`-12`"
	tagKTMm12 = "[Time/Date]: utc=`2026-02-02T21:22:38.229Z` local=`2026-02-03 03:07:38.229 +05:45` tz=`Asia/Kathmandu` nowMs=`1770067358229` ntpOffsetMs=`-12`"
)

type env struct {
	t testing.TB
	h *proxytest.Host
}

func newEnv(t *testing.T, config string) *env {
	t.Helper()
	h := proxytest.NewHost(proxytest.Options{
		VMContext:           vmContext{now: func() time.Time { return wall }},
		PluginConfiguration: []byte(config),
		Clusters:            []string{"chime_host"},
	})
	if !h.StartPlugin() {
		t.Fatalf("plugin rejected %q: %q", config, h.GetLogs(proxywasm.LogLevelTrace))
	}
	return &env{t, h}
}

var paths = map[llm.Protocol]string{llm.Chat: "/v1/chat/completions", llm.Responses: "/v1/responses", llm.Messages: "/v1/messages?beta=true"}

func reqHeaders(p llm.Protocol, extra ...[2]string) [][2]string {
	return append([][2]string{
		{":method", "POST"}, {":path", paths[p]}, {":authority", "api"},
		{"content-type", "application/json"}, {"content-length", "99"}, {"x-request-id", "req-1"},
	}, extra...)
}

// send delivers headers and a body in two chunks and returns the stream id.
func (e *env) send(p llm.Protocol, body string, extra ...[2]string) uint32 {
	e.t.Helper()
	id := e.h.InitializeHttpContext()
	if got := e.h.CallOnRequestHeaders(id, reqHeaders(p, extra...), false); got != proxywasm.ActionContinue {
		e.t.Fatalf("headers action = %v", got)
	}
	half := len(body) / 2
	if got := e.h.CallOnRequestBody(id, []byte(body[:half]), false); got != proxywasm.ActionPause {
		e.t.Fatalf("partial body action = %v, want Pause", got)
	}
	e.h.CallOnRequestBody(id, []byte(body[half:]), true)
	return id
}

// calls returns the host calls to path.
func (e *env) calls(path string) []proxytest.HttpCall {
	var out []proxytest.HttpCall
	for _, c := range e.h.GetHttpCalls() {
		if p, _ := header(c.Headers, ":path"); strings.SplitN(p, "?", 2)[0] == path {
			out = append(out, c)
		}
	}
	return out
}

// lastPrepare returns the newest prepare call and its decoded body.
func (e *env) lastPrepare() (proxytest.HttpCall, hostapi.PrepareRequest) {
	e.t.Helper()
	cs := e.calls(hostapi.PathPrepare)
	if len(cs) == 0 {
		e.t.Fatal("no prepare call")
	}
	c := cs[len(cs)-1]
	var prep hostapi.PrepareRequest
	if err := json.Unmarshal(c.Body, &prep); err != nil {
		e.t.Fatalf("prepare body %s: %v", c.Body, err)
	}
	return c, prep
}

// answer answers the newest prepare call with 200 and ans.
func (e *env) answer(ans hostapi.PrepareResponse) {
	e.t.Helper()
	c, _ := e.lastPrepare()
	b, _ := json.Marshal(ans)
	e.h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}, {"content-type", "application/json"}}, b, nil)
}

// fail answers the newest prepare call with a failure (nil headers = timeout).
func (e *env) fail(headers [][2]string, body string) {
	e.t.Helper()
	c, _ := e.lastPrepare()
	e.h.CallOnHttpCallResponse(c.ID, headers, []byte(body), nil)
}

func (e *env) forwarded(id uint32) string {
	e.t.Helper()
	if n := e.h.ResumedRequest(id); n != 1 {
		e.t.Fatalf("request resumed %d times, want 1", n)
	}
	return string(e.h.GetSentRequestBody(id))
}

func (e *env) counter(name string) uint64 {
	e.t.Helper()
	v, ok := e.h.GetCounterValue(name)
	if !ok {
		e.t.Fatalf("metric %s not defined", name)
	}
	return v
}

func header(hs [][2]string, key string) (string, bool) {
	for _, kv := range hs {
		if kv[0] == key {
			return kv[1], true
		}
	}
	return "", false
}

func ntp(offset int64) hostapi.NTPInfo { return hostapi.NTPInfo{Status: "ok", OffsetMs: offset} }

// userTexts returns every user text of a forwarded body, in order.
func userTexts(t *testing.T, p llm.Protocol, body string) []string {
	t.Helper()
	if !gjson.Valid(body) {
		t.Fatalf("forwarded body is not JSON: %s", body)
	}
	list := "messages"
	if p == llm.Responses {
		list = "input"
	}
	var out []string
	gjson.Get(body, list).ForEach(func(_, m gjson.Result) bool {
		if m.Get("role").String() != "user" {
			return true
		}
		c := m.Get("content")
		if c.Type == gjson.String {
			out = append(out, c.Str)
			return true
		}
		c.ForEach(func(_, part gjson.Result) bool {
			if typ := part.Get("type").String(); typ == "text" || typ == "input_text" {
				out = append(out, part.Get("text").String())
			}
			return true
		})
		return true
	})
	return out
}

func toolNames(p llm.Protocol, body string) []string {
	var out []string
	gjson.Get(body, "tools").ForEach(func(_, t gjson.Result) bool {
		name := t.Get("name")
		if p == llm.Chat {
			name = t.Get("function.name")
		}
		out = append(out, name.String())
		return true
	})
	return out
}

// bodies with directives in two user messages, one per protocol.
var taggedBodies = map[llm.Protocol]string{
	llm.Chat: `{"model":"m","messages":[{"role":"user","content":"hi <**stopMessage:\"go on\",3**>"},` +
		`{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"again <**route:fast**><**clock:clear**> now"}]}],` +
		`"tools":[{"type":"function","function":{"name":"client_tool","parameters":{"type":"object"}}}]}`,
	llm.Responses: `{"model":"m","input":[{"role":"user","content":"hi <**stopMessage:\"go on\",3**>"},` +
		`{"type":"message","role":"assistant","content":[{"type":"output_text","text":"ok"}]},` +
		`{"type":"message","role":"user","content":[{"type":"input_text","text":"again <**route:fast**><**clock:clear**> now"}]}],` +
		`"tools":[{"type":"function","name":"client_tool","parameters":{"type":"object"}}]}`,
	llm.Messages: `{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi <**stopMessage:\"go on\",3**>"},` +
		`{"role":"assistant","content":"ok"},{"role":"user","content":[{"type":"text","text":"again <**route:fast**><**clock:clear**> now"}]}],` +
		`"tools":[{"name":"client_tool","input_schema":{"type":"object"}}]}`,
}

func TestInvalidConfigFailsPluginStart(t *testing.T) {
	for raw, want := range map[string]string{
		`{"prepareTimeoutMs":-1}`:            "prepareTimeoutMs",
		`{"defaultTimezone":"Mars/Olympus"}`: "defaultTimezone",
	} {
		h := proxytest.NewHost(proxytest.Options{VMContext: NewVMContext(), PluginConfiguration: []byte(raw)})
		if h.StartPlugin() {
			t.Fatalf("plugin accepted %s", raw)
		}
		logs := h.GetLogs(proxywasm.LogLevelError)
		if len(logs) != 1 || !strings.Contains(logs[0], want) {
			t.Fatalf("%s: error logs = %q", raw, logs)
		}
	}
}

// TestAllProtocolsFullRequestPath: per protocol, directives are stripped
// from every user message, the prepare call carries what the host needs,
// and the answer's tool, time tag and reminders land in that order.
func TestAllProtocolsFullRequestPath(t *testing.T) {
	for _, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		t.Run(p.String(), func(t *testing.T) {
			e := newEnv(t, `{"token":"tok","prepareTimeoutMs":150,"defaultTimezone":"America/Los_Angeles"}`)
			id := e.send(p, taggedBodies[p], [2]string{"x-session-id", "sess-7"})
			if _, ok := header(e.h.GetRequestHeaders(id), "content-length"); ok {
				t.Fatal("content-length kept")
			}
			if len(e.h.GetSentRequestBody(id)) != 0 {
				t.Fatal("body forwarded before the host answered")
			}
			c, prep := e.lastPrepare()
			if c.Upstream != "chime_host" || c.TimeoutMs != 150 {
				t.Fatalf("call = %+v", c)
			}
			for key, want := range map[string]string{":method": "POST", ":authority": "chime-host",
				"content-type": "application/json", "authorization": "Bearer tok"} {
				if got, _ := header(c.Headers, key); got != want {
					t.Errorf("prepare header %s = %q, want %q", key, got, want)
				}
			}
			// The filter's own id, never the client's x-request-id "req-1" (docs/failures.md).
			if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(prep.RequestID) {
				t.Fatalf("request id %q is not the filter's own", prep.RequestID)
			}
			want := hostapi.PrepareRequest{RequestID: prep.RequestID, Protocol: p.String(), SessionID: "sess-7", Timezone: "America/Los_Angeles",
				Directives: []hostapi.HostDirective{{Kind: "route", Route: "fast", Position: 1}, {Kind: "clock:clear", Position: 1}},
				DeadlineMs: wall.UnixMilli() + 150} // the filter's clock + prepareTimeoutMs, no NTP offset learnt yet
			if got, _ := json.Marshal(prep); string(got) != string(must(json.Marshal(want))) {
				t.Fatalf("prepare = %s\nwant      %s", got, must(json.Marshal(want)))
			}

			e.answer(hostapi.PrepareResponse{NTP: ntp(-12), Tools: []string{"clock"}, Reminders: "[scheduled task:\"water\"]"})
			body := e.forwarded(id)
			if strings.Contains(body, "<**") || strings.Contains(body, "**>") {
				t.Fatalf("tags left in %s", body)
			}
			texts := userTexts(t, p, body)
			wantTexts := []string{"hi ", "again  now", tagLAm12, "[scheduled task:\"water\"]"}
			if !slices.Equal(texts, wantTexts) {
				t.Fatalf("user texts = %q\nwant %q", texts, wantTexts)
			}
			if got := toolNames(p, body); !slices.Equal(got, []string{"client_tool", "clock"}) {
				t.Fatalf("tools = %q", got)
			}
			if strings.Count(body, "[Time/Date]") != 1 {
				t.Fatalf("time tag count != 1 in %s", body)
			}
		})
	}
}

// TestDirectivesOfNewUserInputOnly: the host gets the directives of the
// user text after the last assistant message, with their positions; older
// turns are stripped only (docs/directives.md).
func TestDirectivesOfNewUserInputOnly(t *testing.T) {
	e := newEnv(t, "")
	e.send(llm.Chat, `{"messages":[{"role":"user","content":"<**stopMessage:\"old\"**>"},{"role":"assistant","content":"ok"},`+
		`{"role":"user","content":"<**stopMessage:\"new\",2**> <**clock:{\"dueAt\":\"2026-02-03T09:00:00Z\",\"task\":\"t\"}**> <**stopMessage:\"x\",0**> <**bogus:1**>"},`+
		`{"role":"system","content":"a trailing system message"}]}`)
	_, prep := e.lastPrepare()
	want := []hostapi.HostDirective{
		{Kind: "stopMessage", Text: "new", MaxRepeats: 2, Position: 1},
		{Kind: "clock", Clock: &llm.ClockItem{DueAt: "2026-02-03T09:00:00Z", Task: "t"}, Position: 1},
	}
	if got, w := must(json.Marshal(prep.Directives)), must(json.Marshal(want)); string(got) != string(w) {
		t.Fatalf("directives = %s, want %s (malformed and unknown ones are not sent)", got, w)
	}
	if prep.SessionID != "" || prep.Timezone != "UTC" || prep.PreviousResponseID != "" {
		t.Fatalf("prepare = %+v", prep)
	}

	// A tool round trip carries no new user text: nothing to apply.
	e = newEnv(t, "")
	e.send(llm.Messages, `{"messages":[{"role":"user","content":"<**route:fast**> go"},`+
		`{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"bash","input":{}}]},`+
		`{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"done"}]}]}`)
	if _, prep := e.lastPrepare(); len(prep.Directives) != 0 {
		t.Fatalf("tool round trip sent directives %+v", prep.Directives)
	}

	// Responses with stored history: positions count from that response.
	e = newEnv(t, "")
	e.send(llm.Responses, `{"previous_response_id":"resp_7","input":"<**route:fast**>"}`)
	if _, prep := e.lastPrepare(); prep.PreviousResponseID != "resp_7" || len(prep.Directives) != 1 || prep.Directives[0].Position != 0 {
		t.Fatalf("prepare = %+v", prep)
	}
}

func TestSessionFromBody(t *testing.T) {
	e := newEnv(t, "")
	e.send(llm.Messages, `{"metadata":{"user_id":"{\"session_id\":\"from-body\"}"},"messages":[]}`)
	if _, prep := e.lastPrepare(); prep.SessionID != "from-body" {
		t.Fatalf("session = %q", prep.SessionID)
	}
	// A session header wins over the body (docs/protocols.md#session-identity).
	e.send(llm.Responses, `{"prompt_cache_key":"pck","input":"x"}`, [2]string{"x-chime-session", "hdr"})
	if _, prep := e.lastPrepare(); prep.SessionID != "hdr" {
		t.Fatalf("session = %q", prep.SessionID)
	}
	// Header names in any case; a higher-priority header wins whatever
	// the order on the wire; a blank one does not count.
	e.send(llm.Chat, `{"messages":[]}`, [2]string{"Thread-Id", "thread"}, [2]string{"X-Chime-Session", "  "},
		[2]string{"Session_ID", "upper"}, [2]string{"X-Chime-Timezone", "Asia/Kathmandu"})
	if _, prep := e.lastPrepare(); prep.SessionID != "upper" || prep.Timezone != "Asia/Kathmandu" {
		t.Fatalf("session = %q, zone = %q", prep.SessionID, prep.Timezone)
	}
}

func TestTimeTagZoneFromHeaderConfigOrUTC(t *testing.T) {
	cases := []struct {
		name, config, header, want string
	}{
		{"header wins", `{"defaultTimezone":"America/Los_Angeles"}`, "Asia/Kathmandu", tagKTMm12},
		{"bad header falls back to config", `{"defaultTimezone":"America/Los_Angeles"}`, "Mars/Base", tagLAm12},
		{"no header, no config: UTC", ``, "", tagUTCm12},
	}
	for _, tc := range cases {
		e := newEnv(t, tc.config)
		var extra [][2]string
		if tc.header != "" {
			extra = append(extra, [2]string{hostapi.HeaderTimezone, tc.header})
		}
		id := e.send(llm.Chat, `{"messages":[{"role":"user","content":"q"}]}`, extra...)
		e.answer(hostapi.PrepareResponse{NTP: ntp(-12)})
		got := e.forwarded(id)
		want := `{"messages":[{"role":"user","content":"q"},{"role":"user","content":` + string(must(json.Marshal(tc.want))) + `}]}`
		if got != want {
			t.Errorf("%s:\n got %s\nwant %s", tc.name, got, want)
		}
	}
}

func TestTimeTagCanBeTurnedOff(t *testing.T) {
	e := newEnv(t, `{"timeTag":false}`)
	body := `{"messages":[{"role":"user","content":"q"}]}`
	id := e.send(llm.Chat, body)
	e.answer(hostapi.PrepareResponse{NTP: ntp(0)})
	if got := e.forwarded(id); got != body {
		t.Fatalf("forwarded %s", got)
	}
}

func TestClockToolOnlyWhenHostSaysSo(t *testing.T) {
	for _, tc := range []struct {
		tools []string
		want  []string
	}{
		{nil, nil},
		{[]string{"not_ours"}, nil},
		{[]string{"clock"}, []string{"clock"}},
	} {
		e := newEnv(t, "")
		id := e.send(llm.Messages, `{"messages":[{"role":"user","content":"q"}]}`)
		e.answer(hostapi.PrepareResponse{NTP: ntp(0), Tools: tc.tools})
		body := e.forwarded(id)
		if got := toolNames(llm.Messages, body); !slices.Equal(got, tc.want) {
			t.Errorf("host tools %q: injected %q", tc.tools, got)
		}
		if len(tc.want) > 0 && gjson.Get(body, "tools.0.input_schema.properties.action").Exists() == false {
			t.Errorf("clock schema missing: %s", body)
		}
	}
}

// TestToolFamiliesSwitch: the plugin configuration's tools switch turns a
// family off whatever the host announces, and a client's own tool of a
// server tool's name keeps its schema (docs/timers.md).
func TestToolFamiliesSwitch(t *testing.T) {
	all := append([]string{"clock"}, hostapi.TimerToolNames()...)
	for _, tc := range []struct {
		config string
		body   string
		want   []string
	}{
		{"", `{"messages":[{"role":"user","content":"q"}]}`, []string{"clock", "timer", "read_timer", "stop_timer", "cancel_timer", "pause_timer", "resume_timer"}},
		{`{"tools":{"timers":false}}`, `{"messages":[{"role":"user","content":"q"}]}`, []string{"clock"}},
		{`{"tools":{"clock":false,"timers":true}}`, `{"messages":[{"role":"user","content":"q"}]}`, hostapi.TimerToolNames()},
		{"", `{"messages":[{"role":"user","content":"q"}],"tools":[{"name":"timer","description":"mine","input_schema":{"type":"object"}}]}`,
			[]string{"timer", "clock", "read_timer", "stop_timer", "cancel_timer", "pause_timer", "resume_timer"}},
	} {
		e := newEnv(t, tc.config)
		id := e.send(llm.Messages, tc.body)
		e.answer(hostapi.PrepareResponse{NTP: ntp(0), Tools: all})
		body := e.forwarded(id)
		if got := toolNames(llm.Messages, body); !slices.Equal(got, tc.want) {
			t.Errorf("config %s: injected %q, want %q", tc.config, got, tc.want)
		}
		if strings.Contains(tc.body, `"mine"`) && gjson.Get(body, `tools.#(name=="timer").description`).String() != "mine" {
			t.Errorf("the client's own timer tool was replaced: %s", body)
		}
	}
	if _, _, err := ParseConfig([]byte(`{"tools":{"alarms":true}}`)); err == nil || !strings.Contains(err.Error(), "tools.alarms: unknown tool family") {
		t.Fatalf("unknown family: %v", err)
	}
	if _, _, err := ParseConfig([]byte(`{"tools":{"timers":"yes"}}`)); err == nil {
		t.Fatal("a non-boolean switch was accepted")
	}
}

// TestToolPlanPerRequest: one VM keeps the plan it made of the host's tool
// list, yet each request is checked against its own tools: a client's own
// "timer" hides the server's in that request only, and the plan shared by
// the requests is not changed by it.
func TestToolPlanPerRequest(t *testing.T) {
	all := append([]string{"clock"}, hostapi.TimerToolNames()...)
	plain := `{"messages":[{"role":"user","content":"q"}]}`
	own := `{"messages":[{"role":"user","content":"q"}],"tools":[{"name":"timer","description":"mine","input_schema":{"type":"object"}}]}`
	e := newEnv(t, "")
	for i, tc := range []struct {
		body string
		want []string
	}{
		{plain, all},
		{own, []string{"timer", "clock", "read_timer", "stop_timer", "cancel_timer", "pause_timer", "resume_timer"}},
		{plain, all},
		{own, []string{"timer", "clock", "read_timer", "stop_timer", "cancel_timer", "pause_timer", "resume_timer"}},
	} {
		id := e.send(llm.Messages, tc.body)
		e.answer(hostapi.PrepareResponse{NTP: ntp(0), Tools: all})
		body := e.forwarded(id)
		if got := toolNames(llm.Messages, body); !slices.Equal(got, tc.want) {
			t.Errorf("request %d: injected %q, want %q", i, got, tc.want)
		}
		if n := strings.Count(body, `"name":"timer"`); n != 1 {
			t.Errorf("request %d: %d timer tools, want 1: %s", i, n, body)
		}
	}
}

// TestFailOpenStripsAndTagsWithLastOffset: the host answers once (offset
// -12), then times out; the second request still loses its tags and gets
// a time tag at the last known offset, and nothing else.
func TestFailOpenStripsAndTagsWithLastOffset(t *testing.T) {
	e := newEnv(t, `{"defaultTimezone":"America/Los_Angeles"}`)
	first := e.send(llm.Chat, `{"messages":[]}`)
	e.answer(hostapi.PrepareResponse{NTP: ntp(-12)})
	e.forwarded(first)

	for i, p := range []llm.Protocol{llm.Chat, llm.Responses, llm.Messages} {
		id := e.send(p, taggedBodies[p])
		e.fail(nil, "") // timeout
		body := e.forwarded(id)
		if strings.Contains(body, "<**") {
			t.Fatalf("%s: tags kept when the host is down: %s", p, body)
		}
		if got, want := userTexts(t, p, body), []string{"hi ", "again  now", tagLAm12}; !slices.Equal(got, want) {
			t.Fatalf("%s: user texts = %q, want %q", p, got, want)
		}
		if got := toolNames(p, body); !slices.Equal(got, []string{"client_tool"}) {
			t.Fatalf("%s: tools = %q", p, got)
		}
		if got := e.counter(MetricFailOpen); got != uint64(i+1) {
			t.Fatalf("fail-open count = %d", got)
		}
	}
	if got := e.counter(MetricHostCallFailures); got != 3 {
		t.Fatalf("host failures = %d", got)
	}
}

func TestHostFailuresFailOpen(t *testing.T) {
	cases := []struct {
		name    string
		headers [][2]string
		body    string
	}{
		{"no response", nil, ""},
		{"5xx", [][2]string{{":status", "503"}}, "down"},
		{"401", [][2]string{{":status", "401"}}, ""},
		{"missing status", [][2]string{{"x", "y"}}, "{}"},
		{"2xx, not JSON", [][2]string{{":status", "200"}}, "ok"},
	}
	e := newEnv(t, "")
	for i, tc := range cases {
		id := e.send(llm.Chat, `{"messages":[{"role":"user","content":"<**x**>q"}]}`)
		e.fail(tc.headers, tc.body)
		want := `{"messages":[{"role":"user","content":"q"},{"role":"user","content":` + string(must(json.Marshal(tagUTC0))) + `}]}`
		if got := e.forwarded(id); got != want {
			t.Errorf("%s: forwarded\n%s\nwant\n%s", tc.name, got, want)
		}
		if e.h.GetLocalResponse(id) != nil {
			t.Errorf("%s: local response sent", tc.name)
		}
		if got := e.counter(MetricHostCallFailures); got != uint64(i+1) {
			t.Errorf("%s: failures = %d", tc.name, got)
		}
	}
	if logs := e.h.GetLogs(proxywasm.LogLevelDebug); !slices.ContainsFunc(logs, func(s string) bool {
		return strings.Contains(s, "status 503: down")
	}) {
		t.Fatalf("debug logs lack the failure detail: %q", logs)
	}
}

func TestDispatchFailureFailsOpenAtOnce(t *testing.T) {
	h := proxytest.NewHost(proxytest.Options{VMContext: vmContext{now: func() time.Time { return wall }}, Clusters: []string{"other"}})
	if !h.StartPlugin() {
		t.Fatal("start failed")
	}
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, reqHeaders(llm.Chat), false)
	if got := h.CallOnRequestBody(id, []byte(`{"messages":[{"role":"user","content":"a<**b**>"}]}`), true); got != proxywasm.ActionContinue {
		t.Fatalf("action = %v, want Continue when the call cannot be sent", got)
	}
	want := `{"messages":[{"role":"user","content":"a"},{"role":"user","content":` + string(must(json.Marshal(tagUTC0))) + `}]}`
	if got := string(h.GetSentRequestBody(id)); got != want {
		t.Fatalf("forwarded %s", got)
	}
	// Two calls could not be sent: the prepare and the VM's first
	// generation poll, which its first request starts (skip.go).
	if v, _ := h.GetCounterValue(MetricHostCallFailures); v != 2 {
		t.Fatalf("failures = %d, want 2", v)
	}
}

func TestFailClosedAnswers503(t *testing.T) {
	e := newEnv(t, `{"failOpen":false}`)
	id := e.send(llm.Chat, `{"messages":[]}`)
	e.fail(nil, "")
	lr := e.h.GetLocalResponse(id)
	if lr == nil || lr.StatusCode != 503 || e.h.ResumedRequest(id) != 0 {
		t.Fatalf("local response = %+v, resumed %d", lr, e.h.ResumedRequest(id))
	}
	if e.counter(MetricFailOpen) != 0 {
		t.Fatal("fail-closed request counted as fail open")
	}
}

func TestMalformedBodiesForwardUnmodified(t *testing.T) {
	e := newEnv(t, "")
	for i, body := range []string{
		`{"messages":[{"role":"user","content":"<**clock:clear**>"}`, // truncated
		`{"messages":{"role":"user"}}`,                               // wrong shape
		`[1,2]`,
		``,
	} {
		id := e.h.InitializeHttpContext()
		e.h.CallOnRequestHeaders(id, reqHeaders(llm.Chat), false)
		if got := e.h.CallOnRequestBody(id, []byte(body), true); got != proxywasm.ActionContinue {
			t.Fatalf("%q: action %v", body, got)
		}
		if got := string(e.h.GetSentRequestBody(id)); got != body {
			t.Fatalf("%q forwarded as %q", body, got)
		}
		if got := e.counter(MetricMalformed); got != uint64(i+1) {
			t.Fatalf("malformed count = %d", got)
		}
	}
	// A POST without a body is one too.
	id := e.h.InitializeHttpContext()
	if got := e.h.CallOnRequestHeaders(id, reqHeaders(llm.Messages), true); got != proxywasm.ActionContinue {
		t.Fatalf("headers-only action %v", got)
	}
	if len(e.h.GetHttpCalls()) != 0 || e.counter(MetricMalformed) != 5 {
		t.Fatalf("calls %d, malformed %d", len(e.h.GetHttpCalls()), e.counter(MetricMalformed))
	}
	for _, l := range e.h.GetLogs(proxywasm.LogLevelInfo) {
		if strings.Contains(l, "forwarding unmodified") {
			t.Fatalf("malformed body logged above debug: %s", l)
		}
	}
}

func TestFollowupMarker(t *testing.T) {
	e := newEnv(t, `{"token":"s3cret"}`)
	body := `{"messages":[{"role":"user","content":"<**stopMessage:\"x\"**> keep"}]}`
	marker := hostapi.FollowupMarker("s3cret", "req-0:stop", wall)

	// followup sends one with a valid marker and returns its stream and
	// the host's marker check.
	followup := func() (uint32, proxytest.HttpCall) {
		t.Helper()
		valid := reqHeaders(llm.Chat, [2]string{hostapi.HeaderFollowup, marker})
		id := e.h.InitializeHttpContext()
		if got := e.h.CallOnRequestHeaders(id, valid, false); got != proxywasm.ActionPause {
			t.Fatalf("headers action %v: the followup must wait for the host's marker check", got)
		}
		wantHeaders := slices.DeleteFunc(slices.Clone(valid), func(kv [2]string) bool { return kv[0] == hostapi.HeaderFollowup })
		if got := e.h.GetRequestHeaders(id); !slices.Equal(got, wantHeaders) {
			t.Fatalf("followup headers = %q, want %q", got, wantHeaders)
		}
		if got := e.h.CallOnRequestBody(id, []byte(body), true); got != proxywasm.ActionPause {
			t.Fatalf("body action %v before the marker check", got)
		}
		checks := e.calls(hostapi.PathFollowup)
		c := checks[len(checks)-1]
		if string(c.Body) != string(must(json.Marshal(hostapi.FollowupRequest{Marker: marker}))) {
			t.Fatalf("marker check body %s", c.Body)
		}
		return id, c
	}

	// Accepted: the request passes untouched, with no other host call.
	id, c := followup()
	e.h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "204"}}, nil, nil)
	if e.h.ResumedRequest(id) != 1 || e.h.GetLocalResponse(id) != nil {
		t.Fatal("accepted followup not resumed")
	}
	if got := string(e.h.GetSentRequestBody(id)); got != body {
		t.Fatalf("followup body changed: %s", got)
	}
	e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	e.h.CompleteHttpContext(id)
	if n := len(e.h.GetHttpCalls()); n != 1 {
		t.Fatalf("followup made %d host calls, want the marker check only", n)
	}

	// Replayed: the host refuses the marker; the request gets 403 and
	// never reaches the provider.
	id, c = followup()
	e.h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "403"}}, []byte(`{"error":"used"}`), nil)
	if lr := e.h.GetLocalResponse(id); lr == nil || lr.StatusCode != 403 || e.h.ResumedRequest(id) != 0 {
		t.Fatalf("replayed marker: local response %+v, resumed %d", lr, e.h.ResumedRequest(id))
	}

	// The host cannot be asked: fail open lets the genuine marker pass.
	id, c = followup()
	e.h.CallOnHttpCallResponse(c.ID, nil, nil, nil)
	if e.h.ResumedRequest(id) != 1 || string(e.h.GetSentRequestBody(id)) != body {
		t.Fatal("followup not passed when the host did not answer (fail open)")
	}

	expired := hostapi.FollowupMarker("s3cret", "req-0", wall.Add(-hostapi.FollowupMarkerTTL-2*time.Minute))
	for _, forged := range []string{hostapi.FollowupMarker("guess", "req-0", wall), expired, "req-0.abc", "x"} {
		id := e.send(llm.Chat, body, [2]string{hostapi.HeaderFollowup, forged})
		if _, ok := header(e.h.GetRequestHeaders(id), hostapi.HeaderFollowup); ok {
			t.Fatalf("forged marker %q forwarded", forged)
		}
		e.answer(hostapi.PrepareResponse{NTP: ntp(0)})
		got := e.forwarded(id)
		if strings.Contains(got, "<**") || !strings.Contains(got, "[Time/Date]") {
			t.Fatalf("forged marker %q: request not treated as normal: %s", forged, got)
		}
	}
	if n := len(e.calls(hostapi.PathFollowup)); n != 3 {
		t.Fatalf("%d marker checks, want 3: forged or expired markers are not sent to the host", n)
	}
}

func TestNoTokenNeverTrustsAMarker(t *testing.T) {
	e := newEnv(t, "")
	e.send(llm.Chat, `{"messages":[]}`, [2]string{hostapi.HeaderFollowup, hostapi.FollowupMarker("", "r", wall)})
	if len(e.calls(hostapi.PathPrepare)) != 1 {
		t.Fatal("a marker was trusted without a token")
	}
	if _, ok := header(e.calls(hostapi.PathPrepare)[0].Headers, "authorization"); ok {
		t.Fatal("authorization sent without a token")
	}
}

// prepareIDs names the request id of the n-th prepare call "req-<n>", so
// tests can compare the filter's random ids.
func (e *env) prepareIDs() map[string]string {
	names := map[string]string{}
	for i, c := range e.calls(hostapi.PathPrepare) {
		var prep hostapi.PrepareRequest
		if err := json.Unmarshal(c.Body, &prep); err != nil {
			e.t.Fatal(err)
		}
		names[prep.RequestID] = fmt.Sprintf("req-%d", i+1)
	}
	return names
}

// outcomes lists the commit and rollback calls as "<path> req-<n>", n the
// prepare call of the id (see prepareIDs); an id no prepare sent is shown
// as is.
func outcomes(e *env) []string {
	var out []string
	names := e.prepareIDs()
	for _, c := range e.h.GetHttpCalls() {
		p, _ := header(c.Headers, ":path")
		if p == hostapi.PathCommit || p == hostapi.PathRollback {
			var o hostapi.OutcomeRequest
			if err := json.Unmarshal(c.Body, &o); err != nil {
				e.t.Fatal(err)
			}
			name, ok := names[o.RequestID]
			if !ok {
				name = o.RequestID
			}
			out = append(out, p+" "+name)
		}
	}
	return out
}

func TestReservationOutcome(t *testing.T) {
	cases := []struct {
		name     string
		reserved bool
		finish   func(e *env, id uint32)
		want     []string
	}{
		{"2xx commits", true, func(e *env, id uint32) {
			e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		}, []string{hostapi.PathCommit + " req-1"}},
		{"500 rolls back", true, func(e *env, id uint32) {
			e.h.CallOnResponseHeaders(id, [][2]string{{":status", "500"}}, false)
		}, []string{hostapi.PathRollback + " req-1"}},
		{"reset before headers rolls back", true, func(e *env, id uint32) {}, []string{hostapi.PathRollback + " req-1"}},
		{"nothing reserved: no outcome", false, func(e *env, id uint32) {
			e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
		}, nil},
		{"nothing reserved, reset: no outcome", false, func(e *env, id uint32) {}, nil},
	}
	for _, tc := range cases {
		e := newEnv(t, `{"token":"tok"}`)
		id := e.send(llm.Messages, `{"messages":[{"role":"user","content":"q"}]}`)
		e.answer(hostapi.PrepareResponse{NTP: ntp(0), Reminders: "[scheduled task:\"t\"]", Reserved: tc.reserved})
		e.forwarded(id)
		tc.finish(e, id)
		e.h.CallOnResponseBody(id, []byte("{}"), true)
		e.h.CompleteHttpContext(id) // exactly one outcome even after the stream ends
		if got := outcomes(e); !slices.Equal(got, tc.want) {
			t.Errorf("%s: outcomes %q, want %q", tc.name, got, tc.want)
			continue
		}
		for _, c := range e.h.GetHttpCalls() {
			if p, _ := header(c.Headers, ":path"); p != hostapi.PathCommit && p != hostapi.PathRollback {
				continue
			}
			if auth, _ := header(c.Headers, "authorization"); auth != "Bearer tok" || c.Upstream != "chime_host" {
				t.Errorf("%s: outcome call %+v", tc.name, c)
			}
			// Fire and forget: a failed outcome is counted, nothing else.
			e.h.CallOnHttpCallResponse(c.ID, nil, nil, nil)
			if e.counter(MetricHostCallFailures) != 1 {
				t.Errorf("%s: failed outcome not counted", tc.name)
			}
		}
	}
}

func TestReservedAnswerAfterStreamEndedRollsBack(t *testing.T) {
	e := newEnv(t, "")
	id := e.send(llm.Chat, `{"messages":[]}`)
	e.h.CompleteHttpContext(id)
	e.answer(hostapi.PrepareResponse{NTP: ntp(0), Reminders: "r", Reserved: true})
	if got := outcomes(e); !slices.Equal(got, []string{hostapi.PathRollback + " req-1"}) {
		t.Fatalf("outcomes = %q", got)
	}
	for _, l := range e.h.GetLogs(proxywasm.LogLevelTrace) {
		if strings.Contains(l, "resume") || strings.Contains(l, "panic") {
			t.Fatalf("late answer touched the finished stream: %q", l)
		}
	}
}

func TestReservedButUndeliverableRollsBackAtOnce(t *testing.T) {
	e := newEnv(t, "")
	// Anthropic content that is neither a string nor a list: nothing can
	// be appended, so the reserved reminders never reach the model.
	body := `{"messages":[{"role":"user","content":5}]}`
	id := e.send(llm.Messages, body)
	e.answer(hostapi.PrepareResponse{NTP: ntp(0), Reminders: "r", Reserved: true})
	if got := e.forwarded(id); got != body {
		t.Fatalf("forwarded %s", got)
	}
	e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	e.h.CompleteHttpContext(id)
	if got := outcomes(e); !slices.Equal(got, []string{hostapi.PathRollback + " req-1"}) {
		t.Fatalf("outcomes = %q", got)
	}
}

func TestTimedOutPrepareIsRolledBack(t *testing.T) {
	e := newEnv(t, "")
	id := e.send(llm.Chat, `{"messages":[]}`)
	e.fail(nil, "")
	e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	e.h.CompleteHttpContext(id)
	if got := outcomes(e); !slices.Equal(got, []string{hostapi.PathRollback + " req-1"}) {
		t.Fatalf("outcomes = %q", got)
	}
	// The proxy answers a call that timed out with its own 504, and one
	// whose host died mid-call with a 503: the host may have reserved
	// (it serves a late prepare, or was killed after reserving), so
	// those are rolled back too, as is any other failed answer.
	for i, failed := range []struct {
		status, body string
	}{
		{"504", "upstream request timeout"},
		{"503", "upstream connect error or disconnect/reset before headers. reset reason: connection termination"},
		{"500", "internal error"},
		{"200", "not json"},
	} {
		id := e.send(llm.Chat, `{"messages":[]}`)
		e.fail([][2]string{{":status", failed.status}}, failed.body)
		e.forwarded(id) // failed open
		got := outcomes(e)
		if len(got) != i+2 || got[i+1] != hostapi.PathRollback+" req-"+strconv.Itoa(i+2) {
			t.Fatalf("after a %s prepare: outcomes = %q", failed.status, got)
		}
	}
	// The host's own refusal (a JSON error: busy, body too large) came
	// before it reserved anything, a call the proxy could not even send
	// (no connection: the host is down; the circuit breaker) never reached
	// it, and a host that answered without reserving gets no outcome
	// either.
	for _, status := range []string{"503", "413"} {
		id := e.send(llm.Chat, `{"messages":[]}`)
		e.fail([][2]string{{":status", status}, {"content-type", "application/json"}}, `{"error":"host busy: too many prepare calls in flight"}`)
		e.forwarded(id)
	}
	for _, body := range []string{
		"upstream connect error or disconnect/reset before headers. reset reason: connection failure, transport failure reason: delayed connect error: 111",
		"upstream connect error or disconnect/reset before headers. reset reason: overflow",
	} {
		id := e.send(llm.Chat, `{"messages":[]}`)
		e.fail([][2]string{{":status", "503"}, {"content-type", "text/plain"}}, body)
		e.forwarded(id)
	}
	id = e.send(llm.Chat, `{"messages":[]}`)
	e.answer(hostapi.PrepareResponse{})
	e.forwarded(id)
	e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false)
	if got := len(outcomes(e)); got != 5 {
		t.Fatalf("outcomes after answers that reserved nothing: %d", got)
	}
}

func TestTickRefreshesOffset(t *testing.T) {
	// Without skipPrepare the tick asks for the NTP view every 30 s.
	e := newEnv(t, `{"token":"tok","skipPrepare":false}`)
	if e.h.TickPeriod() != tickPeriodMs {
		t.Fatalf("tick period = %d", e.h.TickPeriod())
	}
	e.h.Tick()
	e.h.Tick() // one refresh at a time
	state := e.calls(hostapi.PathState)
	if len(state) != 1 {
		t.Fatalf("state calls = %d", len(state))
	}
	c := state[0]
	if m, _ := header(c.Headers, ":method"); m != "GET" || len(c.Body) != 0 || c.TimeoutMs == 0 {
		t.Fatalf("state call = %+v", c)
	}
	if p, _ := header(c.Headers, ":path"); p != hostapi.PathState {
		t.Fatalf("state call without skipPrepare polls: %s", p)
	}
	if auth, _ := header(c.Headers, "authorization"); auth != "Bearer tok" {
		t.Fatalf("state call lacks the token: %+v", c)
	}
	e.h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}},
		must(json.Marshal(hostapi.StateResponse{NowMs: 1, NTP: hostapi.NTPInfo{Status: "ok", OffsetMs: 250}})), nil)
	e.h.Tick()
	if n := len(e.calls(hostapi.PathState)); n != 1 {
		t.Fatalf("state calls within 30 s = %d", n)
	}

	// With it (the default) the generation poll brings the NTP view.
	e = newEnv(t, `{"token":"tok"}`)
	e.h.Tick()
	state = e.calls(hostapi.PathState)
	if len(state) != 1 {
		t.Fatalf("polls = %d", len(state))
	}
	if p, _ := header(state[0].Headers, ":path"); !strings.HasPrefix(p, hostapi.PathState+"?gen=0&instance=") {
		t.Fatalf("poll path = %s", p)
	}
	e.h.CallOnHttpCallResponse(state[0].ID, [][2]string{{":status", "200"}},
		must(json.Marshal(hostapi.StateResponse{NowMs: 1, NTP: hostapi.NTPInfo{Status: "ok", OffsetMs: 250}})), nil)

	// The host then goes down: the tick fails silently and the offset stays.
	e.h.Tick()
	state = e.calls(hostapi.PathState)
	if len(state) != 2 {
		t.Fatalf("polls = %d", len(state))
	}
	e.h.CallOnHttpCallResponse(state[len(state)-1].ID, nil, nil, nil)
	for _, l := range e.h.GetLogs(proxywasm.LogLevelWarn) {
		t.Errorf("tick failure logged loudly: %s", l)
	}
	if e.counter(MetricHostCallFailures) != 1 {
		t.Fatalf("failures = %d", e.counter(MetricHostCallFailures))
	}
	id := e.send(llm.Chat, `{"messages":[]}`)
	e.fail(nil, "")
	tag := gjson.Get(e.forwarded(id), "messages.0.content").Str
	if want := llm.FormatTimeTag(wall, time.UTC, 250); tag != want || !strings.HasSuffix(tag, "ntpOffsetMs=`250`") {
		t.Fatalf("tag = %s, want %s", tag, want)
	}
}

func TestPassThrough(t *testing.T) {
	cases := map[string][][2]string{
		"unknown path":   {{":method", "POST"}, {":path", "/v1/embeddings"}, {"content-length", "2"}},
		"GET":            {{":method", "GET"}, {":path", "/v1/chat/completions"}, {"content-length", "2"}},
		"no path header": {{":method", "POST"}, {"content-length", "2"}},
	}
	e := newEnv(t, "")
	for name, hs := range cases {
		id := e.h.InitializeHttpContext()
		if got := e.h.CallOnRequestHeaders(id, hs, false); got != proxywasm.ActionContinue {
			t.Errorf("%s: headers action %v", name, got)
		}
		if !slices.Equal(e.h.GetRequestHeaders(id), hs) {
			t.Errorf("%s: headers changed to %q", name, e.h.GetRequestHeaders(id))
		}
		if got := e.h.CallOnRequestBody(id, []byte("{}"), true); got != proxywasm.ActionContinue {
			t.Errorf("%s: body action %v", name, got)
		}
		if got := e.h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}}, false); got != proxywasm.ActionContinue {
			t.Errorf("%s: response action %v", name, got)
		}
	}
	if len(e.h.GetHttpCalls()) != 0 || e.counter(MetricRequests) != 0 {
		t.Fatalf("pass-through requests called the host: %+v", e.h.GetHttpCalls())
	}
}

func TestGeneratedRequestID(t *testing.T) {
	e := newEnv(t, "")
	id := e.h.InitializeHttpContext()
	hs := slices.DeleteFunc(reqHeaders(llm.Chat), func(kv [2]string) bool { return kv[0] == "x-request-id" })
	e.h.CallOnRequestHeaders(id, hs, false)
	e.h.CallOnRequestBody(id, []byte(`{"messages":[]}`), true)
	if _, prep := e.lastPrepare(); !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(prep.RequestID) {
		t.Fatalf("request id = %q", prep.RequestID)
	}
	if e.counter(MetricRequests) != 1 {
		t.Fatal("request not counted")
	}
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// TestOutcomeHoldsResponseHeadersUntilAcknowledged: a response that carried
// reminders reaches the client only once the host recorded the outcome, so
// the client's next request cannot race a rollback (docs/clock-tool.md). A response
// without reminders is never held.
func TestOutcomeHoldsResponseHeadersUntilAcknowledged(t *testing.T) {
	for _, reserved := range []bool{true, false} {
		e := newEnv(t, `{"token":"tok"}`)
		id := e.send(llm.Chat, `{"messages":[{"role":"user","content":"q"}]}`)
		e.answer(hostapi.PrepareResponse{NTP: ntp(0), Reminders: "[scheduled task:\"t\"]", Reserved: reserved})
		e.forwarded(id)
		act := e.h.CallOnResponseHeaders(id, [][2]string{{":status", "500"}}, false)
		if !reserved {
			if act != proxywasm.ActionContinue {
				t.Fatalf("unreserved response held: %v", act)
			}
			continue
		}
		if act != proxywasm.ActionPause {
			t.Fatalf("reserved response not held for the outcome: %v", act)
		}
		// With allowOnHeadersStopIteration the body still arrives: it
		// must not send the held headers on (a Continue would).
		if act := e.h.CallOnResponseBody(id, []byte(`{"error":{"message":"boom"}}`), true); act != proxywasm.ActionPause {
			t.Fatalf("the body of a response waiting for its outcome: %v, want Pause", act)
		}
		if e.h.ResumedResponse(id) != 0 {
			t.Fatal("resumed before the host answered")
		}
		calls := e.h.GetHttpCalls()
		last := calls[len(calls)-1]
		e.h.CallOnHttpCallResponse(last.ID, [][2]string{{":status", "204"}}, nil, nil)
		if e.h.ResumedResponse(id) != 1 {
			t.Fatalf("response resumed %d times after the acknowledgement", e.h.ResumedResponse(id))
		}
	}
}

// TestClientRequestIDIsNotAKey: two sessions sending the same x-request-id
// get ids of their own, so one's rollback or cancel cannot touch the
// other's reservation or chain (docs/failures.md).
func TestClientRequestIDIsNotAKey(t *testing.T) {
	e := newEnv(t, `{"token":"tok"}`)
	same := [2]string{"x-request-id", "same"}
	a := e.send(llm.Chat, `{"messages":[{"role":"user","content":"q"}]}`, same, [2]string{"x-session-id", "sess-a"})
	e.answer(hostapi.PrepareResponse{NTP: ntp(0), Reminders: "[scheduled task:\"a\"]", Reserved: true})
	_, prepA := e.lastPrepare()
	b := e.send(llm.Chat, `{"messages":[{"role":"user","content":"q"}]}`, same, [2]string{"x-session-id", "sess-b"})
	e.answer(hostapi.PrepareResponse{NTP: ntp(0), Reminders: "[scheduled task:\"b\"]", Reserved: true})
	_, prepB := e.lastPrepare()
	if prepA.RequestID == "same" || prepB.RequestID == "same" || prepA.RequestID == prepB.RequestID {
		t.Fatalf("request ids %q and %q: the client's id is a key", prepA.RequestID, prepB.RequestID)
	}
	e.forwarded(a)
	e.forwarded(b)
	// b's upstream fails: only b's reservation is rolled back.
	e.h.CallOnResponseHeaders(b, [][2]string{{":status", "500"}}, false)
	e.h.CallOnResponseHeaders(a, [][2]string{{":status", "200"}}, false)
	want := []string{hostapi.PathRollback + " req-2", hostapi.PathCommit + " req-1"}
	if got := outcomes(e); !slices.Equal(got, want) {
		t.Fatalf("outcomes %q, want %q", got, want)
	}
}

// TestFailOpenLoggedAtInfoWithCount: failing open is reported at info, the
// first time at once and then once a minute with the count since the last
// line, not once per request (docs/failures.md).
func TestFailOpenLoggedAtInfoWithCount(t *testing.T) {
	now := wall
	h := proxytest.NewHost(proxytest.Options{
		VMContext: vmContext{now: func() time.Time { return now }},
		Clusters:  []string{"chime_host"},
	})
	if !h.StartPlugin() {
		t.Fatal("plugin did not start")
	}
	e := &env{t, h}
	infos := func() []string {
		var out []string
		for _, l := range h.GetLogs(proxywasm.LogLevelInfo) {
			if strings.Contains(l, "failed open") {
				out = append(out, l)
			}
		}
		return out
	}
	for range 3 {
		e.send(llm.Chat, `{"messages":[]}`)
		e.fail([][2]string{{":status", "503"}}, `{"error":"host busy"}`)
	}
	if got := infos(); len(got) != 1 || !strings.Contains(got[0], "1 request(s) failed open") || !strings.Contains(got[0], "503") {
		t.Fatalf("after 3 fail-opens: %q, want one info line for the first", got)
	}
	now = now.Add(61 * time.Second)
	h.Tick()
	if got := infos(); len(got) != 2 || !strings.Contains(got[1], "2 request(s) failed open") {
		t.Fatalf("after a minute: %q, want a line counting the other 2", got)
	}
	h.Tick()
	if got := infos(); len(got) != 2 {
		t.Fatalf("a tick with nothing new logged again: %q", got)
	}
}

// TestUnknownTimezoneSaidOnce: an x-chime-timezone that names no zone is
// not silently UTC: it is logged at info, once per value (docs/failures.md).
func TestUnknownTimezoneSaidOnce(t *testing.T) {
	e := newEnv(t, "")
	said := func() int {
		n := 0
		for _, l := range e.h.GetLogs(proxywasm.LogLevelInfo) {
			if strings.Contains(l, `unknown x-chime-timezone "Mars/Olympus"`) && strings.Contains(l, "uses UTC") {
				n++
			}
		}
		return n
	}
	for range 3 {
		id := e.send(llm.Chat, `{"messages":[{"role":"user","content":"q"}]}`, [2]string{hostapi.HeaderTimezone, "Mars/Olympus"})
		e.answer(hostapi.PrepareResponse{NTP: ntp(0)})
		if body := e.forwarded(id); !strings.Contains(body, "tz=`UTC`") {
			t.Fatalf("tag not in the default zone: %s", body)
		}
	}
	if n := said(); n != 1 {
		t.Fatalf("unknown zone said %d times, want once", n)
	}
}

// TestDirectivesDroppedAreCountedAndLogged: a directive too large to parse
// and those past the per-request cap are stripped, not sent to the host,
// counted and logged once for the request (docs/failures.md).
func TestDirectivesDroppedAreCountedAndLogged(t *testing.T) {
	e := newEnv(t, "")
	var text strings.Builder
	text.WriteString(`<**stopMessage:"` + strings.Repeat("x", 5000) + `"**>`) // over the parser's bound
	for i := range hostapi.MaxDirectivesPerRequest + 8 {
		fmt.Fprintf(&text, `<**route:r%d**>`, i)
	}
	body := must(json.Marshal(map[string]any{"messages": []any{map[string]any{"role": "user", "content": text.String() + " go"}}}))
	e.send(llm.Chat, string(body))
	_, prep := e.lastPrepare()
	if len(prep.Directives) != hostapi.MaxDirectivesPerRequest {
		t.Fatalf("%d directives sent, want the cap %d", len(prep.Directives), hostapi.MaxDirectivesPerRequest)
	}
	if got := e.counter(MetricDirectivesDropped); got != 9 {
		t.Fatalf("%s = %d, want 9 (1 malformed, 8 over the cap)", MetricDirectivesDropped, got)
	}
	n := 0
	for _, l := range e.h.GetLogs(proxywasm.LogLevelInfo) {
		if strings.Contains(l, "9 directive(s) stripped but not applied") {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("dropped directives logged %d times, want once: %q", n, e.h.GetLogs(proxywasm.LogLevelInfo))
	}
}

// TestSessionHeadersFit: OnHttpRequestHeaders keeps the session headers
// in an array of maxSessionHeaders; a longer llm list would be cut short.
func TestSessionHeadersFit(t *testing.T) {
	if n := len(llm.SessionHeaders()); n > maxSessionHeaders {
		t.Fatalf("llm has %d session headers, the filter keeps %d: raise maxSessionHeaders", n, maxSessionHeaders)
	}
}

// The session the filter resolves from its kept session headers is the
// one llm.SessionID picks over the header map, for random sets of session
// headers in any order and case, blank, padded or repeated (a repeated
// header counts with its first value that is not empty).
func TestSessionHeadersMatchLLM(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	values := []string{"", " ", "a", " b ", "\tc", "same"}
	e := newEnv(t, "")
	for i := 0; i < 300; i++ {
		var hdrs [][2]string
		for range r.IntN(5) {
			name := sessionHeaderNames[r.IntN(len(sessionHeaderNames))]
			if r.IntN(2) == 0 {
				name = strings.ToUpper(name)
			}
			hdrs = append(hdrs, [2]string{name, values[r.IntN(len(values))]})
		}
		e.send(llm.Chat, `{"messages":[{"role":"user","content":"x"}]}`, hdrs...)
		_, prep := e.lastPrepare()
		req, err := llm.ParseRequest(llm.Chat, []byte(`{"messages":[]}`))
		if err != nil {
			t.Fatal(err)
		}
		want := req.SessionID(llm.HeaderFunc(func(name string) string {
			for _, kv := range hdrs {
				if strings.EqualFold(kv[0], name) && kv[1] != "" {
					return kv[1]
				}
			}
			return ""
		}))
		if prep.SessionID != want {
			t.Fatalf("headers %q: session %q, llm picks %q", hdrs, prep.SessionID, want)
		}
	}
}
