package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chimehq/chime/host"
	"github.com/chimehq/chime/hostapi"
)

// TestTimersCommand drives `chime timers` against a real host service.
func TestTimersCommand(t *testing.T) {
	svc, err := host.New(host.Config{DataDir: t.TempDir(), Token: "tok"}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	srv := httptest.NewServer(svc.Handler())
	defer srv.Close()

	post := func(path string, body any) *http.Response {
		t.Helper()
		raw, _ := json.Marshal(body)
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer tok")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// The session's request came through the filter first.
	post(hostapi.PathPrepare, hostapi.PrepareRequest{RequestID: "r0", SessionID: "sess-1"}).Body.Close()
	// A timer call that returns at once (a 1 ms wait) leaves a running timer.
	resp := post(host.PathToolsExecute, host.ToolCall{SessionID: "sess-1", RequestID: "r1", Name: hostapi.TimerToolName,
		Arguments: json.RawMessage(`{"total_duration":600,"timeout_duration":0.001,"timer_id":"","reason":"wait for CI"}`)})
	var res struct {
		OK      bool   `json:"ok"`
		TimerID string `json:"timer_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&res)
	resp.Body.Close()
	if !res.OK || res.TimerID == "" {
		t.Fatalf("timer call: %+v", res)
	}

	out, err := run(t, "timers", "--host", srv.URL, "--token", "tok", "--text")
	if err != nil || !strings.Contains(out, "sess-1") || !strings.Contains(out, res.TimerID) || !strings.Contains(out, "Running") || !strings.Contains(out, "wait for CI") {
		t.Fatalf("list: %q %v", out, err)
	}
	out, err = run(t, "timers", "--host", srv.URL, "--session", "sess-1")
	if err != nil || strings.Contains(out, "wait for CI") || !strings.Contains(out, res.TimerID) {
		t.Fatalf("list without text: %q %v", out, err)
	}
	if _, err := run(t, "timers", "pause", "sess-1", res.TimerID, "--host", srv.URL, "--token", "tok"); err == nil || !strings.Contains(err.Error(), "--for") {
		t.Fatalf("pause without --for: %v", err)
	}
	out, err = run(t, "timers", "pause", "sess-1", res.TimerID, "--for", "5m", "--host", srv.URL, "--token", "tok")
	if err != nil || !strings.Contains(out, "Paused") {
		t.Fatalf("pause: %q %v", out, err)
	}
	t.Setenv("CHIME_HOST_TOKEN", "")
	t.Setenv("CHIME_DATA_DIR", t.TempDir())
	if _, err := run(t, "timers", "stop", "sess-1", res.TimerID, "--host", srv.URL); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("stop without a token: %v", err)
	}
	// The token chime up keeps in the data dir is found without a flag.
	if err := os.WriteFile(filepath.Join(os.Getenv("CHIME_DATA_DIR"), host.TokenFile), []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "timers", "resume", "sess-1", res.TimerID, "--host", srv.URL); err != nil || !strings.Contains(out, "Running") {
		t.Fatalf("resume with the data dir's token: %q %v", out, err)
	}
	if _, err := run(t, "timers", "stop", "other", res.TimerID, "--host", srv.URL, "--token", "tok"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("stop in another session: %v", err)
	}
	out, err = run(t, "timers", "stop", "sess-1", res.TimerID, "--reason", "green", "--host", srv.URL, "--token", "tok")
	if err != nil || !strings.Contains(out, "Stopped") {
		t.Fatalf("stop: %q %v", out, err)
	}
	if _, err := run(t, "timers", "--host", "localhost:1"); err == nil || !strings.Contains(err.Error(), "not an http(s) URL") {
		t.Fatalf("bad --host: %v", err)
	}
}
