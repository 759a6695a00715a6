package envoy_test

import (
	"bufio"
	"io"
	"net"
	"net/http/httputil"
	"strings"
	"testing"
	"time"
)

// rawExchange writes req on c and reads one response's status line and
// header lines as they came on the wire, then its body (content-length).
func rawExchange(t *testing.T, c net.Conn, br *bufio.Reader, req string) []string {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	var lines []string
	n, chunked := 0, false
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("read response: %v (so far %q)", err, lines)
		}
		l = strings.TrimRight(l, "\r\n")
		if l == "" {
			break
		}
		lines = append(lines, l)
		if k, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(k, "content-length") {
			n = atoi(strings.TrimSpace(v))
		} else if ok && strings.EqualFold(k, "transfer-encoding") {
			chunked = true
		}
	}
	if chunked {
		if _, err := io.Copy(io.Discard, httputil.NewChunkedReader(br)); err != nil {
			t.Fatal(err)
		}
		if _, err := br.ReadString('\n'); err != nil { // the chunked body's final CRLF
			t.Fatal(err)
		}
	} else if _, err := br.Discard(n); err != nil {
		t.Fatal(err)
	}
	return lines
}

func atoi(s string) int {
	n := 0
	for _, c := range s {
		n = n*10 + int(c-'0')
	}
	return n
}

// The guest sees request headers in the order they came (repeated names
// where they stood), on each request of a keep-alive HTTP/1.1
// connection, and the HTTP/1 response header names are lowercase, as
// Envoy's HTTP/1 codec writes them.
func TestHTTPWireHeaderOrderAndCase(t *testing.T) {
	up := newUpstream(t)
	p := startProxy(t, runtimeSpec{
		listeners: []listenerSpec{{name: "main", filters: []filterSpec{{name: "hdr", mode: "headers"}}}},
		clusters:  map[string]string{"app": up.addr()},
	})
	c, err := net.Dial("tcp", p.srv.Addr("main"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	reqs := []struct{ req, want string }{
		{"POST /one HTTP/1.1\r\nHost: h\r\nZeta: 1\r\nalpha: 2\r\nX-Dup: a\r\nMid: 3\r\nx-dup: b\r\nContent-Length: 4\r\n\r\nbody",
			"zeta=1,alpha=2,x-dup=a,mid=3,x-dup=b,content-length=4"},
		{"GET /two HTTP/1.1\r\nHost: h\r\nbeta: 1\r\nAardvark: 2\r\n\r\n", "beta=1,aardvark=2"},
	}
	for i, r := range reqs {
		lines := rawExchange(t, c, br, r.req)
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "HTTP/1.1 2") {
			t.Fatalf("request %d: response %q", i, lines)
		}
		for _, l := range lines[1:] {
			k, _, _ := strings.Cut(l, ":")
			if k != strings.ToLower(k) {
				t.Errorf("request %d: response header %q is not lowercase", i, l)
			}
		}
	}
	pairs := p.logs.find("hdr", "pairs ")
	if len(pairs) != len(reqs) {
		t.Fatalf("pairs logs: %q", pairs)
	}
	for i, r := range reqs {
		if !strings.Contains(pairs[i], ":scheme=http,"+r.want+",") {
			t.Errorf("request %d: guest saw %q; want the headers in wire order %q right after the pseudo-headers", i, pairs[i], r.want)
		}
	}
}
