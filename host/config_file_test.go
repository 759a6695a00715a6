package host

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"go.yaml.in/yaml/v4"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
	"github.com/chimehq/chime/ntp"
)

func writeConfigFile(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "chime.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func examplePath() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "chime.example.yaml")
}

// TestExampleConfigIsTheDefaults: chime.example.yaml parses, changes
// nothing, and documents every field of the schema.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	cfg, err := ReadConfigFile(examplePath())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, DefaultConfig()) {
		t.Fatalf("the example differs from the defaults:\n%+v\n%+v", cfg, DefaultConfig())
	}
	raw, err := os.ReadFile(examplePath())
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	idx := indexNodes(&doc)
	for path, typ := range fileSchema {
		if path == "" || strings.Contains(path, "[]") || typ.Kind() == reflect.Struct {
			continue
		}
		if n := idx.values[path]; n == nil || n.ShortTag() == "!!null" {
			t.Errorf("chime.example.yaml does not show the default of %s", path)
		}
	}
}

// TestConfigFileSetsEveryField: each field reaches its Config field.
func TestConfigFileSetsEveryField(t *testing.T) {
	cfg, err := ParseConfigFile([]byte(`
listen: 0.0.0.0:9000
dataDir: /var/lib/chime
reentry: 10.0.0.2:10001
ntp:
  enabled: false
  servers: [ntp.example.org, "[::1]:123"]
  staleAfter: 2h
clock: {dueWindow: 5m, retention: 1h}
holds:
  max: 2m
  nonStreaming: false
guards:
  maxHops: 3
  maxChainDuration: 5m
  followupTimeout: 90s
`), "chime.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Addr, want.DataDir, want.Reentry = "0.0.0.0:9000", "/var/lib/chime", "10.0.0.2:10001"
	want.NTP.Enabled, want.NTP.Servers, want.NTP.StaleAfter = false, []string{"ntp.example.org", "[::1]:123"}, 2*time.Hour
	want.DueWindow, want.Retention = 5*time.Minute, time.Hour
	want.HoldMax, want.DisableHoldNonStreaming = 2*time.Minute, true
	want.MaxHops, want.MaxChainDuration, want.FollowupTimeout = 3, 5*time.Minute, 90*time.Second
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("got  %+v\nwant %+v", cfg, want)
	}
}

// TestConfigFileEmptyValuesKeepDefaults: an empty file, comments only, or
// an empty section all mean the defaults.
func TestConfigFileEmptyValuesKeepDefaults(t *testing.T) {
	for _, text := range []string{"", "# nothing\n", "holds:\n", "ntp: {}\nclock:\n  dueWindow: ~\n", "---\n"} {
		cfg, err := ParseConfigFile([]byte(text), "x.yaml")
		if err != nil || !reflect.DeepEqual(cfg, DefaultConfig()) {
			t.Errorf("%q: %+v %v", text, cfg, err)
		}
	}
}

