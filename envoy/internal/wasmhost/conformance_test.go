package wasmhost

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

func TestLifecycleOrder(t *testing.T) {
	h := newHarness(t, "lifecycle")
	s, fs := h.stream(0)
	body := &httpfilter.Buffer{Bytes: []byte("hello")}
	if st := s.DecodeHeaders(&fs.req, false); st != httpfilter.HeadersContinue {
		t.Fatalf("DecodeHeaders = %v", st)
	}
	if st := s.DecodeData(body, true); st != httpfilter.DataContinue {
		t.Fatalf("DecodeData = %v", st)
	}
	fs.resp = httpfilter.Headers{{Key: ":status", Value: "200"}}
	s.EncodeHeaders(&fs.resp, false)
	s.EncodeData(&httpfilter.Buffer{Bytes: []byte("resp")}, false)
	fs.rTr = httpfilter.Headers{{Key: "grpc-status", Value: "0"}}
	s.EncodeTrailers(&fs.rTr)
	s.OnStreamComplete()
	s.OnStreamComplete() // idempotent

	s2, fs2 := h.stream(0)
	s2.DecodeHeaders(&fs2.req, true)
	s2.OnStreamComplete()
	h.f.Close()

	want := []string{
		"create 1 0",
		"vm_start 1 9 0 vm-config",
		"configure 1 9 0 lifecycle",
		"create 2 1",
		"req_headers 2 3 0",
		"req_body 2 5 1",
		"resp_headers 2 1 0",
		"resp_body 2 4 0",
		"resp_trailers 2 1",
		"log 2", "done 2", "delete 2",
		"create 3 1",
		"req_headers 3 3 1",
		"log 3", "done 3", "delete 3",
		"done 1", "delete 1",
	}
	got := h.logs.lines()
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("callback sequence:\n got: %q\nwant: %q", got, want)
	}
}

func TestPauseMappings(t *testing.T) {
	h := newHarness(t, "pause headers body trailers")
	s, fs := h.stream(0)
	if st := s.DecodeHeaders(&fs.req, false); st != httpfilter.HeadersStopAll {
		t.Errorf("PAUSE from request headers = %v, want StopAll", st)
	}
	body := &httpfilter.Buffer{Bytes: []byte("ab")}
	if st := s.DecodeData(body, false); st != httpfilter.DataStopAndBuffer {
		t.Errorf("PAUSE from request body = %v, want StopAndBuffer", st)
	}
	body.Bytes = append(body.Bytes, "cd"...)
	if st := s.DecodeData(body, true); st != httpfilter.DataContinue {
		t.Errorf("body at end of stream = %v, want Continue", st)
	}
	h.logs.expect(t, "req_body 2 2 0")
	h.logs.expect(t, "req_body 2 4 1") // body_size is the whole buffered body
	fs.reqTr = httpfilter.Headers{{Key: "t", Value: "1"}}
	if st := s.DecodeTrailers(&fs.reqTr); st != httpfilter.TrailersStop {
		t.Errorf("PAUSE from request trailers = %v, want Stop", st)
	}
	fs.resp = httpfilter.Headers{{Key: ":status", Value: "200"}}
	if st := s.EncodeHeaders(&fs.resp, false); st != httpfilter.HeadersStopAll {
		t.Errorf("PAUSE from response headers = %v", st)
	}
	if st := s.EncodeData(&httpfilter.Buffer{Bytes: []byte("x")}, false); st != httpfilter.DataStopAndBuffer {
		t.Errorf("PAUSE from response body = %v", st)
	}
	if st := s.EncodeTrailers(&fs.rTr); st != httpfilter.TrailersStop {
		t.Errorf("PAUSE from response trailers = %v", st)
	}
	s.OnStreamComplete()

	// Other header results: 2 (ContinueAndEndStream) continues, 3+ stops.
	for raw, want := range map[string]httpfilter.HeadersStatus{"0": httpfilter.HeadersContinue, "2": httpfilter.HeadersContinue, "3": httpfilter.HeadersStopAll, "7": httpfilter.HeadersStopAll} {
		h := newHarness(t, "status "+raw)
		s, fs := h.stream(0)
		if st := s.DecodeHeaders(&fs.req, true); st != want {
			t.Errorf("headers result %s = %v, want %v", raw, st, want)
		}
	}
}

func TestSetBufferBytes(t *testing.T) {
	for _, side := range []string{"req", "resp"} {
		t.Run(side, func(t *testing.T) {
			h := newHarness(t, "setbuf "+side+" 0,0,AA 99,0,ZZ 1,1,q 0,2,xy 3,0,_ 0,100,ALL 0,0,<")
			s, fs := h.stream(0)
			s.DecodeHeaders(&fs.req, false)
			body := &httpfilter.Buffer{Bytes: []byte("hello")}
			data := s.DecodeData
			if side == "resp" {
				fs.resp = httpfilter.Headers{{Key: ":status", Value: "200"}}
				s.DecodeData(&httpfilter.Buffer{}, true)
				s.EncodeHeaders(&fs.resp, false)
				data = s.EncodeData
			}
			if st := data(body, false); st != httpfilter.DataStopAndBuffer {
				t.Fatalf("first chunk = %v", st)
			}
			if st := data(body, true); st != httpfilter.DataContinue {
				t.Fatalf("last chunk = %v", st)
			}
			for _, line := range []string{
				"set_buffer 0,0,AA 0",  // prepend: AAhello
				"set_buffer 99,0,ZZ 0", // start >= size appends: AAhelloZZ
				"set_buffer 1,1,q 2",   // inside the buffer: BAD_ARGUMENT
				"set_buffer 0,2,xy 0",  // start 0 drains len then prepends: xyhelloZZ
				"set_buffer 3,0,_ 2",
				"set_buffer 0,100,ALL 0", // start 0, len >= size replaces
				"set_buffer 0,0,< 0",
				"buffer_now <ALL",
			} {
				h.logs.expect(t, line)
			}
			if string(body.Bytes) != "<ALL" {
				t.Errorf("stream body = %q, want %q", body.Bytes, "<ALL")
			}
		})
	}
}

