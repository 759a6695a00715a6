package filter

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/chimehq/chime/plugin/proxywasm"
	"github.com/chimehq/chime/plugin/proxywasm/proxytest"
)

func TestParseConfigDefaults(t *testing.T) {
	for _, raw := range []string{"", "  ", "{}"} {
		cfg, warnings, err := ParseConfig([]byte(raw))
		if err != nil || len(warnings) != 0 || !reflect.DeepEqual(cfg, DefaultConfig()) {
			t.Fatalf("ParseConfig(%q) = %+v, %q, %v", raw, cfg, warnings, err)
		}
	}
	d := DefaultConfig()
	if d.HostCluster != "chime_host" || d.HostAuthority != "chime-host" || d.Token != "" || !d.TimeTag ||
		d.DefaultTimezone != "UTC" || !d.FailOpen || d.PrepareTimeoutMs != 200 || d.ResolveTimeoutMs != 17*60000 {
		t.Fatalf("defaults differ from docs/configuration.md#plugin-configuration: %+v", d)
	}
}

func TestParseConfigOverrides(t *testing.T) {
	cfg, warnings, err := ParseConfig([]byte(`{"hostCluster":"h","token":"s3cret","timeTag":false,
		"defaultTimezone":"America/Argentina/Buenos_Aires","failOpen":false,"prepareTimeoutMs":50,"features":{"x":1}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.HostCluster, want.Token, want.TimeTag = "h", "s3cret", false
	want.DefaultTimezone, want.FailOpen, want.PrepareTimeoutMs = "America/Argentina/Buenos_Aires", false, 50
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("cfg = %+v, want %+v", cfg, want)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], `"features"`) {
		t.Fatalf("warnings = %q", warnings)
	}
}

// TestResolveTimeoutDefault: the resolve timeout outlasts a default hold
// plus the host's default chain guard, whatever else is set.
func TestResolveTimeoutDefault(t *testing.T) {
	for raw, want := range map[string]int64{
		`{}`:                        17 * 60000,
		`{"resolveTimeoutMs":0}`:    17 * 60000,
		`{"resolveTimeoutMs":5000}`: 5000,
		`{"holdMaxMs":300000}`:      17 * 60000, // a host setting now: no effect
	} {
		cfg, _, err := ParseConfig([]byte(raw))
		if err != nil || cfg.ResolveTimeoutMs != want {
			t.Errorf("%s: resolveTimeoutMs %d (%v), want %d", raw, cfg.ResolveTimeoutMs, err, want)
		}
	}
}

// TestHostSettingsWarn: the settings that moved to the host config file
// are accepted with a warning that says where they live now, and change
// nothing.
func TestHostSettingsWarn(t *testing.T) {
	cfg, warnings, err := ParseConfig([]byte(`{"token":"t","dueWindowMs":300000,"retentionMs":-1,"holdMaxMs":"2m","holdNonStreaming":false}`))
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Token = "t"
	if !reflect.DeepEqual(cfg, want) {
		t.Fatalf("cfg = %+v, want %+v", cfg, want)
	}
	wantWarnings := []string{
		`plugin configuration: "dueWindowMs" is a host setting now (clock.dueWindow in the host config file); ignored here`,
		`plugin configuration: "holdMaxMs" is a host setting now (holds.max in the host config file); ignored here`,
		`plugin configuration: "holdNonStreaming" is a host setting now (holds.nonStreaming in the host config file); ignored here`,
		`plugin configuration: "retentionMs" is a host setting now (clock.retention in the host config file); ignored here`,
	}
	if !reflect.DeepEqual(warnings, wantWarnings) {
		t.Fatalf("warnings:\n%s", strings.Join(warnings, "\n"))
	}
}

func TestParseConfigRejects(t *testing.T) {
	cases := map[string]string{
		`{`:                                "not a JSON object",
		`[1]`:                              "not a JSON object",
		`{"prepareTimeoutMs":0}`:           "prepareTimeoutMs 0 out of range",
		`{"prepareTimeoutMs":1.5}`:         "prepareTimeoutMs",
		`{"resolveTimeoutMs":99999999999}`: "resolveTimeoutMs 99999999999 out of range",
		`{"hostCluster":""}`:               "hostCluster must not be empty",
		`{"hostAuthority":"a b"}`:          "hostAuthority",
		`{"defaultTimezone":"../x"}`:       "defaultTimezone",
		`{"defaultTimezone":""}`:           "defaultTimezone",
		`{"token":"a\nb"}`:                 "token",
		`{"failOpen":"yes"}`:               "failOpen",
		`{"resolveTimeoutMs":-1}`:          "resolveTimeoutMs -1 out of range",
	}
	for raw, want := range cases {
		_, _, err := ParseConfig([]byte(raw))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseConfig(%s) err = %v, want it to mention %q", raw, err, want)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	f.Add(`{}`)
	f.Add(`{"hostCluster":"chime_host","prepareTimeoutMs":200,"defaultTimezone":"Europe/Berlin"}`)
	f.Add(`{"holdMaxMs":-5,"resolveTimeoutMs":0}`)
	f.Add(`null`)
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, _, err := ParseConfig([]byte(raw))
		if err != nil {
			return
		}
		// Whatever is accepted must be valid.
		if verr := cfg.validate(); verr != nil {
			t.Fatalf("accepted %q but invalid: %v", raw, verr)
		}
	})
}

// TestHostSettingWarnedAtPluginStart: an envoy.yaml that still sets a moved
// field starts, with the warning in Envoy's log at warn.
func TestHostSettingWarnedAtPluginStart(t *testing.T) {
	h := proxytest.NewHost(proxytest.Options{VMContext: NewVMContext(), PluginConfiguration: []byte(`{"holdMaxMs":120000}`)})
	if !h.StartPlugin() {
		t.Fatalf("plugin rejected a moved field: %q", h.GetLogs(proxywasm.LogLevelTrace))
	}
	want := `chime: plugin configuration: "holdMaxMs" is a host setting now (holds.max in the host config file); ignored here`
	if logs := h.GetLogs(proxywasm.LogLevelWarn); !slices.Contains(logs, want) {
		t.Fatalf("warn logs %q", logs)
	}
}
