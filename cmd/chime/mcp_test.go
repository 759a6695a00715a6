package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/hostapi"
)

// stdioClient runs `chime mcp args…` with its stdin/stdout on pipes and
// connects an MCP client to them, as a client that launches stdio
// servers does.
func stdioClient(t *testing.T, args ...string) (*mcp.ClientSession, <-chan error) {
	t.Helper()
	inR, inW := io.Pipe()   // client → chime mcp
	outR, outW := io.Pipe() // chime mcp → client
	root := newRootCommand()
	root.SetIn(inR)
	root.SetOut(outW)
	root.SetErr(io.Discard)
	root.SetArgs(append([]string{"mcp"}, args...))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		err := root.ExecuteContext(ctx)
		// Whatever the client still writes or reads fails now.
		_ = inR.Close()
		_ = outW.CloseWithError(io.EOF)
		done <- err
	}()
	t.Cleanup(func() {
		cancel()
		_ = inW.Close()
	})
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "stdio-test"}, nil).Connect(t.Context(), &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err != nil {
		return nil, done
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs, done
}

func callText(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name, args string) string {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: json.RawMessage(args)})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("%s: %d contents", name, len(res.Content))
	}
	return res.Content[0].(*mcp.TextContent).Text
}

// TestMCPCommand drives `chime mcp` over stdio against a real host: the
// tools are the host's, calls land in the --session session, and a
// cancelled call ends the wait on the host.
func TestMCPCommand(t *testing.T) {
	svc, err := host.New(host.Config{DataDir: t.TempDir(), Token: "tok"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)

	cs, _ := stdioClient(t, "--host", srv.URL, "--token", "tok", "--session", "s-stdio")
	if cs == nil {
		t.Fatal("could not connect to chime mcp")
	}
	tools, err := cs.ListTools(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
		if tool.Name == hostapi.TimerToolName {
			raw, _ := json.Marshal(tool.InputSchema)
			var got, want any
			_ = json.Unmarshal(raw, &got)
			_ = json.Unmarshal(hostapi.TimerToolSpecs()[0].Parameters, &want)
			if gs, ws := mustMarshal(got), mustMarshal(want); gs != ws {
				t.Fatalf("timer schema through the bridge:\n got %s\nwant %s", gs, ws)
			}
		}
	}
	if len(names) != 7 {
		t.Fatalf("tools: %v", names)
	}

	text := callText(t.Context(), t, cs, hostapi.TimerToolName, `{"total_duration":60,"timeout_duration":0.001,"timer_id":"","reason":"ci"}`)
	var r struct {
		OK      bool   `json:"ok"`
		TimerID string `json:"timer_id"`
	}
	if err := json.Unmarshal([]byte(text), &r); err != nil || !r.OK {
		t.Fatalf("timer: %s", text)
	}
	api := &hostClient{base: srv.URL, token: "tok"}
	if err := api.ready(); err != nil {
		t.Fatal(err)
	}
	status := func() string {
		var vs []host.TimerView
		err := api.do(t.Context(), "GET", "/api/sessions/s-stdio/timers", nil, &vs)
		if err != nil || len(vs) != 1 || vs[0].TimerID != r.TimerID {
			t.Fatalf("timers of s-stdio: %+v %v", vs, err)
		}
		return vs[0].Status
	}
	if st := status(); st != "Running" {
		t.Fatalf("status %s", st)
	}

	// A cancelled call is cancelled on the host: the wait ends and the
	// timer goes to the background. Polling: the state changes on the
	// host's side of real connections, in real time.
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: hostapi.TimerToolName,
			Arguments: json.RawMessage(`{"total_duration":0,"timeout_duration":0,"timer_id":"` + r.TimerID + `","reason":""}`)})
		done <- err
	}()
	poll := func(want string) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for st := status(); st != want; st = status() {
			if time.Now().After(deadline) {
				t.Fatalf("status %s, want %s", st, want)
			}
			time.Sleep(20 * time.Millisecond) // poll: the host acts on its own
		}
	}
	poll("Waiting")
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned a result")
	}
	poll("Background")
}

// TestMCPCommandErrors: a bad host URL or a wrong token is a clear error.
func TestMCPCommandErrors(t *testing.T) {
	if _, err := run(t, "mcp", "--host", "ftp://x"); err == nil || !strings.Contains(err.Error(), "not an http(s) URL") {
		t.Fatalf("bad --host: %v", err)
	}
	svc, err := host.New(host.Config{DataDir: t.TempDir(), Token: "tok"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	cs, done := stdioClient(t, "--host", srv.URL, "--token", "wrong")
	if cs != nil {
		t.Fatal("connected with a wrong token")
	}
	if err := <-done; err == nil || !strings.Contains(err.Error(), "check --host and the token") {
		t.Fatalf("wrong token: %v", err)
	}
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