func TestGetBufferBytesClamps(t *testing.T) {
	h := newHarness(t, "body")
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, false)
	s.DecodeData(&httpfilter.Buffer{Bytes: []byte("hello")}, true)
	h.logs.expect(t, "body 0 hello")
	h.logs.expect(t, "body_part 0 el")
	h.logs.expect(t, "body_past 0 0")
}

func TestLocalReplyDeferred(t *testing.T) {
	h := newHarness(t, "localreply")
	s, fs := h.stream(0)
	lockFree := false
	fs.onReply = func() {
		if s.vm.mu.TryLock() {
			lockFree = true
			s.vm.mu.Unlock()
		}
	}
	if st := s.DecodeHeaders(&fs.req, false); st != httpfilter.HeadersStopAll {
		t.Errorf("callback result after send_local_response = %v, want StopAll", st)
	}
	replies, _, _, _ := fs.snapshot()
	if len(replies) != 1 {
		t.Fatalf("replies = %+v", replies)
	}
	r := replies[0]
	if r.status != 403 || r.body != "nope" || r.details != "denied_by_wasm" {
		t.Errorf("reply = %+v", r)
	}
	if v, _ := r.headers.Get("x-wasm"); v != "yes" {
		t.Errorf("reply headers = %v", r.headers)
	}
	if !lockFree {
		t.Error("SendLocalReply ran while the VM lock was held (not deferred)")
	}
	after, reply := h.events.index("log:after_local_reply"), h.events.index("local_reply 403")
	if after < 0 || reply < after {
		t.Errorf("local reply must follow the guest's return; events %v", h.events.all())
	}
	h.logs.expect(t, "local_reply 0")
}

func TestCloseStream(t *testing.T) {
	h := newHarness(t, "closestream")
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, false)
	_, _, _, resets := fs.snapshot()
	if resets != 1 || fs.info.ResponseDetails != closeStreamDetails {
		t.Errorf("resets=%d details=%q", resets, fs.info.ResponseDetails)
	}
	h.logs.expect(t, "close_stream 0")
	h.logs.expect(t, "close_stream_bad 2")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond) // poll: the condition changes on the VM's goroutine; no clock to drive
	}
}

func TestHTTPCallDispatch(t *testing.T) {
	h := newHarness(t, "httpcall upstream 1500 ok")
	s, fs := h.stream(0)
	if st := s.DecodeHeaders(&fs.req, false); st != httpfilter.HeadersStopAll {
		t.Fatalf("DecodeHeaders = %v", st)
	}
	h.logs.expect(t, "http_call 0 4")
	waitFor(t, "continue", func() bool { _, c, _, _ := fs.snapshot(); return c == 1 })
	h.logs.expect(t, "http_response 1 4 2 5 1")
	h.logs.expect(t, "http_response_data 0 200 0 hello 0 tv")
	h.logs.expect(t, "http_response_size_status 2")
	h.logs.expect(t, "effective 2 0")
	if v, _ := fs.req.Get("x-call-status"); v != "200" {
		t.Errorf("paused request headers not edited from the callback: %v", fs.req)
	}
	calls := h.clusters.recorded()
	if len(calls) != 1 {
		t.Fatalf("calls = %+v", calls)
	}
	c := calls[0]
	if c.cluster != "upstream" || c.body != "call-body" || c.timeout != 1500*time.Millisecond {
		t.Errorf("call = %+v", c)
	}
	if v, _ := c.headers.Get("content-length"); v != "9" {
		t.Errorf("content-length = %q", v)
	}
	if v, _ := c.trailers.Get("x-req-trailer"); v != "t" {
		t.Errorf("trailers = %v", c.trailers)
	}
	s.OnStreamComplete()
}

func TestHTTPCallValidation(t *testing.T) {
	for _, cfg := range []string{
		"httpcall upstream 1000 nopath",
		"httpcall upstream 1000 nomethod",
		"httpcall upstream 1000 noauthority",
		"httpcall no-such-cluster 1000 ok",
		"httpcall upstream -1 ok",
	} {
		h := newHarness(t, cfg)
		s, fs := h.stream(0)
		if st := s.DecodeHeaders(&fs.req, true); st != httpfilter.HeadersContinue {
			t.Errorf("%s: DecodeHeaders = %v", cfg, st)
		}
		h.logs.expect(t, "http_call 2 0")
		if n := len(h.clusters.recorded()); n != 0 {
			t.Errorf("%s: %d calls dispatched", cfg, n)
		}
	}
}

