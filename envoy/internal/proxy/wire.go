package proxy

import (
	"bytes"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// Go's HTTP/1 server keeps request headers in a map and writes response
// header names in canonical case. Envoy gives filters the request headers
// in the order received and writes HTTP/1 response header names in lower
// case. wireConn sits under net/http on each downstream connection to do
// the same: it keeps a window of the bytes read, where a request finds its
// header block to recover the order (wireOrder), and it lowercases the
// header names of a response whose handler asked for it (lowerNext).
type wireConn struct {
	net.Conn

	mu  sync.Mutex
	buf []byte // recent bytes read, at most wireWindow*2

	// Response rewriting; wmu because net/http may write a 100 Continue
	// from the goroutine reading the body.
	wmu      sync.Mutex
	lower    bool // lowercase the names of the next response header block
	wstate   int
	wlineLen int
	wstatus  []byte
}

// wireWindow bounds what a connection keeps of its input: more than the
// largest request header block net/http accepts (maxRequestHeaderBytes).
const wireWindow = 128 << 10

type wireListener struct{ net.Listener }

func (l wireListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &wireConn{Conn: c}, nil
}

type wireConnKey struct{}

// CloseWrite keeps net/http's graceful close (half-close, then drain).
func (c *wireConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *wireConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.mu.Lock()
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) > 2*wireWindow {
			c.buf = append(c.buf[:0], c.buf[len(c.buf)-wireWindow:]...)
		}
		c.mu.Unlock()
	}
	return n, err
}

// wireOrder returns r's header names as they appeared on the wire
// (lowercase, one entry per header line), and consumes the window up to
// the end of r's header block. after is how many bytes the connection had
// read past that block: net/http holds them unread, so a body no longer
// than after is there to read without waiting. ok is false when the block
// cannot be found or does not match r (then the caller keeps its own
// order).
func (c *wireConn) wireOrder(r *http.Request) (names []string, after int, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	line := []byte(r.Method + " " + r.RequestURI + " ")
	from := 0
	for {
		i := bytes.Index(c.buf[from:], line)
		if i < 0 {
			return nil, 0, false
		}
		start := from + i
		from = start + 1
		// No line-start check: the previous request's body (read by then)
		// may end without a newline. The header set must match r.
		end := bytes.Index(c.buf[start:], []byte("\r\n\r\n"))
		if end < 0 {
			return nil, 0, false
		}
		block := c.buf[start : start+end]
		names = names[:0]
		lines := strings.Split(string(block), "\r\n")[1:]
		seen := map[string]bool{}
		for _, l := range lines {
			k, _, found := strings.Cut(l, ":")
			if !found {
				names = nil
				break
			}
			k = strings.ToLower(strings.TrimSpace(k))
			names = append(names, k)
			seen[http.CanonicalHeaderKey(k)] = true
		}
		if names == nil {
			continue
		}
		match := true
		for k := range r.Header {
			if !seen[k] {
				match = false
				break
			}
		}
		if !match {
			continue
		}
		c.buf = append(c.buf[:0], c.buf[start+end+4:]...)
		return names, len(c.buf), true
	}
}

// orderHeaders lists r.Header in wire order: names as they came, each
// header line taking the next value net/http parsed for that name; what
// the wire order does not cover follows, sorted.
func orderHeaders(h httpfilter.Headers, r *http.Request, names []string) httpfilter.Headers {
	used := map[string]int{}
	sawTE := false
	for _, k := range names {
		if hopByHop[k] && k != "te" {
			continue
		}
		vs := r.Header[http.CanonicalHeaderKey(k)]
		i := used[k]
		if i >= len(vs) {
			continue
		}
		used[k] = i + 1
		v := vs[i]
		if k == "te" {
			if sawTE || !teTrailers([]string{v}) {
				continue
			}
			sawTE, v = true, "trailers"
		}
		h = append(h, httpfilter.Header{Key: k, Value: v})
	}
	rest := http.Header{}
	for k, vs := range r.Header {
		if i := used[strings.ToLower(k)]; i < len(vs) {
			rest[k] = vs[i:]
		}
	}
	return appendHeaderMap(h, rest)
}

// teTrailers reports whether TE header values name "trailers": Envoy's
// connection manager then keeps "te: trailers" and nothing else of it, and
// drops the header otherwise (sanitizeTEHeader).
func teTrailers(vs []string) bool {
	for _, v := range vs {
		for t := range strings.SplitSeq(v, ",") {
			if strings.TrimSpace(t) == "trailers" {
				return true
			}
		}
	}
	return false
}

// lowerNext makes the next response header block written on the
// connection carry lowercase names, as Envoy's HTTP/1 codec writes them.
// Informational (1xx) blocks before it are lowercased too.
func (c *wireConn) lowerNext() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.lower, c.wstate, c.wlineLen, c.wstatus = true, wsStatus, 0, c.wstatus[:0]
}

const (
	wsStatus = iota // in the status line
	wsLineStart
	wsName
	wsValue
	wsBlankCR // "\r" at a line start: the block ends at "\n"
)

func (c *wireConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.lower {
		return c.Conn.Write(p)
	}
	out := append([]byte(nil), p...)
	for i, b := range out {
		if !c.lower {
			break
		}
		switch c.wstate {
		case wsStatus:
			if len(c.wstatus) < 12 {
				c.wstatus = append(c.wstatus, b)
			}
			if b == '\n' {
				c.wstate = wsLineStart
			}
		case wsLineStart:
			switch b {
			case '\r':
				c.wstate = wsBlankCR
			case '\n':
				c.endBlock()
			case ':':
				c.wstate = wsValue
			default:
				c.wstate = wsName
				out[i] = lowerASCII(b)
			}
		case wsBlankCR:
			c.endBlock()
		case wsName:
			if b == ':' {
				c.wstate = wsValue
			} else if b == '\n' {
				c.wstate = wsLineStart
			} else {
				out[i] = lowerASCII(b)
			}
		case wsValue:
			if b == '\n' {
				c.wstate = wsLineStart
			}
		}
	}
	n, err := c.Conn.Write(out)
	if n > len(p) {
		n = len(p)
	}
	return n, err
}

// endBlock ends a header block: a 1xx block waits for the final one.
func (c *wireConn) endBlock() {
	if bytes.HasPrefix(c.wstatus, []byte("HTTP/1.1 1")) || bytes.HasPrefix(c.wstatus, []byte("HTTP/1.0 1")) {
		c.wstate, c.wstatus = wsStatus, c.wstatus[:0]
		return
	}
	c.lower = false
}

func lowerASCII(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + 'a' - 'A'
	}
	return b
}
