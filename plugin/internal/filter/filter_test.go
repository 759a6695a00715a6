package filter

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/proxytest"
)

func newHost(t *testing.T, config string) *proxytest.Host {
	t.Helper()
	h := proxytest.NewHost(proxytest.Options{
		VMContext:           NewVMContext(),
		PluginConfiguration: []byte(config),
		Clusters:            []string{"chime_host"},
	})
	if !h.StartPlugin() {
		t.Fatalf("plugin rejected %q: %q", config, h.GetLogs(proxywasm.LogLevelTrace))
	}
	return h
}

func chatHeaders(extra ...[2]string) [][2]string {
	return append([][2]string{
		{":method", "POST"}, {":path", "/v1/chat/completions"}, {":authority", "api"},
		{"content-type", "application/json"}, {"content-length", "27"},
	}, extra...)
}

func header(hs [][2]string, key string) (string, bool) {
	for _, kv := range hs {
		if kv[0] == key {
			return kv[1], true
		}
	}
	return "", false
}

func counterValue(t *testing.T, h *proxytest.Host, name string) uint64 {
	t.Helper()
	v, ok := h.GetCounterValue(name)
	if !ok {
		t.Fatalf("metric %s not defined", name)
	}
	return v
}

func TestInvalidConfigFailsPluginStart(t *testing.T) {
	h := proxytest.NewHost(proxytest.Options{VMContext: NewVMContext(), PluginConfiguration: []byte(`{"prepareTimeoutMs":-1}`)})
	if h.StartPlugin() {
		t.Fatal("plugin accepted an invalid configuration")
	}
	logs := h.GetLogs(proxywasm.LogLevelError)
	if len(logs) != 1 || !strings.Contains(logs[0], "prepareTimeoutMs") {
		t.Fatalf("error logs = %q", logs)
	}
}

func TestKnownPathBuffersPreparesAndResumes(t *testing.T) {
	h := newHost(t, `{"token":"tok","prepareTimeoutMs":150}`)
	id := h.InitializeHttpContext()
	if got := h.CallOnRequestHeaders(id, chatHeaders([2]string{"x-request-id", "req-1"}), false); got != proxywasm.ActionContinue {
		t.Fatalf("headers action = %v", got)
	}
	if _, ok := header(h.GetRequestHeaders(id), "content-length"); ok {
		t.Fatal("content-length was not removed")
	}
	if got := h.CallOnRequestBody(id, []byte(`{"model":"m",`), false); got != proxywasm.ActionPause {
		t.Fatalf("partial body action = %v, want Pause", got)
	}
	if got := h.CallOnRequestBody(id, []byte(`"messages":[]}`), true); got != proxywasm.ActionPause {
		t.Fatalf("final body action = %v, want Pause until the host answers", got)
	}
	if len(h.GetSentRequestBody(id)) != 0 {
		t.Fatal("body forwarded before the host answered")
	}
	calls := h.GetHttpCalls()
	if len(calls) != 1 {
		t.Fatalf("http calls = %d", len(calls))
	}
	c := calls[0]
	for key, want := range map[string]string{":method": "POST", ":path": "/v1/filter/prepare", ":authority": "chime-host",
		"content-type": "application/json", "authorization": "Bearer tok"} {
		if got, _ := header(c.Headers, key); got != want {
			t.Errorf("prepare header %s = %q, want %q", key, got, want)
		}
	}
	if c.Upstream != "chime_host" || c.TimeoutMs != 150 {
		t.Fatalf("call = %+v", c)
	}
	var body PrepareRequest
	if err := json.Unmarshal(c.Body, &body); err != nil {
		t.Fatal(err)
	}
	if body != (PrepareRequest{Protocol: "chat", Path: "/v1/chat/completions", RequestID: "req-1"}) {
		t.Fatalf("prepare body = %+v", body)
	}

	h.CallOnHttpCallResponse(c.ID, [][2]string{{":status", "200"}}, []byte(`{}`), nil)
	if h.ResumedRequest(id) != 1 {
		t.Fatalf("resumed %d times", h.ResumedRequest(id))
	}
	if got := string(h.GetSentRequestBody(id)); got != `{"model":"m","messages":[]}` {
		t.Fatalf("forwarded body = %q", got)
	}
	if counterValue(t, h, MetricRequests) != 1 || counterValue(t, h, MetricHostCallFailures) != 0 {
		t.Fatal("unexpected metric values")
	}

	// The response streams through untouched and unbuffered.
	if got := h.CallOnResponseHeaders(id, [][2]string{{":status", "200"}, {"content-type", "text/event-stream"}}, false); got != proxywasm.ActionContinue {
		t.Fatalf("response headers action = %v", got)
	}
	for _, chunk := range []string{"data: {\"a\":1}\n\n", "data: [DONE]\n\n"} {
		if got := h.CallOnResponseBody(id, []byte(chunk), chunk == "data: [DONE]\n\n"); got != proxywasm.ActionContinue {
			t.Fatalf("response body action = %v", got)
		}
	}
	if got := string(h.GetSentResponseBody(id)); got != "data: {\"a\":1}\n\ndata: [DONE]\n\n" {
		t.Fatalf("response body = %q", got)
	}
	h.CompleteHttpContext(id)
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
		{"missing status", [][2]string{{"x", "y"}}, ""},
	}
	h := newHost(t, "")
	for i, tc := range cases {
		id := h.InitializeHttpContext()
		h.CallOnRequestHeaders(id, chatHeaders(), false)
		h.CallOnRequestBody(id, []byte(`{}`), true)
		calls := h.GetHttpCalls()
		h.CallOnHttpCallResponse(calls[len(calls)-1].ID, tc.headers, []byte(tc.body), nil)
		if h.ResumedRequest(id) != 1 || h.GetLocalResponse(id) != nil {
			t.Errorf("%s: resumed %d, local %+v", tc.name, h.ResumedRequest(id), h.GetLocalResponse(id))
		}
		if got := counterValue(t, h, MetricHostCallFailures); got != uint64(i+1) {
			t.Errorf("%s: failures = %d", tc.name, got)
		}
	}
	if logs := h.GetLogs(proxywasm.LogLevelDebug); !slices.ContainsFunc(logs, func(s string) bool {
		return strings.Contains(s, "status 503: down")
	}) {
		t.Fatalf("debug logs lack the failure detail: %q", logs)
	}
}