func TestHTTPCallFailureAndTimeout(t *testing.T) {
	for _, cluster := range []string{"down", "slow"} {
		h := newHarness(t, "httpcall "+cluster+" 50 ok")
		s, fs := h.stream(0)
		start := time.Now()
		s.DecodeHeaders(&fs.req, false)
		h.logs.wait(t, "http_response ")
		h.logs.expect(t, "http_response 1 4 0 0 0") // failure: num_headers=0
		waitFor(t, "continue", func() bool { _, c, _, _ := fs.snapshot(); return c == 1 })
		if v, _ := fs.req.Get("x-call-status"); v != "failed" {
			t.Errorf("%s: x-call-status = %q", cluster, v)
		}
		if cluster == "slow" && time.Since(start) < 50*time.Millisecond {
			t.Errorf("slow call failed before its 50ms timeout")
		}
		s.OnStreamComplete()
	}
}

// Envoy's http_call belongs to the root context: the response is still
// delivered after the stream that made it is gone, and the stream context
// can no longer be made effective.
func TestHTTPCallOutlivesStream(t *testing.T) {
	h := newHarness(t, "httpcall gated 0 ok")
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, false)
	s.OnStreamComplete()
	h.logs.expect(t, "delete 2")
	close(h.clusters.gate)
	h.logs.wait(t, "effective ")
	h.logs.expect(t, "http_response 1 4 1 0 0")
	h.logs.expect(t, "effective 2 2")
	if _, c, _, _ := fs.snapshot(); c != 0 {
		t.Errorf("ContinueDecoding called on a finished stream")
	}
	if calls := h.clusters.recorded(); len(calls) != 1 || calls[0].timeout != 0 {
		t.Errorf("calls = %+v (timeout 0 means none)", calls)
	}
}

func TestTick(t *testing.T) {
	h := newHarness(t, "tick 5")
	h.logs.expect(t, "set_tick 0")
	h.logs.wait(t, "tick_off 0")
	h.logs.expect(t, "tick 1 1")
	h.logs.expect(t, "tick 1 3")
	time.Sleep(40 * time.Millisecond) // real time under test: 8 periods of the wasm tick timer, which must stay off
	if n := h.logs.count("tick 1 "); n != 3 {
		t.Errorf("%d ticks after set_tick_period_milliseconds(0), want 3", n)
	}
}

func TestSharedDataCAS(t *testing.T) {
	h := newHarness(t, "shared", withWorkers(2))
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, true)
	for _, l := range []string{"shared_get0 1 ", "shared_set1 0", "shared_set2 0", "shared_set3 8", "shared_get2 0 v2"} {
		h.logs.expect(t, l)
	}
	l := h.logs.wait(t, "shared_get1 0 v1 ")
	if strings.HasSuffix(l, " 0") {
		t.Errorf("cas must be non-zero: %q", l)
	}
	// Another VM of the same vm_id (other worker, other factory) sees it.
	s2, fs2 := h.stream(1)
	s2.DecodeHeaders(&fs2.req, true)
	h.logs.expect(t, "shared_get0 0 v2")
	other := newHarness(t, "shared-read", withVMID(h.f.cfg.VMID))
	s3, fs3 := other.stream(0)
	s3.DecodeHeaders(&fs3.req, true)
	other.logs.wait(t, "shared_get 0 v2 ")
	isolated := newHarness(t, "shared-read", withVMID("some-other-vm"))
	s4, fs4 := isolated.stream(0)
	s4.DecodeHeaders(&fs4.req, true)
	isolated.logs.expect(t, "shared_get 1  0")
}

func TestSharedQueue(t *testing.T) {
	h := newHarness(t, "queue")
	reg := h.logs.wait(t, "registered 0 ")
	tok := strings.TrimPrefix(reg, "registered 0 ")
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, true)
	h.logs.expect(t, "resolve 0 "+tok)
	h.logs.expect(t, "resolve_other 1")
	h.logs.expect(t, "enqueue 0")
	h.logs.expect(t, "enqueue_bad 1")
	h.logs.wait(t, "dequeue_again")
	h.logs.expect(t, "queue_ready 1 "+tok)
	h.logs.expect(t, "dequeue 0 hello")
	h.logs.expect(t, "dequeue_again 7")
}

func TestMetrics(t *testing.T) {
	h := newHarness(t, "metrics")
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, true)
	for _, l := range []string{
		"define_counter 0 4", "inc_counter 0", "dec_counter 2", "record_counter 0", "get_counter 0 7",
		"define_gauge 0 5", "get_gauge 0 7", "record_gauge 0", "get_gauge2 100",
		"define_hist 0 6", "record_hist 0", "get_hist 2", "inc_hist 2", "define_bad 2", "get_unknown 1",
	} {
		h.logs.expect(t, l)
	}
	c := h.stats.Define(httpfilter.MetricCounter, "wasm_requests").Value()
	g := h.stats.Define(httpfilter.MetricGauge, "wasm_inflight").Value()
	hi := h.stats.Define(httpfilter.MetricHistogram, "wasm_latency").Value()
	if c != 7 || g != 100 || hi != 1 {
		t.Errorf("stats: counter=%d gauge=%d histogram count=%d", c, g, hi)
	}
}

func le64(v int64) string {
	return hex.EncodeToString(binary.LittleEndian.AppendUint64(nil, uint64(v)))
}

