package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host/delivery"
	"github.com/chimehq/chime/internal/timesource"
)

// watchClock times the reconnect backoff (tests replace it).
var watchClock = timesource.Real()

// Reconnect backoff of `chime watch`: 1s doubling to 30s, reset once a
// connection is up.
const (
	watchBackoffMin = time.Second
	watchBackoffMax = 30 * time.Second
)

// errUnauthorized ends chime watch: retrying cannot fix a wrong token.
var errUnauthorized = errors.New("the host refused the token (401): pass --token, set CHIME_HOST_TOKEN, or run where the data dir's host-token is")

// newWatchCommand is `chime watch` (docs/delivery.md#chime-watch).
func newWatchCommand() *cobra.Command {
	c := &hostClient{}
	w := &watcher{}
	cmd := &cobra.Command{
		Use:   "watch --session ID [--exec CMD]",
		Short: "Print a session's deliveries as they arrive (and run a command for each)",
		Long: "Subscribes to the session's event stream on the host, prints each delivery as it arrives and, with --exec, " +
			"runs CMD (through sh -c) with the text on stdin. It reconnects with Last-Event-ID when the connection drops, " +
			"so nothing is missed while the host restarts; --state keeps the last event id across restarts of chime watch itself.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if w.session == "" {
				return errors.New("--session is required")
			}
			if err := c.ready(); err != nil {
				return err
			}
			if _, err := delivery.ParseLastEventID(w.from); err != nil {
				return fmt.Errorf("--from: %w", err)
			}
			w.client, w.out, w.errw = c, cmd.OutOrStdout(), cmd.ErrOrStderr()
			return w.run(cmd.Context())
		},
	}
	apiFlags(cmd, c)
	cmd.Flags().StringVar(&w.session, "session", "", "the session to watch (required)")
	cmd.Flags().StringVar(&w.exec, "exec", "", "run this command (sh -c) for each delivery, with the text on stdin")
	cmd.Flags().StringVar(&w.from, "from", "", "start after this event id (default: everything the host still keeps, or the --state file's id)")
	cmd.Flags().StringVar(&w.state, "state", "", "file that keeps the last event id, so a restarted chime watch resumes where it stopped")
	return cmd
}

type watcher struct {
	session, exec, from, state string

	client    *hostClient
	out, errw io.Writer
}

func (w *watcher) run(ctx context.Context) error {
	last := w.from
	if w.state != "" {
		if raw, err := os.ReadFile(w.state); err == nil {
			if id := strings.TrimSpace(string(raw)); id != "" {
				if _, err := delivery.ParseLastEventID(id); err != nil {
					return fmt.Errorf("--state %s: %w", w.state, err)
				}
				last = id
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("--state: %w", err)
		}
	}
	// A stream has no overall timeout; the heartbeats show it is alive.
	hc := &http.Client{Transport: w.client.http.Transport}
	backoff := watchBackoffMin
	for {
		connected, err := w.stream(ctx, hc, &last)
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errUnauthorized):
			return err
		case err != nil && !connected && isPermanent(err):
			return err
		}
		if connected {
			backoff = watchBackoffMin
		}
		fmt.Fprintf(w.errw, "chime watch: %v; reconnecting in %s\n", err, backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-watchClock.After(backoff):
		}
		backoff = min(2*backoff, watchBackoffMax)
	}
}

// permanentError is a refusal that reconnecting cannot fix (4xx).
type permanentError struct{ error }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// stream reads one connection until it ends; connected reports that the
// host accepted the subscription.
func (w *watcher) stream(ctx context.Context, hc *http.Client, last *string) (connected bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.client.base+"/v1/sessions/"+url.PathEscape(w.session)+"/events", nil)
	if err != nil {
		return false, permanentError{err}
	}
	req.Header.Set("Accept", "text/event-stream")
	if w.client.token != "" {
		req.Header.Set("Authorization", "Bearer "+w.client.token)
	}
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("host %s: %w", w.client.base, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		return false, errUnauthorized
	case resp.StatusCode >= 400 && resp.StatusCode < 500:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		return false, permanentError{fmt.Errorf("host answered %d: %s", resp.StatusCode, strings.TrimSpace(string(msg)))}
	case resp.StatusCode != http.StatusOK:
		return false, fmt.Errorf("host answered %d", resp.StatusCode)
	}
	err = readEvents(resp.Body, func(id, data string) error {
		if err := w.handle(ctx, id, data); err != nil {
			return err
		}
		if id != "" {
			*last = id
			w.save(id)
		}
		return nil
	})
	if err != nil {
		return true, err
	}
	return true, errors.New("the host closed the stream")
}

// readEvents parses a text/event-stream and calls fn for each event with
// data, with its id ("" when none): comments and unknown fields are
// skipped, data lines are joined with newlines. It returns fn's error, a
// read error as "connection lost", or nil at the end of the stream.
func readEvents(r io.Reader, fn func(id, data string) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 2*delivery.MaxTextBytes)
	var id string
	var data strings.Builder
	hasData := false
	for sc.Scan() {
		line := strings.TrimSuffix(sc.Text(), "\r")
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch {
		case line == "":
			if hasData {
				if err := fn(id, data.String()); err != nil {
					return err
				}
			}
			id, hasData = "", false
			data.Reset()
		case field == "": // a comment: heartbeat
		case field == "id":
			id = value
		case field == "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("connection lost: %w", err)
	}
	return nil
}

// handle prints one delivery and runs --exec.
func (w *watcher) handle(ctx context.Context, id, data string) error {
	var p delivery.Payload
	if err := json.Unmarshal([]byte(data), &p); err != nil {
		fmt.Fprintf(w.errw, "chime watch: event %s is not a delivery: %v\n", id, err)
		return nil
	}
	fmt.Fprintf(w.out, "[%s %s %s] %s\n", p.At, p.Reason, p.RunID, p.Text)
	if w.exec == "" {
		return nil
	}
	cmd := exec.CommandContext(ctx, "sh", "-c", w.exec)
	cmd.Stdin = strings.NewReader(p.Text)
	cmd.Stdout, cmd.Stderr = w.out, w.errw
	cmd.Env = append(os.Environ(), "CHIME_SESSION="+p.Session, "CHIME_RUN_ID="+p.RunID, "CHIME_REASON="+p.Reason, "CHIME_EVENT_ID="+id, "CHIME_AT="+p.At)
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(w.errw, "chime watch: --exec for event %s: %v\n", id, err)
	}
	return nil
}

// save writes the last event id to --state (atomically: temp + rename).
func (w *watcher) save(id string) {
	if w.state == "" {
		return
	}
	tmp := w.state + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err == nil {
		err = os.Rename(tmp, w.state)
		if err != nil {
			fmt.Fprintf(w.errw, "chime watch: --state: %v\n", err)
		}
	} else {
		fmt.Fprintf(w.errw, "chime watch: --state: %v\n", err)
	}
}
