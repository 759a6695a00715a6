package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// rawPost sends a POST's header block and body on a raw connection, the
// body in pieces: the first piece in the same write as the headers, each
// later one only after wait returns.
func rawPost(t *testing.T, addr, path string, pieces []string, wait func(i int)) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	n := 0
	for _, p := range pieces {
		n += len(p)
	}
	head := fmt.Sprintf("POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", path, n)
	if _, err := io.WriteString(c, head+pieces[0]); err != nil {
		t.Fatal(err)
	}
	for i, p := range pieces[1:] {
		wait(i + 1)
		if _, err := io.WriteString(c, p); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func readResponse(t *testing.T, c net.Conn) (int, string) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A body that arrives with its headers reaches the filters whole right
// after them; one that arrives later does not hold the headers back: the
// filters see the headers before the client has sent the rest.
func TestRequestBodyWithOrAfterItsHeaders(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		fmt.Fprintf(w, "got %d", len(body))
	})
	headers := make(chan struct{}, 4)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}, filters: []func(*fakeFilter){
		func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				headers <- struct{}{}
				return httpfilter.HeadersContinue
			}
		},
	}})
	addr := strings.TrimPrefix(e.url, "http://")
	body := strings.Repeat("a", 1000)

	t.Run("together", func(t *testing.T) {
		c := rawPost(t, addr, "/one", []string{body}, nil)
		if code, got := readResponse(t, c); code != 200 || got != "got 1000" {
			t.Fatalf("got %d %q", code, got)
		}
		<-headers
		if r := up.last(t); string(r.body) != body {
			t.Fatalf("upstream body %d bytes", len(r.body))
		}
	})

	for _, split := range []int{0, 10, 999} {
		t.Run(fmt.Sprintf("after %d bytes", split), func(t *testing.T) {
			before := len(e.rec.events())
			c := rawPost(t, addr, "/two", []string{body[:split], body[split:]}, func(int) {
				select {
				case <-headers:
				case <-time.After(3 * time.Second):
					t.Errorf("the filter saw no headers before the rest of the body was sent")
				}
			})
			if code, got := readResponse(t, c); code != 200 || got != "got 1000" {
				t.Fatalf("got %d %q", code, got)
			}
			var data []string
			for _, ev := range e.rec.events()[before:] {
				if strings.HasPrefix(ev, "f0:dd") {
					data = append(data, ev)
				}
			}
			if len(data) == 0 || data[len(data)-1] != fmt.Sprintf("f0:dd %d end=true", 1000-split) && data[len(data)-1] != "f0:dd 0 end=true" {
				t.Fatalf("data calls %v", data)
			}
		})
	}

	t.Run("two requests in one write", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		one := fmt.Sprintf("POST /p1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabcPOST /p2 HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		if _, err := io.WriteString(c, one); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		for _, want := range []string{"got 3", "got 1000"} {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != want {
				t.Fatalf("got %q, want %q", b, want)
			}
			<-headers
		}
	})
}

// A request with a content-length goes upstream with it, streamed or not,
// as Envoy's HTTP/1 encoder writes the header it gets; only a filter that
// removes the header while the body still streams makes it chunked.
func TestUpstreamKeepsTheContentLength(t *testing.T) {
	body := strings.Repeat("b", 1000)
	for _, tc := range []struct {
		name   string
		pieces []string
		filter func(*fakeFilter)
		want   int64
	}{
		{"no filter, body with the headers", []string{body}, nil, 1000},
		{"no filter, body after them", []string{"", body}, nil, 1000},
		{"no filter, body in two pieces", []string{body[:400], body[400:]}, nil, 1000},
		{"a filter drops the length", []string{"", body}, func(f *fakeFilter) {
			f.decodeHeaders = func(f *fakeFilter, h *httpfilter.Headers, end bool) httpfilter.HeadersStatus {
				h.Del("content-length")
				return httpfilter.HeadersContinue
			}
		}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			started := make(chan struct{}, 1)
			var length int64
			var got []byte
			up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				started <- struct{}{} // before the body: the headers came ahead of it
				length = r.ContentLength
				got, _ = io.ReadAll(r.Body)
				fmt.Fprintf(w, "got %d", len(got))
			}))
			t.Cleanup(up.Close)
			var filters []func(*fakeFilter)
			if tc.filter != nil {
				filters = append(filters, tc.filter)
			}
			e := start(t, setup{upstreams: map[string]string{"a": up.Listener.Addr().String()}, filters: filters})
			c := rawPost(t, strings.TrimPrefix(e.url, "http://"), "/p", tc.pieces, func(int) {
				select { // the rest is sent once the request streams upstream
				case <-started:
				case <-time.After(5 * time.Second):
					t.Error("the upstream got no headers before the whole body was sent")
				}
			})
			if code, got := readResponse(t, c); code != 200 || got != "got 1000" {
				t.Fatalf("got %d %q", code, got)
			}
			if length != tc.want || string(got) != body {
				t.Fatalf("upstream content-length %d (want %d), body %d bytes", length, tc.want, len(got))
			}
		})
	}
}

// A body that came in the same read as its headers goes upstream with them
// in one write, as Envoy's codec encodes both before its connection writes.
func TestBodyWithItsHeadersGoesUpstreamInOneWrite(t *testing.T) {
	up := newUpstream(t, nil)
	e := start(t, setup{upstreams: map[string]string{"a": up.addr()}})
	var writes atomic.Int32
	tr := e.clusters.byName["a"].transport
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{c, &writes}, nil
	}
	c := rawPost(t, strings.TrimPrefix(e.url, "http://"), "/p", []string{strings.Repeat("w", 1000)}, nil)
	if code, _ := readResponse(t, c); code != 200 {
		t.Fatalf("status %d", code)
	}
	if n := writes.Load(); n != 1 {
		t.Fatalf("the request went upstream in %d writes", n)
	}
}

type countingConn struct {
	net.Conn
	writes *atomic.Int32
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

func TestReadSize(t *testing.T) {
	for left, want := range map[int64]int{-1: 32 << 10, 0: 32 << 10, 1: 1, 1000: 1000, 32<<10 - 1: 32<<10 - 1, 32 << 10: 32 << 10, 1 << 20: 32 << 10} {
		if got := readSize(left); got != want {
			t.Errorf("readSize(%d) = %d, want %d", left, got, want)
		}
	}
}