func hexs(s string) string { return hex.EncodeToString([]byte(s)) }

func TestProperties(t *testing.T) {
	h := newHarness(t, "props")
	s, fs := h.stream(0, "x-foo", "a", "x-foo", "b", "x-request-id", "rid", "referer", "http://r", "user-agent", "ua/1", "content-length", "12", ":scheme", "http")
	fs.req.Set(":path", "/v1/chat?x=1#f")
	start := time.Unix(1700000000, 5)
	fs.info = httpfilter.StreamInfo{StartTime: start, Protocol: "HTTP/1.1", SourceAddress: "10.1.2.3:5555",
		DestinationAddr: "127.0.0.1:10000", ConnectionID: 42, RouteName: "r1", ClusterName: "llm", RequestSize: 3,
		RouteMatched: true, RouteMetadata: []byte("\x0a\x02md")}
	s.DecodeHeaders(&fs.req, false)
	headerBytes := 0
	for _, e := range fs.req {
		headerBytes += len(e.Key) + len(e.Value)
	}
	want := map[string]string{
		"request.path":          "0 " + hexs("/v1/chat?x=1#f"),
		"request.url_path":      "0 " + hexs("/v1/chat"),
		"request.query":         "0 " + hexs("x=1"),
		"request.host":          "0 " + hexs("a.example"),
		"request.scheme":        "0 " + hexs("http"),
		"request.method":        "0 " + hexs("GET"),
		"request.headers":       "0 " + hex.EncodeToString(encodePairs(fs.req)),
		"request.headers.x-foo": "0 " + hexs("a,b"),
		"request.id":            "0 " + hexs("rid"),
		"request.protocol":      "0 " + hexs("HTTP/1.1"),
		"request.time":          "0 " + le64(start.UnixNano()),
		"request.size":          "0 " + le64(12),
		"request.total_size":    "0 " + le64(int64(3+headerBytes)),
		"request.referer":       "0 " + hexs("http://r"),
		"request.useragent":     "0 " + hexs("ua/1"),
		"response.code":         "1 ",
		"source.address":        "0 " + hexs("10.1.2.3:5555"),
		"source.port":           "0 " + le64(5555),
		"destination.address":   "0 " + hexs("127.0.0.1:10000"),
		"destination.port":      "0 " + le64(10000),
		"connection.id":         "0 " + le64(42),
		"plugin_name":           "0 " + hexs("conformance-plugin"),
		"plugin_root_id":        "0 " + hexs("conformance-root"),
		"plugin_vm_id":          "0 " + hexs(h.f.cfg.VMID),
		"xds.node.id":           "0 " + hexs("node-1"),
		"xds.node.cluster":      "0 " + hexs("node-cluster"),
		"node":                  "0 " + hex.EncodeToString(append(append([]byte{0x0a, 6}, "node-1"...), append([]byte{0x12, 12}, "node-cluster"...)...)),
		"xds.cluster_name":      "0 " + hexs("llm"),
		"xds.route_name":        "0 " + hexs("r1"),
		"route_name":            "0 " + hexs("r1"),
		"xds.route_metadata":    "0 " + hexs("\x0a\x02md"),
		"route_metadata":        "0 " + hexs("\x0a\x02md"),
		// No dynamic metadata is ever set: the empty Metadata message.
		"metadata":                 "0 ",
		"metadata.filter_metadata": "1 ",
		"cluster_name":             "0 " + hexs("llm"),
		"listener_direction":       "0 " + le64(0),
		"no.such":                  "1 ",
		"my_key":                   "0 " + hexs("my-value"),
		// Table boundaries: a bare map is SERIALIZATION_FAILURE, an unknown
		// or over-long path NOT_FOUND.
		"request":          "3 ",
		"upstream":         "3 ",
		"xds":              "3 ",
		"connection_id":    "0 " + le64(42),
		"request.path.x":   "1 ",
		"connection.nope":  "1 ",
		"upstream.address": "1 ",
		"plugin_name.x":    "1 ",
		"connection.mtls":  "0 00",
		"xds.nope":         "1 ",
	}
	for path, v := range want {
		h.logs.expect(t, "prop req "+path+" "+v)
	}
	h.logs.expect(t, "set_property 0")

	fs.info.ResponseCode = 200
	fs.resp = httpfilter.Headers{{Key: ":status", Value: "200"}, {Key: "content-type", Value: "application/json"}}
	s.DecodeData(&httpfilter.Buffer{}, true)
	s.EncodeHeaders(&fs.resp, true)
	h.logs.expect(t, "prop resp response.code 0 "+le64(200))
	h.logs.expect(t, "prop resp response.headers.content-type 0 "+hexs("application/json"))
	// Envoy drops the request header map once request iteration continued.
	h.logs.expect(t, "prop resp request.path 1 ")
	h.logs.expect(t, "prop resp my_key 0 "+hexs("my-value"))

	fs.info.ResponseDetails = "via_upstream"
	fs.info.ResponseSize = 77
	s.OnStreamComplete()
	h.logs.expect(t, "prop log request.path 0 "+hexs("/v1/chat?x=1#f"))
	h.logs.expect(t, "prop log response.code_details 0 "+hexs("via_upstream"))
	h.logs.expect(t, "prop log response.size 0 "+le64(77))

	// Before a route is picked there is no route metadata.
	s2, fs2 := h.stream(0)
	s2.DecodeHeaders(&fs2.req, true)
	h.logs.expect(t, "prop req xds.route_metadata 1 ")
	s2.OnStreamComplete()
}