func TestDispatchFailureContinuesAtOnce(t *testing.T) {
	h := proxytest.NewHost(proxytest.Options{VMContext: NewVMContext(), Clusters: []string{"other"}})
	if !h.StartPlugin() {
		t.Fatal("start failed")
	}
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, chatHeaders(), false)
	if got := h.CallOnRequestBody(id, []byte(`{}`), true); got != proxywasm.ActionContinue {
		t.Fatalf("action = %v, want Continue when the call cannot be sent", got)
	}
	if v, _ := h.GetCounterValue(MetricHostCallFailures); v != 1 {
		t.Fatalf("failures = %d", v)
	}
}

func TestFailClosedAnswers503(t *testing.T) {
	h := newHost(t, `{"failOpen":false}`)
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, chatHeaders(), false)
	h.CallOnRequestBody(id, []byte(`{}`), true)
	h.CallOnHttpCallResponse(h.GetHttpCalls()[0].ID, nil, nil, nil)
	lr := h.GetLocalResponse(id)
	if lr == nil || lr.StatusCode != 503 || h.ResumedRequest(id) != 0 {
		t.Fatalf("local response = %+v, resumed %d", lr, h.ResumedRequest(id))
	}
}

func TestPassThrough(t *testing.T) {
	cases := map[string][][2]string{
		"unknown path":   {{":method", "POST"}, {":path", "/v1/embeddings"}, {"content-length", "2"}},
		"GET":            {{":method", "GET"}, {":path", "/v1/chat/completions"}, {"content-length", "2"}},
		"followup":       chatHeaders([2]string{FollowupHeader, "sig"}),
		"no path header": {{":method", "POST"}, {"content-length", "2"}},
	}
	h := newHost(t, "")
	for name, hs := range cases {
		id := h.InitializeHttpContext()
		if got := h.CallOnRequestHeaders(id, hs, false); got != proxywasm.ActionContinue {
			t.Errorf("%s: headers action %v", name, got)
		}
		if !slices.Equal(h.GetRequestHeaders(id), hs) {
			t.Errorf("%s: headers changed to %q", name, h.GetRequestHeaders(id))
		}
		if got := h.CallOnRequestBody(id, []byte("{}"), false); got != proxywasm.ActionContinue {
			t.Errorf("%s: body action %v", name, got)
		}
	}
	if len(h.GetHttpCalls()) != 0 {
		t.Fatalf("pass-through requests called the host: %+v", h.GetHttpCalls())
	}
}

func TestHeadersOnlyRequestAndGeneratedID(t *testing.T) {
	h := newHost(t, "")
	id := h.InitializeHttpContext()
	if got := h.CallOnRequestHeaders(id, [][2]string{{":method", "POST"}, {":path", "/v1/messages?beta=true"}}, true); got != proxywasm.ActionPause {
		t.Fatalf("action = %v", got)
	}
	var body PrepareRequest
	if err := json.Unmarshal(h.GetHttpCalls()[0].Body, &body); err != nil {
		t.Fatal(err)
	}
	if body.Protocol != "messages" || !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(body.RequestID) {
		t.Fatalf("prepare body = %+v", body)
	}
	if _, ok := header(h.GetHttpCalls()[0].Headers, "authorization"); ok {
		t.Fatal("authorization sent without a token")
	}
}

func TestStreamGoneBeforeHostAnswers(t *testing.T) {
	h := newHost(t, "")
	id := h.InitializeHttpContext()
	h.CallOnRequestHeaders(id, chatHeaders(), true)
	h.CompleteHttpContext(id)
	h.CallOnHttpCallResponse(h.GetHttpCalls()[0].ID, [][2]string{{":status", "200"}}, nil, nil)
	for _, l := range h.GetLogs(proxywasm.LogLevelTrace) {
		if strings.Contains(l, "resume") || strings.Contains(l, "panic") {
			t.Fatalf("late answer tried to touch the finished stream: %q", l)
		}
	}
}
