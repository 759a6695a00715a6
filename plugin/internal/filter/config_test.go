package filter

import (
	"reflect"
	"strings"
	"testing"
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
		d.DefaultTimezone != "UTC" || d.DueWindowMs != 60000 || d.RetentionMs != 1200000 || d.HoldMaxMs != 60000 ||
		!d.HoldNonStreaming || !d.FailOpen || d.PrepareTimeoutMs != 200 || d.ResolveTimeoutMs != 60000+16*60000 {
		t.Fatalf("defaults differ from SPEC §12 brief: %+v", d)
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

// TestResolveTimeoutFollowsHoldMax: the resolve call must outlive a hold
// plus the followup guard, so by default it grows with holdMaxMs.
func TestResolveTimeoutFollowsHoldMax(t *testing.T) {
	for raw, want := range map[string]int64{
		`{"holdMaxMs":300000}`:                         300000 + 16*60000,
		`{"holdMaxMs":300000,"resolveTimeoutMs":5000}`: 5000,
		`{"resolveTimeoutMs":0}`:                       60000 + 16*60000,
		`{"holdMaxMs":86400000}`:                       86400000, // capped at a day
	} {
		cfg, _, err := ParseConfig([]byte(raw))
		if err != nil || cfg.ResolveTimeoutMs != want {
			t.Errorf("%s: resolveTimeoutMs %d (%v), want %d", raw, cfg.ResolveTimeoutMs, err, want)
		}
	}
}

func TestParseConfigRejects(t *testing.T) {
	cases := map[string]string{
		`{`:                          "not a JSON object",
		`[1]`:                        "not a JSON object",
		`{"dueWindowMs":"60s"}`:      "dueWindowMs",
		`{"prepareTimeoutMs":0}`:     "prepareTimeoutMs 0 out of range",
		`{"prepareTimeoutMs":1.5}`:   "prepareTimeoutMs",
		`{"retentionMs":-1}`:         "retentionMs -1 out of range",
		`{"holdMaxMs":99999999999}`:  "holdMaxMs",
		`{"hostCluster":""}`:         "hostCluster must not be empty",
		`{"hostAuthority":"a b"}`:    "hostAuthority",
		`{"defaultTimezone":"../x"}`: "defaultTimezone",
		`{"defaultTimezone":""}`:     "defaultTimezone",
		`{"token":"a\nb"}`:           "token",
		`{"failOpen":"yes"}`:         "failOpen",
		`{"resolveTimeoutMs":-1}`:    "resolveTimeoutMs -1 out of range",
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
	f.Add(`{"dueWindowMs":-5}`)
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
