package proxy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
)

// FuzzWireOrder: whatever bytes a client sends, finding a request's header
// block never panics, an order it returns names every header net/http
// parsed, and a body no longer than the bytes it counts past the block is
// there whole: those bytes, read without waiting (bodyInHand).
func FuzzWireOrder(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nB: 1\r\nA: 2\r\nb: 3\r\n\r\n"))
	f.Add([]byte("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabcGET /y HTTP/1.1\r\nHost: a\r\nZ: 1\r\n\r\n"))
	f.Add([]byte("GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n"))
	f.Add([]byte("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nabc"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		c := &wireConn{buf: append([]byte(nil), data...)}
		names, after, ok := c.wireOrder(r)
		if !ok {
			return
		}
		if after < 0 || after > len(data) {
			t.Fatalf("after = %d of %d bytes", after, len(data))
		}
		if n := r.ContentLength; n > 0 && len(r.TransferEncoding) == 0 && n <= int64(after) {
			body, err := io.ReadAll(r.Body)
			if err != nil || !bytes.Equal(body, data[len(data)-after:][:n]) {
				t.Fatalf("body %q, %v; want the %d bytes after the header block %q", body, err, n, data[len(data)-after:])
			}
		}
		seen := map[string]bool{}
		for _, n := range names {
			seen[http.CanonicalHeaderKey(n)] = true
		}
		for k := range r.Header {
			if !seen[k] {
				t.Fatalf("order %q misses %q", names, k)
			}
		}
	})
}

type sink struct {
	net.Conn
	out bytes.Buffer
}

func (s *sink) Write(p []byte) (int, error) { return s.out.Write(p) }

// FuzzLowerResponse: however net/http splits its writes, the response
// header names (after any 1xx block) come out lowercase, values and body
// untouched.
func FuzzLowerResponse(f *testing.F) {
	f.Add(uint8(3), "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Type: Text/X\r\nX-Up: A\r\n\r\nBODY Header: X\r\n")
	f.Add(uint8(1), "HTTP/1.1 404 Not Found\r\nDate: D\r\n\r\n")
	f.Fuzz(func(t *testing.T, step uint8, wire string) {
		s := &sink{}
		c := &wireConn{Conn: s}
		c.lowerNext()
		n := int(step%16) + 1
		for i := 0; i < len(wire); i += n {
			end := min(i+n, len(wire))
			if w, err := c.Write([]byte(wire[i:end])); err != nil || w != end-i {
				t.Fatalf("write: %d, %v", w, err)
			}
		}
		got := s.out.String()
		if len(got) != len(wire) || !strings.EqualFold(got, wire) {
			t.Fatalf("rewrite changed more than case: %q -> %q", wire, got)
		}
		if strings.Count(wire, "\n") != strings.Count(wire, "\r\n") {
			return // net/http ends every line with CRLF
		}
		if !strings.HasPrefix(wire, "HTTP/1.1 200 OK\r\n") && !strings.HasPrefix(wire, "HTTP/1.1 404") && !strings.HasPrefix(wire, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200") {
			return
		}
		head, body, _ := strings.Cut(got, "\r\n\r\n")
		if strings.HasPrefix(head, "HTTP/1.1 1") { // skip a 1xx block
			head, body, _ = strings.Cut(body, "\r\n\r\n")
		}
		for _, l := range strings.Split(head, "\r\n")[1:] {
			k, v, _ := strings.Cut(l, ":")
			if strings.ContainsAny(k, "ABCDEFGHIJKLMNOPQRSTUVWXYZ") {
				t.Errorf("header name %q not lowercased", k)
			}
			if !strings.Contains(wire, v) {
				t.Errorf("value %q changed", v)
			}
		}
		if !strings.HasSuffix(wire, body) {
			t.Errorf("body changed: %q", body)
		}
	})
}