// TestConfigFileErrorsNameFieldAndLine: every problem names the file, the
// line and the field path, and what is wrong.
func TestConfigFileErrorsNameFieldAndLine(t *testing.T) {
	cases := map[string][]string{
		"holds:\n  maxx: 2m\n":                   {"bad.yaml:2: holds.maxx: unknown field in holds; known: max, nonStreaming"},
		"wakes:\n  every: 5m\n":                  {"bad.yaml:1: wakes: unknown field; known: clock, cron, dashboardHosts, dataDir, delivery, guards, heartbeat, holds, listen, ntp, reentry, timers, wake"},
		"timers:\n  maxWait: 20m\n":              {"bad.yaml:2: timers.maxWait: 20m0s is longer than guards.maxChainDuration 15m0s"},
		"timers:\n  maxPerSession: 0\n":          {"bad.yaml:2: timers.maxPerSession: 0: must be at least 1"},
		"dashboardHosts: [Evil.example]\n":       {"bad.yaml:1: dashboardHosts[0]: \"Evil.example\": want a lower-case host name"},
		"clock:\n  dueWindow: 5\n":               {"bad.yaml:2: clock.dueWindow: \"5\" is not a duration"},
		"clock:\n  retention: soon\n":            {"bad.yaml:2: clock.retention: \"soon\" is not a duration"},
		"holds: {max: -5s}\n":                    {"bad.yaml:1: holds.max: -5s: must be positive"},
		"holds:\n  nonStreaming: maybe\n":        {"bad.yaml:2: holds.nonStreaming: \"maybe\" is not a boolean"},
		"guards:\n  maxHops: 1.5\n":              {"bad.yaml:2: guards.maxHops: \"1.5\" is not an integer"},
		"guards:\n  maxHops: 0\n":                {"bad.yaml:2: guards.maxHops: 0: must be at least 1"},
		"guards:\n  maxHops: many\n":             {"bad.yaml:2: guards.maxHops: \"many\" is not an integer"},
		"ntp:\n  servers: pool.ntp.org\n":        {"bad.yaml:2: ntp.servers: \"pool.ntp.org\" is not a list"},
		"ntp:\n  servers: []\n":                  {"bad.yaml:2: ntp.servers: must list at least one server"},
		"ntp:\n  servers:\n    - a\n    - b c\n": {"bad.yaml:4: ntp.servers[1]: server \"b c\""},
		"ntp:\n  servers: [\"a,b\"]\n":           {"bad.yaml:2: ntp.servers[0]: \"a,b\": want one host"},
		"listen: 8787\n":                         {"bad.yaml:1: listen: \"8787\": want host:port"},
		"listen:\n  port: 1\n":                   {"bad.yaml:1: listen: a mapping is not a string"},
		"reentry: 127.0.0.1:0\n":                 {"bad.yaml:1: reentry: \"127.0.0.1:0\": bad port"},
		"dataDir: \"\"\n":                        {"bad.yaml:1: dataDir: must not be empty"},
		"holds: {max: 20m}\n":                    {"bad.yaml:1: holds.max: 20m0s is longer than guards.maxChainDuration 15m0s"},
		"guards: {maxChainDuration: 30s}\n":      {"bad.yaml:1: guards.maxChainDuration: 30s is shorter than holds.max 1m0s"},
		"holds: 5\n":                             {"bad.yaml:1: holds: \"5\" is not a mapping"},
		"- a\n":                                  {"bad.yaml:1: a list is not a mapping of fields"},
		"holds: {max: 1m}\nholds: {max: 2m}\n":   {"bad.yaml:2: holds: mapping key \"holds\" already defined at line 1"},
		"a: 1\n---\nb: 2\n":                      {"one YAML document expected"},
		"listen: 'x\n":                           {"bad.yaml: yaml: ", "unexpected end of stream"},
		"static_resources: {}\n":                 {"static_resources: unknown field", "Envoy bootstrap"},
		// Several problems: all of them, in file order.
		"guards:\n  maxHops: x\nholds:\n  max: 1\n": {"bad.yaml:2: guards.maxHops", "\nhost config bad.yaml:4: holds.max"},
	}
	// One problem is reported once, even when two checks see it.
	_, err := ParseConfigFile([]byte("guards: {maxHops: x, maxChainDuration: y}\n"), "bad.yaml")
	if err == nil || strings.Count(err.Error(), "guards.maxHops") != 1 || strings.Count(err.Error(), "\n") != 1 {
		t.Errorf("two problems on one line: %v", err)
	}
	for text, wants := range cases {
		_, err := ParseConfigFile([]byte(text), "bad.yaml")
		if err == nil {
			t.Errorf("%q: accepted", text)
			continue
		}
		for _, want := range wants {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q: error %q does not contain %q", text, err, want)
			}
		}
	}
}

