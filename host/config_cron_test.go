package host

import (
	"strings"
	"testing"

	"github.com/chimehq/chime/host/cron"
)

func TestConfigFileCronSection(t *testing.T) {
	cfg, err := ParseConfigFile([]byte(`
cron:
  enabled: false
  maxPerSession: 7
  jobs:
    - session: ops
      name: morning
      schedule: "0 8 * * 1-5"
      tz: Europe/Paris
      text: Summarize the night.
    - session: ops
      schedule: 15m
      target: isolated
      text: poll
`), "chime.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.DisableCron || cfg.CronMaxPerSession != 7 || len(cfg.CronJobs) != 2 {
		t.Fatalf("cron config %+v %d %+v", cfg.DisableCron, cfg.CronMaxPerSession, cfg.CronJobs)
	}
	want := cron.Declared{Path: "cron.jobs[1]", Spec: cron.Spec{Session: "ops", Schedule: "15m", Target: "isolated", Text: "poll"}}
	if cfg.CronJobs[1] != want || cfg.CronJobs[0].TZ != "Europe/Paris" || cfg.CronJobs[0].Name != "morning" {
		t.Fatalf("jobs %+v", cfg.CronJobs)
	}
}

func TestConfigFileCronErrorsNamePath(t *testing.T) {
	cases := map[string]string{
		"cron:\n  maxPerSession: 0\n": "chime.yaml:2: cron.maxPerSession: 0: must be at least 1",
		"cron:\n  jobs:\n    - session: a\n      schedule: 5m\n      text: x\n      when: now\n":                                     "chime.yaml:6: cron.jobs[0].when: unknown field in cron.jobs[0]; known: kind, name, schedule, session, target, text, tz",
		"cron:\n  jobs:\n    - session: a\n      schedule: 5 minutes\n      text: x\n":                                               `chime.yaml:4: cron.jobs[0].schedule: "5 minutes" is neither`,
		"cron:\n  jobs:\n    - session: a\n      schedule: 0 9 * * *\n      tz: Mars/Base\n      text: x\n":                          `chime.yaml:5: cron.jobs[0].tz: "Mars/Base" is not a known IANA time zone`,
		"cron:\n  jobs:\n    - session: a\n      schedule: 5m\n":                                                                     "cron.jobs[0].text: is empty",
		"cron:\n  maxPerSession: 1\n  jobs:\n    - {session: a, schedule: 5m, text: x}\n    - {session: a, schedule: 6m, text: y}\n": `chime.yaml:5: cron.jobs[1]: session "a" has more jobs than cron.maxPerSession (1)`,
	}
	for in, want := range cases {
		_, err := ParseConfigFile([]byte(in), "chime.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q:\n got %v\nwant %s", in, err, want)
		}
	}
}
