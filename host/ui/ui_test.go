package ui

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/chimehq/chime/host/timers"
	"github.com/chimehq/chime/storage"
)

func TestHandlerServesEmbeddedPage(t *testing.T) {
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	for path, want := range map[string]string{
		"/ui/":             "text/html",
		"/ui/app.js":       "text/javascript",
		"/ui/panels.js":    "text/javascript",
		"/ui/timeline.js":  "text/javascript",
		"/ui/style.css":    "text/css",
		"/ui/api.js":       "text/javascript",
		"/ui/dom.js":       "text/javascript",
		"/ui/missing.js":   "",
		"/ui/../go.mod":    "",
		"/ui/static/x.css": "",
	} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want == "" {
			assert.Equal(t, http.StatusNotFound, resp.StatusCode, path)
			continue
		}
		assert.Equal(t, http.StatusOK, resp.StatusCode, path)
		assert.Contains(t, resp.Header.Get("Content-Type"), want, path)
		assert.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'self'", path)
		assert.NotEmpty(t, body, path)
		// Offline: nothing is loaded from elsewhere.
		assert.NotRegexp(t, `(?i)(src|href)=["']?(https?:)?//`, string(body), path)
		assert.NotContains(t, string(body), "from 'http", path)
	}
}

func TestSameOrigin(t *testing.T) {
	ok := SameOrigin(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	cases := []struct {
		name        string
		host        string
		origin, sfs string
		want        int
	}{
		{"no browser headers (CLI)", "127.0.0.1:7070", "", "", http.StatusNoContent},
		{"same origin", "127.0.0.1:7070", "http://127.0.0.1:7070", "same-origin", http.StatusNoContent},
		{"typed into the address bar", "127.0.0.1:7070", "", "none", http.StatusNoContent},
		{"other site by Sec-Fetch-Site", "127.0.0.1:7070", "", "cross-site", http.StatusForbidden},
		{"same-site other port", "127.0.0.1:7070", "http://127.0.0.1:9999", "same-site", http.StatusForbidden},
		{"other Origin", "127.0.0.1:7070", "http://evil.example", "", http.StatusForbidden},
		{"null Origin", "127.0.0.1:7070", "null", "", http.StatusForbidden},
		{"Origin host case", "LOCALHOST:7070", "http://localhost:7070", "", http.StatusNoContent},
	}
	for _, c := range cases {
		r := httptest.NewRequest("POST", "/api/x", nil)
		r.Host = c.host
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.sfs != "" {
			r.Header.Set("Sec-Fetch-Site", c.sfs)
		}
		w := httptest.NewRecorder()
		ok(w, r)
		assert.Equal(t, c.want, w.Code, c.name)
		if c.want == http.StatusForbidden {
			assert.Contains(t, w.Body.String(), "cross-origin request refused", c.name)
			assert.True(t, json.Valid(w.Body.Bytes()), c.name)
		}
	}
}

func FuzzCrossOrigin(f *testing.F) {
	for _, s := range []string{"", "null", "http://127.0.0.1:7070", "http://[::1]:7070", "://x", "http://a b", "http://%zz"} {
		f.Add(s, "same-origin", "127.0.0.1:7070")
	}
	f.Fuzz(func(t *testing.T, origin, site, host string) {
		r := httptest.NewRequest("POST", "/", nil)
		r.Host = host
		r.Header.Set("Origin", origin)
		r.Header.Set("Sec-Fetch-Site", site)
		why := crossOrigin(r)
		if site != "" && site != "same-origin" && site != "none" && why == "" {
			t.Fatalf("Sec-Fetch-Site %q let through", site)
		}
		if why == "" && origin != "" && !strings.Contains(strings.ToLower(origin), strings.ToLower(host)) {
			t.Fatalf("Origin %q let through for Host %q", origin, host)
		}
	})
}

// stream opens the broker's stream and returns a line reader.
func stream(t *testing.T, b *Broker) (*bufio.Reader, context.CancelFunc) {
	t.Helper()
	srv := httptest.NewServer(b)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	rd := bufio.NewReader(resp.Body)
	assert.Equal(t, "event: ready", readEvent(t, rd)[1])
	return rd, cancel
}

// readEvent reads one event block (lines up to a blank line).
func readEvent(t *testing.T, rd *bufio.Reader) []string {
	t.Helper()
	var lines []string
	for {
		l, err := rd.ReadString('\n')
		require.NoError(t, err)
		l = strings.TrimRight(l, "\n")
		if l == "" {
			return lines
		}
		lines = append(lines, l)
	}
}

func TestBrokerStreamsChanges(t *testing.T) {
	clock := clockwork.NewFakeClock()
	b := NewBroker(clock, 2)
	rd, _ := stream(t, b)
	waitSubscribers(t, b, 1)

	b.Publish("s-1")
	assert.Equal(t, []string{"event: change", `data: {"session":"s-1"}`}, readEvent(t, rd))

	// Keep-alives run on the clock.
	require.NoError(t, clock.BlockUntilContext(context.Background(), 1))
	clock.Advance(keepAlive)
	assert.Equal(t, []string{": keep-alive"}, readEvent(t, rd))

	// Past the limit: 503.
	stream(t, b)
	waitSubscribers(t, b, 2)
	resp, err := http.Get(httptest.NewServer(b).URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
}

func TestBrokerClientLeaves(t *testing.T) {
	b := NewBroker(clockwork.NewFakeClock(), 0)
	_, cancel := stream(t, b)
	waitSubscribers(t, b, 1)
	cancel()
	waitSubscribers(t, b, 0)
}

func waitSubscribers(t *testing.T, b *Broker, n int) {
	t.Helper()
	require.Eventually(t, func() bool { open, _ := b.Subscribers(); return open == n }, 5*time.Second, time.Millisecond)
}

func TestBrokerDropsSlowSubscriber(t *testing.T) {
	b := NewBroker(clockwork.NewFakeClock(), 0)
	slow := b.subscribe()
	fast := b.subscribe()
	for range subscriberBuffer {
		b.Publish("s")
		<-fast.ch
	}
	// The slow one's buffer is full: the next notice drops it, the fast
	// one stays.
	b.Publish("s")
	select {
	case <-slow.gone:
	default:
		t.Fatal("the slow subscriber was not dropped")
	}
	select {
	case <-fast.gone:
		t.Fatal("the fast subscriber was dropped")
	default:
	}
	open, dropped := b.Subscribers()
	assert.Equal(t, 1, open)
	assert.Equal(t, 1, dropped)
	var nilBroker *Broker
	nilBroker.Publish("s") // a host without a dashboard
}

func TestHistoryHandler(t *testing.T) {
	list := func(sid string) ([]timers.View, error) {
		if sid != "s1" {
			return nil, nil
		}
		return []timers.View{
			{TimerID: "tmr_a", History: []storage.TimerTransition{{At: 1, Status: "Running", Reason: "created"}, {At: 5, Status: "Paused", Reason: "pause it"}, {At: 5, Status: "Running", Reason: "resume it"}}},
			{TimerID: "tmr_b", History: []storage.TimerTransition{{At: 3, Status: "Running", Reason: "created"}}},
		}, nil
	}
	h := HistoryHandler(TimerHistory(list))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /h/{id}", func(w http.ResponseWriter, r *http.Request) {
		h(w, r, r.URL.Query().Get("text") == "1")
	})
	get := func(url string) (int, []HistoryEntry, string) {
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, httptest.NewRequest("GET", url, nil))
		var out struct{ History []HistoryEntry }
		_ = json.Unmarshal(w.Body.Bytes(), &out)
		return w.Code, out.History, w.Body.String()
	}
	code, hist, _ := get("/h/s1")
	require.Equal(t, http.StatusOK, code)
	require.Len(t, hist, 4)
	assert.Equal(t, []string{"Running", "Paused", "Running", "Running"}, []string{hist[0].Status, hist[1].Status, hist[2].Status, hist[3].Status}, "newest first, ties in order")
	assert.Equal(t, "tmr_b", hist[2].ID)
	for _, e := range hist {
		assert.Empty(t, e.Reason, "no text without the token")
		assert.Equal(t, "timer", e.Kind)
	}
	_, hist, _ = get("/h/s1?text=1&limit=2")
	require.Len(t, hist, 2)
	assert.Equal(t, "resume it", hist[0].Reason)
	code, _, body := get("/h/s1?limit=0")
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, body, "limit must be")
	code, hist, body = get("/h/other")
	assert.Equal(t, http.StatusOK, code)
	assert.Empty(t, hist)
	assert.Contains(t, body, `"history":[]`)
}