// TestLoadConfigPrecedence: defaults < file < environment; CHIME_CONFIG
// names the file when no path is given; a named file must exist.
func TestLoadConfigPrecedence(t *testing.T) {
	for _, k := range []string{"CHIME_DATA_DIR", "CHIME_HOST_TOKEN", "CHIME_NTP", "CHIME_NTP_SERVERS", "CHIME_NTP_STALE_AFTER", ConfigEnv} {
		t.Setenv(k, "")
	}
	cfg, err := LoadConfig("")
	if err != nil || !reflect.DeepEqual(cfg, DefaultConfig()) {
		t.Fatalf("no file: %+v %v", cfg, err)
	}
	path := writeConfigFile(t, "dataDir: /from/file\nntp:\n  enabled: true\n  servers: [file.example]\n  staleAfter: 1h\nholds: {max: 2m}\n")
	if cfg, err = LoadConfig(path); err != nil || cfg.DataDir != "/from/file" || cfg.HoldMax != 2*time.Minute ||
		!cfg.NTP.Enabled || cfg.NTP.StaleAfter != time.Hour || !reflect.DeepEqual(cfg.NTP.Servers, []string{"file.example"}) {
		t.Fatalf("file: %+v %v", cfg, err)
	}
	t.Setenv(ConfigEnv, path)
	if cfg, err = LoadConfig(""); err != nil || cfg.HoldMax != 2*time.Minute {
		t.Fatalf("CHIME_CONFIG: %+v %v", cfg, err)
	}
	t.Setenv("CHIME_DATA_DIR", "/from/env")
	t.Setenv("CHIME_NTP", "off")
	t.Setenv("CHIME_NTP_SERVERS", "env.example")
	t.Setenv("CHIME_NTP_STALE_AFTER", "3h")
	t.Setenv("CHIME_HOST_TOKEN", "s3cret")
	if cfg, err = LoadConfig(path); err != nil || cfg.DataDir != "/from/env" || cfg.NTP.Enabled || cfg.Token != "s3cret" ||
		cfg.NTP.StaleAfter != 3*time.Hour || !reflect.DeepEqual(cfg.NTP.Servers, []string{"env.example"}) || cfg.HoldMax != 2*time.Minute {
		t.Fatalf("env over file: %+v %v", cfg, err)
	}
	missing := filepath.Join(t.TempDir(), "nope.yaml")
	if _, err = LoadConfig(missing); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("missing file: %v", err)
	}
	t.Setenv(ConfigEnv, missing)
	if _, err = LoadConfig(""); err == nil || !strings.Contains(err.Error(), "nope.yaml") {
		t.Fatalf("missing CHIME_CONFIG file: %v", err)
	}
	bad := writeConfigFile(t, "holds:\n  max: 1\n")
	if _, err = LoadConfig(bad); err == nil || !strings.Contains(err.Error(), ":2: holds.max") {
		t.Fatalf("bad file: %v", err)
	}
}

func TestConfigWarnings(t *testing.T) {
	if w := DefaultConfig().Warnings(); len(w) != 0 {
		t.Fatalf("defaults warn: %q", w)
	}
	cfg, err := ParseConfigFile([]byte("guards: {maxChainDuration: 30m}\n"), "x")
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Warnings(); len(w) != 1 || !strings.Contains(w[0], "resolveTimeoutMs to at least 1860000") {
		t.Fatalf("warnings %q", w)
	}
}

// fileFixture opens a Service configured by a host config file with text,
// through the real loader. The test sets only what must be private to it:
// the data directory, the token, a fake clock at t0, and NTP off (no
// network).
func fileFixture(t *testing.T, text string) *fixture {
	t.Helper()
	cfg, err := ReadConfigFile(writeConfigFile(t, text))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg.DataDir, cfg.Token, cfg.NTP = dir, testToken, ntp.Config{}
	clk := clockwork.NewFakeClockAt(t0)
	cfg.Clock = clk
	svc, err := New(cfg, quietLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	return &fixture{svc: svc, clk: clk, dir: dir}
}

// TestConfigFileDueWindow: clock.dueWindow 5m injects a task due in 2 min;
// the default 60 s does not.
func TestConfigFileDueWindow(t *testing.T) {
	for text, injected := range map[string]bool{"": false, "clock:\n  dueWindow: 5m\n": true} {
		f := fileFixture(t, text)
		f.schedule(t, "s", "stretch", t0.Add(2*time.Minute))
		ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-1", SessionID: "s"})
		if got := ans.Reminders == reminderFor("stretch") && ans.Reserved; got != injected {
			t.Errorf("%q: injected %v, want %v (%+v)", text, got, injected, ans)
		}
	}
}

// TestConfigFileRetention: clock.retention 1h still injects a task 30 min
// overdue; with the default 20 min it has expired.
func TestConfigFileRetention(t *testing.T) {
	for text, injected := range map[string]bool{"": false, "clock:\n  retention: 1h\n": true} {
		f := fileFixture(t, text)
		f.schedule(t, "s", "call back", t0.Add(time.Minute))
		f.clk.Advance(31 * time.Minute)
		ans := f.prepare(t, hostapi.PrepareRequest{RequestID: "req-1", SessionID: "s"})
		if got := ans.Reminders == reminderFor("call back"); got != injected {
			t.Errorf("%q: injected %v, want %v (%+v)", text, got, injected, ans)
		}
	}
}

// TestConfigFileHoldMax: with holds.max 2m a stop waits for a task due in
// 90 s and follows up when it is due; with the default 60 s the chain ends
// at once. dueWindow is 1ms so that the task comes due at its dueAt (with
// the default window it would come due 60 s earlier).
func TestConfigFileHoldMax(t *testing.T) {
	stop := &llm.Turn{Text: "ok", Finish: llm.Finish{Reason: llm.FinishStop}}
	answer := &llm.Turn{Text: "deployed", Finish: llm.Finish{Reason: llm.FinishStop}}
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) { return http.StatusOK, answer })

	f := fileFixture(t, "clock: {dueWindow: 1ms}\n")
	f.scheduleMs(t, "s", "deploy", t0.Add(90*time.Second))
	if resp := f.resolve(t, resolveReq(llm.Chat, proxy, "req-1", "s", stop)); resp.Continued || resp.Reason != "done" {
		t.Fatalf("default holds.max: %+v", resp)
	}

	f = fileFixture(t, "clock: {dueWindow: 1ms}\nholds:\n  max: 2m\n")
	f.scheduleMs(t, "s", "deploy", t0.Add(90*time.Second))
	done := f.resolveAsync(t, resolveReq(llm.Chat, proxy, "req-1", "s", stop))
	f.blockUntil(t, holding)
	f.clk.Advance(90*time.Second - time.Millisecond)
	if n := len(proxy.followups()); n != 0 {
		t.Fatalf("%d followups before the task was due", n)
	}
	f.clk.Advance(time.Millisecond)
	if resp := recv(t, done); !resp.Continued || resp.Hops != 1 || resp.Continuation.Text != "deployed" {
		t.Fatalf("holds.max 2m: %+v", resp)
	}
}