func TestLogLevels(t *testing.T) {
	cfg, env, logs, _, _, _ := testConfig(t, "loglevel")
	logs.min = slog.LevelInfo
	f, err := newFactory(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fs := newFakeStream(nil, 0)
	flt, _ := f.NewFilter(fs)
	flt.DecodeHeaders(&fs.req, true)
	logs.expect(t, "log_level 0 2") // info
	logs.expect(t, "log_bad_level 2")
	levels := map[string]slog.Level{}
	logs.mu.Lock()
	for _, r := range logs.records {
		levels[r.msg] = r.level
	}
	logs.mu.Unlock()
	if _, ok := levels["level-1"]; ok {
		t.Error("debug message logged at info level")
	}
	for msg, want := range map[string]slog.Level{"level-2": slog.LevelInfo, "level-3": slog.LevelWarn, "level-4": slog.LevelError, "level-5": slog.LevelError + 4} {
		if got, ok := levels[msg]; !ok || got != want {
			t.Errorf("%s logged at %v (present %v), want %v", msg, got, ok, want)
		}
	}
}

func TestBadPointers(t *testing.T) {
	h := newHarness(t, "badptr")
	s, fs := h.stream(0)
	if st := s.DecodeHeaders(&fs.req, true); st != httpfilter.HeadersContinue {
		t.Fatalf("DecodeHeaders = %v", st)
	}
	line := h.logs.wait(t, "badptr ")
	for _, kv := range strings.Fields(strings.TrimPrefix(line, "badptr ")) {
		if !strings.HasSuffix(kv, "=6") {
			t.Errorf("%s: want INVALID_MEMORY_ACCESS (6)", kv)
		}
	}
	if n := len(strings.Fields(line)); n < 20 {
		t.Errorf("only %d results: %s", n, line)
	}
	h.logs.expect(t, "badptr_survived")
	if s.vm.failed.Load() {
		t.Error("VM failed on bad pointers")
	}
	if replies, _, _, _ := fs.snapshot(); len(replies) != 0 {
		t.Errorf("bad pointers must not send a reply: %+v", replies)
	}
}

func TestHeaderMaps(t *testing.T) {
	h := newHarness(t, "headers")
	s, fs := h.stream(0, "x-remove", "gone", "x-keep", "k")
	s.DecodeHeaders(&fs.req, false)
	for _, l := range []string{
		"get_path 0 /v1", "get_missing 1", "add 0", "replace_path 0", "replace_new 0", "remove 0",
		"pairs 0 :method=GET,:path=/rewritten,:authority=a.example,x-keep=k,x-added=1,x-new=n",
		"call_headers_outside 2", "call_body_outside 1", "plugin_config_outside 1", "vm_config 0 9",
		"set_vm_config 2", "set_body_outside 2", "bad_map_type 2", "bad_buffer_type 2",
		"bad_stream_type 2", "upstream_continue 12", "effective_bad 2", "done 1", "foreign 1",
	} {
		h.logs.expect(t, l)
	}
	size := 0
	for _, e := range fs.req {
		size += len(e.Key) + len(e.Value)
	}
	h.logs.expect(t, "size 0 "+strconv.Itoa(size))
	if fs.routeClears == 0 {
		t.Error("editing request headers must clear the route cache")
	}
	fs.resp = httpfilter.Headers{{Key: ":status", Value: "200"}, {Key: "x-old", Value: "1"}}
	s.DecodeData(&httpfilter.Buffer{}, true)
	s.EncodeHeaders(&fs.resp, true)
	h.logs.expect(t, "resp_phase_req_header 2")
	h.logs.expect(t, "set_pairs 0")
	h.logs.expect(t, "resp_x_set 0 yes")
	if len(fs.resp) != 2 || fs.resp[0] != (httpfilter.Header{Key: ":status", Value: "201"}) || fs.resp[1] != (httpfilter.Header{Key: "x-set", Value: "yes"}) {
		t.Errorf("response headers = %v", fs.resp)
	}
	s.OnStreamComplete()
	h.logs.expect(t, "log_req_path 0 /rewritten")
	h.logs.expect(t, "log_req_trailer 1")
}

func TestTrapFailsStreamAndReplacesVM(t *testing.T) {
	for _, kind := range []string{"panic", "oob", "exit"} {
		t.Run(kind, func(t *testing.T) {
			h := newHarness(t, "trap req_headers "+kind, withWorkers(2))
			// Streams already running on worker 0 and worker 1.
			bystander, bfs := h.stream(0)
			bystander.DecodeHeaders(&bfs.req, false)
			other, ofs := h.stream(1)
			other.DecodeHeaders(&ofs.req, false)

			victim, vfs := h.stream(0, "x-trap", "1")
			if st := victim.DecodeHeaders(&vfs.req, false); st != httpfilter.HeadersStopAll {
				t.Errorf("trapped stream = %v, want StopAll", st)
			}
			replies, _, _, _ := vfs.snapshot()
			if len(replies) != 1 || replies[0].status != 503 || replies[0].details != failStreamDetails {
				t.Fatalf("replies = %+v", replies)
			}
			// The local reply's own response is not fed to the dead VM.
			vfs.resp = httpfilter.Headers{{Key: ":status", Value: "503"}}
			if st := victim.EncodeHeaders(&vfs.resp, true); st != httpfilter.HeadersContinue {
				t.Errorf("EncodeHeaders after failure = %v", st)
			}
			victim.OnStreamComplete()

			// A stream bound to the dead VM fails closed too, once.
			if st := bystander.DecodeData(&httpfilter.Buffer{Bytes: []byte("x")}, true); st != httpfilter.DataStopNoBuffer {
				t.Errorf("bystander on dead VM = %v", st)
			}
			bystander.DecodeData(&httpfilter.Buffer{}, true)
			if r, _, _, _ := bfs.snapshot(); len(r) != 1 || r[0].status != 503 {
				t.Errorf("bystander replies = %+v", r)
			}
			// The other worker's VM is unaffected.
			if st := other.DecodeData(&httpfilter.Buffer{Bytes: []byte("y")}, true); st != httpfilter.DataContinue {
				t.Errorf("stream on healthy VM = %v", st)
			}
			if r, _, _, _ := ofs.snapshot(); len(r) != 0 {
				t.Errorf("healthy stream got replies %+v", r)
			}
			// Worker 0 gets a fresh VM (start + configure re-run).
			before := h.f.Instantiations()
			fresh, ffs := h.stream(0)
			if st := fresh.DecodeHeaders(&ffs.req, true); st != httpfilter.HeadersContinue {
				t.Errorf("stream on replacement VM = %v", st)
			}
			if got := h.f.Instantiations(); got != before+1 || before != 2 {
				t.Errorf("instantiations %d -> %d, want 2 -> 3", before, got)
			}
			if n := h.logs.count("configure 1 "); n != 3 {
				t.Errorf("configure ran %d times, want 3 (2 workers + replacement)", n)
			}
			if fresh.vm == victim.vm || fresh.vm.failed.Load() {
				t.Error("replacement VM is the failed one")
			}
		})
	}
}

func TestTrapFailOpen(t *testing.T) {
	h := newHarness(t, "trap req_headers panic", withFailOpen())
	s, fs := h.stream(0, "x-trap", "1")
	if st := s.DecodeHeaders(&fs.req, false); st != httpfilter.HeadersContinue {
		t.Errorf("fail-open trapped stream = %v, want Continue", st)
	}
	if st := s.DecodeData(&httpfilter.Buffer{Bytes: []byte("x")}, true); st != httpfilter.DataContinue {
		t.Errorf("fail-open later callback = %v", st)
	}
	if r, _, _, _ := fs.snapshot(); len(r) != 0 {
		t.Errorf("fail-open stream got a reply: %+v", r)
	}
	s.OnStreamComplete()
}

func TestTrapInBackgroundCallback(t *testing.T) {
	h := newHarness(t, "trap tick panic tick 5")
	h.logs.wait(t, "tick 1 1")
	waitFor(t, "VM failure", func() bool { return h.f.g.slots[0].vm.failed.Load() })
	s, fs := h.stream(0)
	if st := s.DecodeHeaders(&fs.req, true); st != httpfilter.HeadersContinue {
		t.Errorf("stream after background trap = %v", st)
	}
	if h.f.Instantiations() != 2 {
		t.Errorf("instantiations = %d, want 2", h.f.Instantiations())
	}
}

func TestPollOneoffProfiles(t *testing.T) {
	t.Run("envoy-1.38 ENOSYS crashes the stream", func(t *testing.T) {
		h := newHarness(t, "sleep 5")
		s, fs := h.stream(0)
		if st := s.DecodeHeaders(&fs.req, true); st != httpfilter.HeadersStopAll {
			t.Errorf("DecodeHeaders = %v", st)
		}
		if r, _, _, _ := fs.snapshot(); len(r) != 1 || r[0].status != 503 {
			t.Errorf("replies = %+v", r)
		}
		if _, ok := h.logs.find("slept"); ok {
			t.Error("guest slept although poll_oneoff is ENOSYS")
		}
	})
	t.Run("envoy-latest sleeps", func(t *testing.T) {
		h := newHarness(t, "sleep 20", withProfile(ProfileEnvoyLatest))
		s, fs := h.stream(0)
		start := time.Now()
		if st := s.DecodeHeaders(&fs.req, true); st != httpfilter.HeadersContinue {
			t.Errorf("DecodeHeaders = %v", st)
		}
		if d := time.Since(start); d < 20*time.Millisecond {
			t.Errorf("returned after %v, before the 20ms sleep", d)
		}
		h.logs.expect(t, "slept 20")
	})
	t.Run("envoy-latest sleep ends with the stream", func(t *testing.T) {
		h := newHarness(t, "sleep 10000", withProfile(ProfileEnvoyLatest))
		s, fs := h.stream(0)
		time.AfterFunc(20*time.Millisecond, fs.cancel)
		start := time.Now()
		s.DecodeHeaders(&fs.req, true)
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("sleep not cut short by cancel: %v", d)
		}
	})
}

