package filter

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/plugin/proxywasm"
)

// FuzzDecodePrepareAnswer: the hand decoder gives exactly what
// encoding/json gives, value and error alike, for any body.
func FuzzDecodePrepareAnswer(f *testing.F) {
	for _, seed := range []string{
		`{"nowMs":1770067358241,"ntp":{"status":"ok","offsetMs":-12,"server":"pool.ntp.org","updatedAt":1770067358000},"tools":["clock"]}` + "\n",
		`{"nowMs":1,"ntp":{"status":"disabled","offsetMs":0},"tools":[],"reminders":"due: x","reserved":true,"mayContinue":false,"route":"fast"}`,
		` { "nowMs" : 5 , "ntp" : { } } `,
		`{"reminders":"line\nbreak \u00e9","tools":null,"route":null}`,
		`{"NowMs":3,"nowMs":4}`,
		`{"nowMs":1.5}`, `{"nowMs":1e3}`, `{"nowMs":01}`, `{"nowMs":-0}`, `{"nowMs":99999999999999999999}`,
		`{"ntp":{"offsetMs":1},"ntp":{"status":"ok"}}`,
		`{"tools":["a"],"tools":["b","c"]}`,
		`{"reserved":truex}`, `{"reserved":"true"}`, `{"other":1}`,
		"{\"reminders\":\"\xff\"}", "{\"reminders\":\"h\u00e9\"}",
		`null`, `[]`, `{}`, `{"nowMs":1}x`, `{"nowMs":1,}`, ``, `{`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var want, got hostapi.PrepareResponse
		wantErr := json.Unmarshal(body, &want)
		gotErr := decodePrepareAnswer(body, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("%q: error %v, encoding/json %v", body, gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\n got %#v\nwant %#v", body, got, want)
		}
	})
}

// TestDecodePrepareAnswerFastPath: the host's usual answers take the fast
// path (the fuzz target proves equality, not that the fast path is used).
func TestDecodePrepareAnswerFastPath(t *testing.T) {
	for _, body := range []string{
		`{"nowMs":1770067358241,"ntp":{"status":"disabled","offsetMs":0},"tools":["clock"]}` + "\n",
		`{"nowMs":1,"ntp":{"status":"ok","offsetMs":-3,"server":"s","updatedAt":2},"tools":["clock"],"reminders":"r","reserved":true,"mayContinue":true,"route":"x"}` + "\n",
	} {
		var ans hostapi.PrepareResponse
		if !(&answerScanner{b: []byte(body)}).prepare(&ans) || ans.NowMs == 0 || len(ans.Tools) != 1 {
			t.Errorf("%s: fast path not taken (%+v)", body, ans)
		}
	}
}

// FuzzEncodePrepare: the hand encoder writes json.Marshal's bytes.
func FuzzEncodePrepare(f *testing.F) {
	f.Add("req-1", "chat", "s1", "UTC", "")
	f.Add("req-123", "responses", "s1", "UTC", "resp_\u0001")
	f.Add("0d7c1c9e", "responses", "", "", "stop now")
	f.Add("a\"b\\c", "messages", "<s>&", "Europe/Zürich", "\u2028\xff\n")
	f.Add("k-1", "chat", "s2", "UTC", "kept")
	f.Fuzz(func(t *testing.T, id, proto, session, zone, text string) {
		prep := hostapi.PrepareRequest{RequestID: id, Protocol: proto, SessionID: session, Timezone: zone}
		if text != "" {
			prep.Directives = []hostapi.HostDirective{{Kind: "stopMessage", Text: text, MaxRepeats: 2, Position: len(id)}}
		}
		if len(id)%2 == 1 { // some seeds of each kind carry one
			prep.PreviousResponseID = text
		}
		if len(session)%3 == 2 { // and some a deadline and kept directives
			prep.DeadlineMs = int64(len(text)) * 1_000_003
			prep.Kept = []hostapi.KeptDirectives{{RequestID: id + "-0", PreviousResponseID: text, Directives: prep.Directives, KeptAtMs: int64(len(zone))}}
		}
		want, err := json.Marshal(prep)
		if err != nil {
			t.Fatal(err)
		}
		got, err := encodePrepare(prep)
		if err != nil || string(got) != string(want) {
			t.Fatalf("encodePrepare = %s, %v; json.Marshal = %s", got, err, want)
		}
		wantOutcome, _ := json.Marshal(hostapi.OutcomeRequest{RequestID: id})
		if got := encodeOutcome(id); string(got) != string(wantOutcome) {
			t.Fatalf("encodeOutcome = %s; json.Marshal = %s", got, wantOutcome)
		}
	})
}

// TestEscapedServerToolNameStillResolved: the JSON response path skips
// parsing answers that cannot hold a server-tool call; a name spelled with
// \u escapes must still be seen as one.
func TestEscapedServerToolNameStillResolved(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			e := newRespEnv(t, `{"token":"tok"}`)
			r := e.exchange(p, false, hostapi.PrepareResponse{Tools: []string{"clock"}})
			body := bytes.ReplaceAll(r.upstream(serverTurn), []byte(`"clock"`), []byte(`"\u0063lo\u0063k"`))
			if bytes.Contains(body, []byte("clock")) {
				t.Fatalf("test body still names the tool: %s", body)
			}
			if got := r.feed(body, nil); got != proxywasm.ActionPause {
				t.Fatalf("end of body action %v, want Pause while resolving", got)
			}
			if _, req := r.resolveCall(); len(req.Turn.ToolCalls) != 1 || req.Turn.ToolCalls[0].Name != "clock" {
				t.Fatalf("resolve turn %+v", req.Turn)
			}
			if got := e.counter(MetricServerToolCalls); got != 1 {
				t.Fatalf("%s = %d", MetricServerToolCalls, got)
			}
		})
	}
}

// TestPlainJSONAnswerPassesUntouched: without mayContinue and without a
// server tool, the answer is neither changed nor resolved.
func TestPlainJSONAnswerPassesUntouched(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.String(), func(t *testing.T) {
			e := newRespEnv(t, `{"token":"tok"}`)
			r := e.exchange(p, false, hostapi.PrepareResponse{Tools: []string{"clock"}})
			turn := *stopTurn
			turn.ToolCalls = []llm.ToolCall{readFile}
			body := r.upstream(&turn)
			if got := r.feed(body, nil); got != proxywasm.ActionContinue {
				t.Fatalf("action %v", got)
			}
			if !bytes.Equal(r.out(), body) || len(r.resolveCalls()) != 0 {
				t.Fatalf("out %s (resolves %d), want the upstream bytes", r.out(), len(r.resolveCalls()))
			}
		})
	}
}
