package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/chimehq/chime/host"
)

// newMCPCommand is `chime mcp` (docs/host-api.md#mcp): an MCP server on
// stdin/stdout for clients that only launch stdio servers. Its tools are
// the host's /mcp tools; every call is forwarded there.
func newMCPCommand() *cobra.Command {
	c := &hostClient{}
	var session string
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the host's clock and timer tools over MCP on stdin/stdout",
		Long: "Serve the host's clock and timer tools over MCP on stdin/stdout, forwarding every call to the host's /mcp.\n" +
			"--session names the chime session (reminders and timers belong to it); without it each run is a new session.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := c.ready(); err != nil {
				return err
			}
			local := &mcp.IOTransport{Reader: io.NopCloser(cmd.InOrStdin()), Writer: nopWriteCloser{cmd.OutOrStdout()}}
			return serveMCPBridge(cmd.Context(), c, session, local)
		},
	}
	apiFlags(cmd, c)
	cmd.Flags().StringVar(&session, "session", "", "the chime session of every call (sent as x-chime-session)")
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

// upstreamHeaders adds the token and the session to every request to /mcp.
type upstreamHeaders struct {
	token, session string
}

func (u upstreamHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if u.token != "" {
		r.Header.Set("Authorization", "Bearer "+u.token)
	}
	if u.session != "" {
		r.Header.Set("x-chime-session", u.session)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// serveMCPBridge connects to the host's /mcp as a client, offers its tools
// on local, and forwards each call with the caller's context, so a
// cancelled call is cancelled on the host too (its timer wait ends). It
// returns when local closes.
func serveMCPBridge(ctx context.Context, c *hostClient, session string, local mcp.Transport) error {
	// No client timeout: a timer call is held for as long as its wait.
	httpc := &http.Client{Transport: upstreamHeaders{token: c.token, session: session}}
	up, err := mcp.NewClient(&mcp.Implementation{Name: "chime-mcp"}, nil).Connect(ctx,
		&mcp.StreamableClientTransport{Endpoint: c.base + host.PathMCP, HTTPClient: httpc}, nil)
	if err != nil {
		return fmt.Errorf("connecting to %s%s (check --host and the token): %w", c.base, host.PathMCP, err)
	}
	defer up.Close()

	srv := mcp.NewServer(&mcp.Implementation{Name: "chime"}, nil)
	for tool, err := range up.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("listing the host's tools: %w", err)
		}
		srv.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			var args any
			if len(req.Params.Arguments) > 0 {
				args = req.Params.Arguments
			}
			return up.CallTool(ctx, &mcp.CallToolParams{Name: req.Params.Name, Arguments: args})
		})
	}
	return srv.Run(ctx, local)
}