func TestModuleRejected(t *testing.T) {
	cases := []struct {
		name, code, config, profile, want string
	}{
		{"missing wasi import", "wasiextra", "", ProfileEnvoy138, "wasi_snapshot_preview1.fd_filestat_get"},
		{"no abi version", "noabi", "", "", "ABI version"},
		{"callback signature", "badsig", "", "", "Bad function signature for: proxy_on_vm_start"},
		{"configure false", "conformance", "fail-configure", "", "Unable to configure"},
		{"restricted call in _initialize", "initcall", "", "", "restricted_callback"},
		{"bad profile", "conformance", "", "v8", "unknown WASI profile"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			opts := []option{withCode(c.code)}
			if c.profile != "" {
				opts = append(opts, withProfile(c.profile))
			}
			cfg, env, _, _, _, _ := testConfig(t, c.config, opts...)
			_, err := NewFactory(cfg, env)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
	cfg, env, _, _, _, _ := testConfig(t, "")
	cfg.VMConfiguration = []byte("fail-vm-start")
	if _, err := NewFactory(cfg, env); err == nil || !strings.Contains(err.Error(), "proxy_on_vm_start") {
		t.Errorf("vm_start false: err = %v", err)
	}
	cfg.CodePath = filepath.Join(t.TempDir(), "missing.wasm")
	if _, err := NewFactory(cfg, env); err == nil || !strings.Contains(err.Error(), "read module") {
		t.Errorf("missing file: err = %v", err)
	}
}

// TestLatestProfileHasExtraWASI: envoy-1.39 (and envoy-latest, its alias)
// link the full WASI set Envoy 1.39.0 added; envoy-1.38 refuses it
// (TestModuleRejected).
func TestLatestProfileHasExtraWASI(t *testing.T) {
	for _, p := range []string{ProfileEnvoy139, ProfileEnvoyLatest} {
		t.Run(p, func(t *testing.T) {
			h := newHarness(t, "", withCode("wasiextra"), withProfile(p))
			h.logs.expect(t, "filestat 8") // EBADF
			h.logs.expect(t, "readdir 20") // ENOTDIR: linked with WASI's i64 cookie
			if h.f.g.profile != ProfileEnvoy139 {
				t.Errorf("profile %q, want the alias resolved to %q", h.f.g.profile, ProfileEnvoy139)
			}
		})
	}
}

func TestCompilationCacheDir(t *testing.T) {
	dir := t.TempDir()
	cfg, env, _, _, _, _ := testConfig(t, "lifecycle")
	env.CacheDir = dir
	f, err := NewFactory(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	files := 0
	filepath.Walk(dir, func(_ string, info os.FileInfo, _ error) error {
		if info != nil && !info.IsDir() && info.Size() > 0 {
			files++
		}
		return nil
	})
	if files == 0 {
		t.Error("compilation cache directory is empty")
	}
}

func TestNoVMPerRequest(t *testing.T) {
	h := newHarness(t, "lifecycle", withWorkers(2))
	for i := 0; i < 40; i++ {
		s, fs := h.stream(i)
		s.DecodeHeaders(&fs.req, true)
		s.OnStreamComplete()
	}
	if n := h.f.Instantiations(); n != 2 {
		t.Errorf("instantiations = %d, want 2 (one per worker)", n)
	}
	if n := h.logs.count("vm_start "); n != 2 {
		t.Errorf("vm_start ran %d times", n)
	}
	// Each VM numbers its own contexts: 20 streams each, ids 2..21.
	h.logs.expect(t, "create 21 1")
	if _, ok := h.logs.find("create 22 "); ok {
		t.Error("streams were not split across the two worker VMs")
	}
}

func TestStdioAndEnv(t *testing.T) {
	h := newHarness(t, "stdio")
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, true)
	levels := map[string]slog.Level{}
	h.logs.mu.Lock()
	for _, r := range h.logs.records {
		levels[r.msg] = r.level
	}
	h.logs.mu.Unlock()
	if l, ok := levels["to stderr"]; !ok || l != slog.LevelError {
		t.Errorf("stderr line: present=%v level=%v", ok, l)
	}
	if l, ok := levels["to stdout"]; !ok || l != slog.LevelInfo {
		t.Errorf("stdout line: present=%v level=%v", ok, l)
	}
	if l, ok := levels["line one\nline two"]; !ok || l != slog.LevelError {
		t.Errorf("a multi-line stderr write must stay one entry (only its last newline trimmed): present=%v level=%v", ok, l)
	}

	cfg, env, logs, _, _, _ := testConfig(t, "env")
	cfg.EnvVars = map[string]string{"CHIME_TEST": "hello", "OTHER": "x"}
	f, err := NewFactory(cfg, env)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fs2 := newFakeStream(nil, 0)
	flt, _ := f.NewFilter(fs2)
	flt.DecodeHeaders(&fs2.req, true)
	logs.expect(t, "env hello")
}

func TestClosedFactory(t *testing.T) {
	h := newHarness(t, "lifecycle")
	h.f.Close()
	if _, err := h.f.NewFilter(newFakeStream(nil, 0)); err == nil {
		t.Error("NewFilter on a closed factory must fail")
	}
}

// TestForeignFunctions: Envoy's clear_route_cache, compress/uncompress
// (zlib) and declare_property; an unknown name is NotFound (docs/local-runtime.md).
func TestForeignFunctions(t *testing.T) {
	h := newHarness(t, "foreign")
	h.logs.expect(t, "f_declare 0")
	h.logs.expect(t, "f_declare_again 2")
	h.logs.expect(t, "f_declare_bad 2")
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, true)
	for _, l := range []string{
		"f_clear_route_cache 0",
		"f_compress 0 789c", // a zlib stream, default compression
		"f_uncompress 0 hello hello hello hello",
		"f_uncompress_bad 3",
		"f_declare_stream 0",
		"f_set_stream_prop 0 0",
		"f_set_ro 0",
		"f_set_ro_again 2", // a readonly declared property is set once
		"f_get_ro 0 first",
		"f_set_rw 0 0",
		"f_unknown 1",
	} {
		h.logs.expect(t, l)
	}
	fs.mu.Lock()
	clears := fs.routeClears
	fs.mu.Unlock()
	if clears != 1 {
		t.Errorf("clear_route_cache cleared the route cache %d times, want 1", clears)
	}
	s.OnStreamComplete()
}

// TestAllowOnHeadersStopIteration: with the plugin flag, PAUSE from request
// headers is StopIteration, so the body still arrives; without it, stop-all.
func TestAllowOnHeadersStopIteration(t *testing.T) {
	for _, allow := range []bool{false, true} {
		h := newHarness(t, "routebody", func(c *httpfilter.WasmConfig, _ *httpfilter.Env) { c.AllowOnHeadersStopIteration = allow })
		s, fs := h.stream(0)
		want := httpfilter.HeadersStopAll
		if allow {
			want = httpfilter.HeadersStopIteration
		}
		if st := s.DecodeHeaders(&fs.req, false); st != want {
			t.Fatalf("allow=%v: PAUSE from headers = %v, want %v", allow, st, want)
		}
		if !allow {
			s.OnStreamComplete()
			continue
		}
		if st := s.DecodeData(&httpfilter.Buffer{Bytes: []byte("route=fast please")}, true); st != httpfilter.DataContinue {
			t.Fatalf("body = %v", st)
		}
		if v, _ := fs.req.Get("x-route"); v != "fast" {
			t.Errorf("the held headers were not editable from the body callback: %v", fs.req)
		}
		h.logs.expect(t, "route_header 0")
		h.logs.expect(t, "clear_route_cache 0")
		s.OnStreamComplete()
	}
}

// TestEnvoyLogFormat: guest lines read "wasm log <name> <root_id> <vm_id>:
// <message>" as Envoy's Context::log writes them (empty parts left out),
// and LevelName names trace and critical as Envoy does.
func TestEnvoyLogFormat(t *testing.T) {
	h := newHarness(t, "loglevel")
	s, fs := h.stream(0)
	s.DecodeHeaders(&fs.req, true)
	s.OnStreamComplete()
	want := "wasm log conformance-plugin conformance-root vm-TestEnvoyLogFormat: level-5"
	h.logs.mu.Lock()
	raw := append([]string(nil), h.logs.raw...)
	h.logs.mu.Unlock()
	if !slices.Contains(raw, want) {
		t.Errorf("no %q among:\n%s", want, strings.Join(raw, "\n"))
	}
	if got := envoyLogPrefix(httpfilter.WasmConfig{PluginName: "p", VMID: "v"}); got != " p v" {
		t.Errorf("prefix without root_id = %q", got)
	}

	var b strings.Builder
	l := slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: LevelTrace, ReplaceAttr: LevelName}))
	l.Log(context.Background(), LevelCritical, "c")
	l.Log(context.Background(), LevelTrace, "t")
	l.Info("i")
	if out := b.String(); !strings.Contains(out, "level=CRITICAL msg=c") || !strings.Contains(out, "level=TRACE msg=t") || !strings.Contains(out, "level=INFO msg=i") {
		t.Errorf("level names:\n%s", out)
	}
}

