package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
)

// hostClient talks to the host API (docs/host-api.md) for the CLI.
type hostClient struct {
	base  string
	token string
	http  *http.Client
}

func (c *hostClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("host %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		var e struct{ Error string }
		if json.Unmarshal(data, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s %s: %d %s", method, path, resp.StatusCode, e.Error)
		}
		return fmt.Errorf("%s %s: %d", method, path, resp.StatusCode)
	}
	return json.Unmarshal(data, out)
}

// hostFlags are the flags of every command that calls the host API.
func apiFlags(cmd *cobra.Command, c *hostClient) {
	cmd.Flags().StringVar(&c.base, "host", "http://"+host.DefaultAddr, "the host's base URL")
	cmd.Flags().StringVar(&c.token, "token", "", "the host token (default $CHIME_HOST_TOKEN, else the one chime up keeps in the data dir)")
}

func (c *hostClient) ready() error {
	u, err := url.Parse(c.base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--host %q is not an http(s) URL", c.base)
	}
	c.base = strings.TrimRight(c.base, "/")
	if c.token == "" {
		c.token = os.Getenv("CHIME_HOST_TOKEN")
	}
	if c.token == "" {
		// chime up made one: $CHIME_DATA_DIR (or ./data)/host-token.
		dir := cmp.Or(strings.TrimSpace(os.Getenv("CHIME_DATA_DIR")), host.DefaultDataDir)
		if raw, err := os.ReadFile(filepath.Join(dir, host.TokenFile)); err == nil {
			c.token = strings.TrimSpace(string(raw))
		}
	}
	if c.http == nil {
		c.http = &http.Client{Timeout: 30 * time.Second}
	}
	return nil
}

// newTimersCommand is `chime timers` (docs/timers.md#cli): list timers,
// and stop, cancel, pause or resume one.
func newTimersCommand() *cobra.Command {
	c := &hostClient{}
	var session string
	var text bool
	cmd := &cobra.Command{
		Use:   "timers",
		Short: "List the sessions' timers, or act on one (stop, cancel, pause, resume)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.ready(); err != nil {
				return err
			}
			return listTimers(cmd.Context(), cmd.OutOrStdout(), c, session, text)
		},
	}
	apiFlags(cmd, c)
	cmd.Flags().StringVar(&session, "session", "", "only this session (default: every session)")
	cmd.Flags().BoolVar(&text, "text", false, "show reasons (needs the token)")
	for _, action := range []string{"stop", "cancel", "pause", "resume"} {
		cmd.AddCommand(newTimerActionCommand(action))
	}
	return cmd
}

func newTimerActionCommand(action string) *cobra.Command {
	c := &hostClient{}
	var body host.TimerAction
	var pause time.Duration
	use := action + " SESSION TIMER"
	cmd := &cobra.Command{
		Use:   use,
		Short: map[string]string{"stop": "Stop a timer: no notice", "cancel": "Send a timer to the background: notice on completion", "pause": "Pause a timer for --for", "resume": "Resume a paused timer"}[action],
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := c.ready(); err != nil {
				return err
			}
			if action == "pause" {
				if pause <= 0 {
					return errors.New("pause needs --for, e.g. --for 5m")
				}
				body.PauseSeconds = pause.Seconds()
			}
			var v host.TimerView
			path := "/api/sessions/" + url.PathEscape(args[0]) + "/timers/" + url.PathEscape(args[1]) + "/" + action
			if err := c.do(cmd.Context(), http.MethodPost, path, body, &v); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s: %s, %s left\n", args[0], v.TimerID, v.Status, ms(v.RemainingMs))
			return nil
		},
	}
	apiFlags(cmd, c)
	cmd.Flags().StringVar(&body.Reason, "reason", "", "why (recorded in the timer's history)")
	if action == "pause" {
		cmd.Flags().DurationVar(&pause, "for", 0, "how long to pause")
	}
	return cmd
}

func listTimers(ctx context.Context, w io.Writer, c *hostClient, session string, text bool) error {
	sessions := []string{session}
	if session == "" {
		var views []host.SessionView
		if err := c.do(ctx, http.MethodGet, "/api/sessions", nil, &views); err != nil {
			return err
		}
		sessions = sessions[:0]
		for _, v := range views {
			sessions = append(sessions, v.ID)
		}
	}
	query := ""
	if text {
		query = "?include=text"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tTIMER\tSTATUS\tTOTAL\tREMAINING\tCREATED\tREASON")
	for _, sid := range sessions {
		var ts []host.TimerView
		if err := c.do(ctx, http.MethodGet, "/api/sessions/"+url.PathEscape(sid)+"/timers"+query, nil, &ts); err != nil {
			return err
		}
		for _, t := range ts {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sid, t.TimerID, t.Status, ms(t.TotalMs), ms(t.RemainingMs),
				time.UnixMilli(t.CreatedAt).UTC().Format(time.RFC3339), t.Reason)
		}
	}
	return tw.Flush()
}

func ms(v int64) string {
	return (time.Duration(v) * time.Millisecond).Round(100 * time.Millisecond).String()
}
