package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
)

// newCronCommand is `chime cron` (docs/cron.md#cli): add, list, remove,
// run, pause and resume a session's cron jobs through the host API.
func newCronCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "cron",
		Short: "Manage cron jobs: messages a session gets on a schedule (add, list, rm, run, pause, resume)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	cmd.AddCommand(newCronAddCommand(), newCronListCommand())
	for _, action := range []string{"rm", "run", "pause", "resume"} {
		cmd.AddCommand(newCronJobCommand(action))
	}
	return cmd
}

func jobsPath(session string) string { return "/api/sessions/" + url.PathEscape(session) + "/jobs" }

func newCronAddCommand() *cobra.Command {
	c := &hostClient{}
	var session, at, every, expr, tz string
	var body host.JobCreate
	cmd := &cobra.Command{
		Use:   "add --session S (--at TIME | --every DURATION | --cron \"m h dom mon dow\" [--tz ZONE]) [--target main|isolated] [--name N] TEXT",
		Short: "Add a cron job to a session",
		Example: `  chime cron add --session s1 --every 30m "Check the deploy queue."
  chime cron add --session s1 --cron "0 9 * * 1-5" --tz Europe/Paris --name standup "Prepare the standup notes."
  chime cron add --session s1 --at 2026-12-24T18:00:00+01:00 --target isolated "Wish the team happy holidays."`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(session) == "" {
				return errors.New("--session is required")
			}
			n := 0
			for kind, v := range map[string]string{"at": at, "every": every, "cron": expr} {
				if v != "" {
					n++
					body.Kind, body.Schedule = kind, v
				}
			}
			if n != 1 {
				return errors.New("give exactly one of --at, --every and --cron")
			}
			if tz != "" && expr == "" {
				return errors.New("--tz applies to --cron only (an --at time carries its offset)")
			}
			body.TZ, body.Text = tz, strings.Join(args, " ")
			if err := c.ready(); err != nil {
				return err
			}
			var v host.JobView
			if err := c.do(cmd.Context(), http.MethodPost, jobsPath(session), body, &v); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s %s, next run %s\n", v.Session, v.JobID, v.Kind, describeSchedule(v), when(v.NextRunAt))
			return nil
		},
	}
	apiFlags(cmd, c)
	cmd.Flags().StringVar(&session, "session", "", "the session the job belongs to (required)")
	cmd.Flags().StringVar(&at, "at", "", "run once at this ISO 8601 time with offset, e.g. 2026-12-24T18:00:00+01:00")
	cmd.Flags().StringVar(&every, "every", "", "run every DURATION (Go syntax, at least 1s), e.g. 30m")
	cmd.Flags().StringVar(&expr, "cron", "", `run on a 5-field cron schedule, e.g. "0 9 * * 1-5"`)
	cmd.Flags().StringVar(&tz, "tz", "", "the IANA time zone of --cron (default UTC), e.g. Europe/Paris")
	cmd.Flags().StringVar(&body.Target, "target", "main", "main: a system event that wakes the session; isolated: a run in a session of its own")
	cmd.Flags().StringVar(&body.Name, "name", "", "a name for listings")
	return cmd
}

func newCronListCommand() *cobra.Command {
	c := &hostClient{}
	var session string
	var text bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List cron jobs (every session's, or one's)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.ready(); err != nil {
				return err
			}
			return listJobs(cmd.Context(), cmd.OutOrStdout(), c, session, text)
		},
	}
	apiFlags(cmd, c)
	cmd.Flags().StringVar(&session, "session", "", "only this session (default: every session)")
	cmd.Flags().BoolVar(&text, "text", false, "show each job's text (needs the token)")
	return cmd
}

func listJobs(ctx context.Context, w io.Writer, c *hostClient, session string, text bool) error {
	path := "/api/jobs"
	if session != "" {
		path = jobsPath(session)
	}
	if text {
		path += "?include=text"
	}
	var js []host.JobView
	if err := c.do(ctx, http.MethodGet, path, nil, &js); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	header := "SESSION\tJOB\tNAME\tSCHEDULE\tTARGET\tENABLED\tNEXT RUN\tLAST RUN\tLAST STATUS\tFAILURES"
	if text {
		header += "\tTEXT"
	}
	fmt.Fprintln(tw, header)
	for _, j := range js {
		last := j.LastStatus
		if j.LastError != "" {
			last += ": " + j.LastError
		}
		line := fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%t\t%s\t%s\t%s\t%d", j.Session, j.JobID, j.Name, describeSchedule(j), j.Target, j.Enabled,
			when(j.NextRunAt), when(j.LastRunAt), last, j.ConsecutiveFailures)
		if text {
			line += "\t" + strings.ReplaceAll(j.Text, "\n", " ")
		}
		fmt.Fprintln(tw, line)
	}
	return tw.Flush()
}

// newCronJobCommand is rm, run, pause or resume of one job.
func newCronJobCommand(action string) *cobra.Command {
	c := &hostClient{}
	var session string
	cmd := &cobra.Command{
		Use: action + " --session S JOB",
		Short: map[string]string{
			"rm": "Remove a cron job", "run": "Run a cron job now (its schedule goes on)",
			"pause": "Pause a cron job", "resume": "Resume a paused cron job (missed runs are not replayed)",
		}[action],
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if strings.TrimSpace(session) == "" {
				return errors.New("--session is required")
			}
			if err := c.ready(); err != nil {
				return err
			}
			path := jobsPath(session) + "/" + url.PathEscape(args[0])
			out := cmd.OutOrStdout()
			if action == "rm" {
				var res map[string]string
				if err := c.do(cmd.Context(), http.MethodDelete, path, nil, &res); err != nil {
					return err
				}
				fmt.Fprintf(out, "%s %s: removed\n", session, args[0])
				return nil
			}
			var v host.JobView
			if err := c.do(cmd.Context(), http.MethodPost, path+"/"+action, nil, &v); err != nil {
				return err
			}
			switch action {
			case "run":
				status := v.LastStatus
				if v.LastError != "" {
					status += ": " + v.LastError
				}
				fmt.Fprintf(out, "%s %s: ran, %s; next run %s\n", v.Session, v.JobID, status, when(v.NextRunAt))
			default:
				fmt.Fprintf(out, "%s %s: enabled %t, next run %s\n", v.Session, v.JobID, v.Enabled, when(v.NextRunAt))
			}
			return nil
		},
	}
	apiFlags(cmd, c)
	cmd.Flags().StringVar(&session, "session", "", "the session the job belongs to (required)")
	return cmd
}

func describeSchedule(j host.JobView) string {
	s := j.Kind + " " + j.Schedule
	if j.Kind == "cron" && j.TZ != "" {
		s += " (" + j.TZ + ")"
	}
	return s
}

func when(v int64) string {
	if v == 0 {
		return "-"
	}
	return time.UnixMilli(v).UTC().Format(time.RFC3339)
}