// TestHeldUntilStarted: with Env.HoldUntilStarted, a tick period set in
// on_configure and an http_call dispatched before Start wait until Start
// (the runtime calls it once the listeners are bound, as Envoy's workers
// start after init), then run.
func TestHeldUntilStarted(t *testing.T) {
	hold := func(_ *httpfilter.WasmConfig, e *httpfilter.Env) { e.HoldUntilStarted = true }
	h := newHarness(t, "tick 5", hold)
	h.logs.expect(t, "set_tick 0")
	time.Sleep(40 * time.Millisecond) // real time under test: 8 tick periods must pass without a tick
	if n := h.logs.count("tick 1 "); n != 0 {
		t.Fatalf("%d ticks before Start", n)
	}
	h.f.Start()
	h.logs.wait(t, "tick 1 1")

	hc := newHarness(t, "httpcall upstream 1500 ok", hold)
	s, fs := hc.stream(0)
	s.DecodeHeaders(&fs.req, false)
	hc.logs.expect(t, "http_call 0 4")
	time.Sleep(20 * time.Millisecond) // real time under test: the held call must not go out
	if n := len(hc.clusters.recorded()); n != 0 {
		t.Fatalf("%d calls dispatched before Start", n)
	}
	hc.f.Start()
	waitFor(t, "continue", func() bool { _, c, _, _ := fs.snapshot(); return c == 1 })
	if n := len(hc.clusters.recorded()); n != 1 {
		t.Errorf("%d calls after Start, want 1", n)
	}
	s.OnStreamComplete()
}
