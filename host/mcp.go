package host

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chimehq/chime/host/clock"
	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// PathMCP serves the server tools over MCP (streamable HTTP) to clients
// that cannot be proxied (docs/clock-tool.md, docs/timers.md).
const PathMCP = "/mcp"

// Headers an MCP client may send to pick the chime session and the zone
// of the clock tool's local time.
const (
	headerMCPSession  = "x-chime-session"
	headerMCPTimezone = "x-chime-timezone"
)

// mcpHandler builds the /mcp endpoint: one MCP server whose tools are the
// enabled server tools, with the schemas the filter injects (hostapi), each
// call dispatched through Execute. The caller wraps it in the token check.
func (s *Service) mcpHandler() http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{Name: "chime", Title: "chime clock and timers"}, &mcp.ServerOptions{Logger: s.log})
	for _, spec := range mcpToolSpecs() {
		if f := s.tools.byName[spec.Name]; f == nil || f.disabled {
			continue
		}
		srv.AddTool(&mcp.Tool{Name: spec.Name, Description: spec.Description, InputSchema: spec.Parameters}, s.mcpTool(spec.Name))
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Logger: s.log, SessionTimeout: mcpSessionIdle})
}

// mcpSessionIdle closes an MCP session with no request for this long (an
// open call or event stream keeps it), so abandoned ones do not pile up; a
// client whose session is gone initializes a new one.
const mcpSessionIdle = time.Hour

// mcpToolSpecs are the tools /mcp can offer, in injection order.
func mcpToolSpecs() []llm.ToolSpec {
	return append([]llm.ToolSpec{hostapi.ClockToolSpec()}, hostapi.TimerToolSpecs()...)
}

// mcpTool runs one tool call with the call's context: a client that
// cancels the call ends a timer wait, and the timer goes on in the
// background (docs/timers.md#waiting). The result is the tool's JSON as
// text, ok:false included, as the model sees it through the proxy.
func (s *Service) mcpTool(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		sid, zone := mcpSession(req)
		s.noteMCPSession(sid, req.Session)
		ctx = clock.WithLocation(ctx, s.location(zone))
		args := req.Params.Arguments
		if len(args) == 0 {
			args = []byte("{}")
		}
		res := s.Execute(ctx, sid, "", name, args)
		s.gens.settle(ctx, s.gens.current()) // the client's next request sees it (skip.go)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(res)}}}, nil
	}
}

// mcpSession is the chime session of an MCP call: the x-chime-session
// header of its HTTP request, else the MCP session id.
func mcpSession(req *mcp.CallToolRequest) (session, zone string) {
	if req.Extra != nil && req.Extra.Header != nil {
		session = strings.TrimSpace(req.Extra.Header.Get(headerMCPSession))
		zone = strings.TrimSpace(req.Extra.Header.Get(headerMCPTimezone))
	}
	if session == "" && req.Session != nil {
		session = req.Session.ID()
	}
	return session, zone
}