// TestConfigFileHoldNonStreaming: holds.nonStreaming false holds an SSE
// client but not a JSON one; by default the JSON client is held too.
func TestConfigFileHoldNonStreaming(t *testing.T) {
	answer := &llm.Turn{Text: "done it", Finish: llm.Finish{Reason: llm.FinishStop}}
	proxy := newFakeProxy(t, llm.Chat, func(int, followup, context.Context) (int, *llm.Turn) { return http.StatusOK, answer })
	stop := &llm.Turn{Text: "ok", Finish: llm.Finish{Reason: llm.FinishStop}}
	held := func(f *fixture, id string, streaming bool) hostapi.ResolveResponse {
		req := resolveReq(llm.Chat, proxy, id, "s", stop)
		req.Streaming = streaming
		done := f.resolveAsync(t, req)
		f.blockUntil(t, holding)
		f.clk.Advance(time.Second)
		return recv(t, done)
	}

	f := fileFixture(t, "clock: {dueWindow: 1ms}\nholds:\n  nonStreaming: false\n")
	f.scheduleMs(t, "s", "check the build", t0.Add(time.Second))
	req := resolveReq(llm.Chat, proxy, "req-json", "s", stop)
	req.Streaming = false
	if resp := f.resolve(t, req); resp.Continued || resp.Reason != "done" {
		t.Fatalf("JSON client held with nonStreaming false: %+v", resp)
	}
	if resp := held(f, "req-sse", true); !resp.Continued || resp.Hops != 1 {
		t.Fatalf("SSE client not held: %+v", resp)
	}

	f = fileFixture(t, "clock: {dueWindow: 1ms}\n")
	f.scheduleMs(t, "s", "check the build", t0.Add(time.Second))
	if resp := held(f, "req-json", false); !resp.Continued || resp.Hops != 1 {
		t.Fatalf("JSON client not held by default: %+v", resp)
	}
}

// FuzzParseConfigFile: any input gives a Config or an error, and what is
// accepted passes the checks again.
func FuzzParseConfigFile(f *testing.F) {
	raw, err := os.ReadFile(examplePath())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(raw))
	f.Add("holds: {max: 2m, nonStreaming: false}\nguards: {maxHops: 3}\n")
	f.Add("ntp:\n  servers:\n    - '[::1]:123'\n")
	f.Add("clock: {dueWindow: 1.5}\n")
	f.Add("&a [*a]")
	f.Fuzz(func(t *testing.T, text string) {
		cfg, err := ParseConfigFile([]byte(text), "fuzz.yaml")
		if err != nil {
			return
		}
		file := fileFromConfig(cfg)
		var c checker
		for _, s := range file.sections() {
			s.check(&c)
		}
		if len(c.problems) > 0 {
			t.Fatalf("accepted %q but %v", text, c.problems)
		}
	})
}
