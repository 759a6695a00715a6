package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/chimehq/chime/envoy/internal/config"
	"github.com/chimehq/chime/envoy/internal/httpfilter"
	"github.com/chimehq/chime/envoy/internal/netfilter"
	"github.com/chimehq/chime/envoy/internal/stats"
)

// A TCP listener runs Envoy's network filter chain: the wasm network
// filters in config order, then tcp_proxy (docs/local-runtime.md "TCP
// listeners"). Each downstream connection has one goroutine that owns every
// filter call and both sockets' state; two reader goroutines hand it what
// they read, one chunk at a time, so not reading from them is Envoy's
// readDisable.

// tcpListener is one listener whose chain ends in tcp_proxy.
type tcpListener struct {
	cfg        *config.Listener
	clusters   *Clusters
	factories  []netfilter.Factory
	log        *slog.Logger
	ln         net.Listener
	workers    int
	nextWorker atomic.Uint64
	ctx        context.Context
	conns      sync.WaitGroup

	cxTotal, noRoute, rxBytes, txBytes httpfilter.Metric
}

func newTCPListener(ctx context.Context, lc *config.Listener, opt Options, ln net.Listener) *tcpListener {
	l := &tcpListener{cfg: lc, clusters: opt.Clusters, factories: opt.NetworkFilters[lc.Name], log: opt.Logger, ln: ln, workers: opt.Workers, ctx: ctx}
	tag := stats.Tag{Name: "envoy_tcp_prefix", Value: lc.TCPProxy.StatPrefix}
	pre := "tcp." + lc.TCPProxy.StatPrefix + "."
	l.cxTotal = opt.Stats.Counter(pre+"downstream_cx_total", "tcp.downstream_cx_total", tag)
	l.noRoute = opt.Stats.Counter(pre+"downstream_cx_no_route", "tcp.downstream_cx_no_route", tag)
	l.rxBytes = opt.Stats.Counter(pre+"downstream_cx_rx_bytes_total", "tcp.downstream_cx_rx_bytes_total", tag)
	l.txBytes = opt.Stats.Counter(pre+"downstream_cx_tx_bytes_total", "tcp.downstream_cx_tx_bytes_total", tag)
	return l
}

func (l *tcpListener) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				l.log.Debug("tcp listener: accept", "listener", l.cfg.Name, "err", err)
			}
			return
		}
		l.conns.Add(1)
		go func() {
			defer l.conns.Done()
			l.handle(c)
		}()
	}
}

// close stops accepting; open connections end through the server's
// context (their close event runs, as on Envoy's shutdown).
func (l *tcpListener) close() {
	_ = l.ln.Close()
	l.conns.Wait()
}

// readChunk is what a reader goroutine read: data, then err at the end
// (io.EOF for a half-close).
type readChunk struct {
	data []byte
	err  error
}

type dialResult struct {
	conn net.Conn
	err  error
}

// tcpConn is one downstream connection.
type tcpConn struct {
	l      *tcpListener
	down   net.Conn
	up     net.Conn
	ctx    context.Context
	cancel context.CancelFunc
	info   httpfilter.StreamInfo

	filters []netfilter.Filter
	// inited[i] is FilterManager's initialized_ (onNewConnection ran) for
	// filter i; index len(filters) is tcp_proxy.
	inited []bool

	readBuf       httpfilter.Buffer // the connection's read buffer
	readEOF       bool              // read_end_stream_
	readEOFRaised bool
	readDisabled  bool              // tcp_proxy: until the upstream is connected
	writeBuf      httpfilter.Buffer // upstream bytes not yet through the write filters
	upEOF         bool
	downFINSent   bool // end of stream written to the client
	upFINSent     bool // end of stream written to the upstream
	cluster       *cluster
	connecting    bool
	closed        bool

	downCh, upCh chan readChunk
	dialCh       chan dialResult

	// Signals from filters (any goroutine).
	sigMu     sync.Mutex
	continues []int  // filter indexes that asked to continue reading
	closeReq  string // a filter asked to close ("" = no)
	wake      chan struct{}
}

func (l *tcpListener) handle(down net.Conn) {
	ctx, cancel := context.WithCancel(l.ctx)
	c := &tcpConn{
		l: l, down: down, ctx: ctx, cancel: cancel,
		downCh: make(chan readChunk), upCh: make(chan readChunk), dialCh: make(chan dialResult, 1),
		wake: make(chan struct{}, 1),
	}
	defer cancel()
	c.info = httpfilter.StreamInfo{
		ID:              connIDs.Add(1),
		Worker:          int((l.nextWorker.Add(1) - 1) % uint64(max(l.workers, 1))),
		StartTime:       time.Now(),
		SourceAddress:   down.RemoteAddr().String(),
		DestinationAddr: down.LocalAddr().String(),
		ListenerName:    l.cfg.Name,
	}
	c.info.ConnectionID = c.info.ID
	l.cxTotal.Add(1)
	for i, fac := range l.factories {
		f, err := fac.NewNetworkFilter(tcpCallbacks{c: c, index: i})
		if err != nil {
			l.log.Error("tcp listener: network filter", "listener", l.cfg.Name, "filter", l.cfg.NetworkFilters[i].FilterName, "err", err)
			_ = down.Close()
			return
		}
		c.filters = append(c.filters, f)
	}
	c.inited = make([]bool, len(c.filters)+1)
	go c.readLoop(down, c.downCh)
	c.run()
}

// readLoop hands what conn reads to ch until an error (EOF included) or
// the connection's end.
func (c *tcpConn) readLoop(conn net.Conn, ch chan<- readChunk) {
	for {
		buf := make([]byte, 16<<10)
		n, err := conn.Read(buf)
		if n > 0 {
			select {
			case ch <- readChunk{data: buf[:n]}:
			case <-c.ctx.Done():
				return
			}
		}
		if err != nil {
			select {
			case ch <- readChunk{err: err}:
			case <-c.ctx.Done():
			}
			return
		}
	}
}

// run is the connection's event loop: Envoy's initializeReadFilters (every
// filter's onNewConnection until one stops), then reads, upstream events
// and filter signals until the downstream connection is closed.
func (c *tcpConn) run() {
	c.initializeReadFilters()
	for !c.closed {
		if c.handleSignals() {
			continue
		}
		var downCh, upCh chan readChunk
		if !c.readDisabled && !c.readEOF && len(c.readBuf.Bytes) < c.l.cfg.BufferLimit {
			downCh = c.downCh
		}
		if c.up != nil && !c.upEOF && len(c.writeBuf.Bytes) < c.cluster.cfg.BufferLimit {
			upCh = c.upCh
		}
		select {
		case <-c.wake:
		case r := <-downCh:
			c.onDownstreamRead(r)
		case r := <-upCh:
			c.onUpstreamRead(r)
		case d := <-c.dialCh:
			c.onDial(d)
		case <-c.ctx.Done():
			c.closeDownstream(netfilter.CloseLocal, "shutdown")
		}
	}
	if c.up != nil {
		_ = c.up.Close()
	}
	// A dial still in flight: its connection is not wanted any more.
	if c.connecting {
		if d := <-c.dialCh; d.conn != nil {
			_ = d.conn.Close()
		}
	}
}

// handleSignals runs the filters' queued requests; it reports whether it
// ran any.
func (c *tcpConn) handleSignals() bool {
	c.sigMu.Lock()
	conts, closeReq := c.continues, c.closeReq
	c.continues, c.closeReq = nil, ""
	c.sigMu.Unlock()
	if closeReq != "" {
		c.closeDownstream(netfilter.CloseLocal, closeReq)
		return true
	}
	for _, i := range conts {
		if c.closed {
			break
		}
		c.continueReading(i + 1)
	}
	if !c.closed && c.upFINSent && c.upEOF {
		// A continued end of stream reached an upstream that had closed.
		c.upstreamClosed("upstream half-closes done")
	}
	return len(conts) > 0
}

// closeRequested takes a pending Close from a filter: Envoy closes the
// connection in the filter's after-VM-call actions, so iteration stops as
// soon as the filter returns.
func (c *tcpConn) closeRequested() bool {
	c.sigMu.Lock()
	r := c.closeReq
	c.closeReq = ""
	c.sigMu.Unlock()
	if r != "" {
		c.closeDownstream(netfilter.CloseLocal, r)
	}
	return c.closed
}

func (c *tcpConn) initializeReadFilters() {
	for i := range c.inited {
		c.inited[i] = true
		if c.newConnection(i) == netfilter.StopIteration || c.closeRequested() {
			return
		}
	}
}

// continueReading is FilterManagerImpl::onContinueReading from filter
// index start: filters not yet initialized get onNewConnection, then each
// gets the read buffer while there is data or an end of stream.
func (c *tcpConn) continueReading(start int) {
	for i := start; i < len(c.inited) && !c.closed; i++ {
		if !c.inited[i] {
			c.inited[i] = true
			if c.newConnection(i) == netfilter.StopIteration || c.closeRequested() {
				return
			}
		}
		if len(c.readBuf.Bytes) > 0 || c.readEOF {
			if c.onData(i) == netfilter.StopIteration || c.closeRequested() {
				return
			}
		}
	}
}

func (c *tcpConn) newConnection(i int) netfilter.Status {
	if i < len(c.filters) {
		return c.filters[i].OnNewConnection()
	}
	return c.proxyNewConnection()
}

func (c *tcpConn) onData(i int) netfilter.Status {
	if i < len(c.filters) {
		return c.filters[i].OnDownstreamData(&c.readBuf, c.readEOF)
	}
	return c.proxyData()
}

func (c *tcpConn) onDownstreamRead(r readChunk) {
	if len(r.data) > 0 {
		c.l.rxBytes.Add(int64(len(r.data)))
		c.readBuf.Bytes = append(c.readBuf.Bytes, r.data...)
	}
	if r.err != nil {
		if !errors.Is(r.err, io.EOF) {
			c.closeDownstream(netfilter.CloseRemote, "downstream read: "+r.err.Error())
			return
		}
		c.readEOF = true
	}
	// ConnectionImpl::onRead: end of stream is raised once.
	if len(c.readBuf.Bytes) == 0 {
		if !c.readEOF || c.readEOFRaised {
			return
		}
	}
	if c.readEOF {
		c.readEOFRaised = true
	}
	c.continueReading(0)
	if c.closed || !c.readEOF {
		return
	}
	switch {
	case c.downFINSent:
		// Both directions of the client connection are closed: Envoy's
		// read event finds both sides half-closed and closes it as a
		// remote close, before the upstream's close event.
		c.closeDownstream(netfilter.CloseRemote, "downstream half-closes done")
	case c.upFINSent && c.upEOF:
		c.upstreamClosed("upstream half-closes done")
	}
}

// proxyNewConnection is tcp_proxy's onNewConnection: pick the cluster,
// start connecting and stop reading the client until connected.
func (c *tcpConn) proxyNewConnection() netfilter.Status {
	name := c.l.cfg.TCPProxy.Cluster
	cl := c.l.clusters.byName[name]
	if cl == nil {
		c.l.noRoute.Add(1)
		c.l.log.Debug("tcp proxy: no cluster", "listener", c.l.cfg.Name, "cluster", name)
		c.closeDownstream(netfilter.CloseLocal, "no route")
		return netfilter.StopIteration
	}
	c.cluster = cl
	c.info.ClusterName = name
	c.connecting, c.readDisabled = true, true
	ep := cl.pick()
	go func() {
		var conn net.Conn
		var err error
		if cl.cfg.TLS != nil {
			conn, err = cl.dialTLS(c.ctx, "tcp", ep.addr)
		} else {
			conn, err = cl.dial(c.ctx, "tcp", ep.addr)
		}
		c.dialCh <- dialResult{conn, err}
	}()
	return netfilter.StopIteration
}

func (c *tcpConn) onDial(d dialResult) {
	c.connecting = false
	if d.err != nil {
		// max_connect_attempts is 1: the client connection is closed
		// without flushing (onInitFailure).
		c.l.log.Debug("tcp proxy: upstream connect failed", "listener", c.l.cfg.Name, "cluster", c.info.ClusterName, "err", d.err)
		c.closeDownstream(netfilter.CloseLocal, "upstream connect failure")
		return
	}
	c.up = d.conn
	go c.readLoop(d.conn, c.upCh)
	c.readDisabled = false
	// readDisable(false) with bytes already in the read buffer raises a
	// read event: the chain runs from its start.
	if len(c.readBuf.Bytes) > 0 {
		c.continueReading(0)
	}
}

// proxyData is tcp_proxy's onData: forward the read buffer (and the end of
// stream) upstream. It always stops iteration, being the last filter.
func (c *tcpConn) proxyData() netfilter.Status {
	if c.up == nil {
		return netfilter.StopIteration // still connecting: the bytes wait
	}
	if len(c.readBuf.Bytes) > 0 {
		if _, err := c.up.Write(c.readBuf.Bytes); err != nil {
			c.upstreamClosed("upstream write: " + err.Error())
			return netfilter.StopIteration
		}
		c.readBuf.Bytes = c.readBuf.Bytes[:0]
	}
	if c.readEOF && !c.upFINSent {
		c.upFINSent = true
		closeWrite(c.up)
	}
	return netfilter.StopIteration
}

func (c *tcpConn) onUpstreamRead(r readChunk) {
	if len(r.data) > 0 {
		c.writeBuf.Bytes = append(c.writeBuf.Bytes, r.data...)
	}
	if r.err != nil {
		if !errors.Is(r.err, io.EOF) {
			c.upstreamClosed("upstream read: " + r.err.Error())
			return
		}
		c.upEOF = true
	}
	c.write()
	if c.closed || !c.upEOF {
		return
	}
	switch {
	case c.upFINSent:
		// Both directions of the upstream connection are closed: tcp_proxy
		// closes the client connection after flushing.
		c.upstreamClosed("upstream closed")
	case c.readEOF && c.downFINSent:
		c.closeDownstream(netfilter.CloseRemote, "downstream half-closes done")
	}
}

// write passes the upstream's bytes through the write filters (in reverse
// order) and, if none stops, writes them to the client. Bytes a filter
// stopped on stay and come again with the next upstream data.
func (c *tcpConn) write() {
	if len(c.writeBuf.Bytes) == 0 && !c.upEOF {
		return
	}
	for i := len(c.filters) - 1; i >= 0; i-- {
		st := c.filters[i].OnUpstreamData(&c.writeBuf, c.upEOF)
		if c.closeRequested() || st == netfilter.StopIteration {
			return
		}
	}
	if n := len(c.writeBuf.Bytes); n > 0 {
		if _, err := c.down.Write(c.writeBuf.Bytes); err != nil {
			c.closeDownstream(netfilter.CloseRemote, "downstream write: "+err.Error())
			return
		}
		c.l.txBytes.Add(int64(n))
		c.writeBuf.Bytes = c.writeBuf.Bytes[:0]
	}
	if c.upEOF && !c.downFINSent {
		c.downFINSent = true
		closeWrite(c.down)
	}
}

// upstreamClosed is tcp_proxy's upstream close event once connected: the
// client connection is closed after what was written to it.
func (c *tcpConn) upstreamClosed(reason string) {
	c.closeDownstream(netfilter.CloseLocal, reason)
}

// closeDownstream closes the client connection and raises its close event:
// every filter's OnDownstreamClose in order, then tcp_proxy closes the
// upstream connection.
func (c *tcpConn) closeDownstream(peer netfilter.CloseType, reason string) {
	if c.closed {
		return
	}
	c.closed = true
	c.l.log.Debug("tcp connection closed", "listener", c.l.cfg.Name, "connection_id", c.info.ConnectionID, "reason", reason)
	_ = c.down.Close()
	for _, f := range c.filters {
		f.OnDownstreamClose(peer)
	}
	c.cancel()
}

func closeWrite(conn net.Conn) {
	if cw, ok := conn.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
}

// tcpCallbacks is netfilter.Callbacks for filter index of a connection.
type tcpCallbacks struct {
	c     *tcpConn
	index int
}

func (cb tcpCallbacks) signal() {
	select {
	case cb.c.wake <- struct{}{}:
	default:
	}
}

func (cb tcpCallbacks) ContinueReading() {
	cb.c.sigMu.Lock()
	cb.c.continues = append(cb.c.continues, cb.index)
	cb.c.sigMu.Unlock()
	cb.signal()
}

func (cb tcpCallbacks) Close(details string) {
	if details == "" {
		details = "filter close"
	}
	cb.c.sigMu.Lock()
	if cb.c.closeReq == "" {
		cb.c.closeReq = details
	}
	cb.c.sigMu.Unlock()
	cb.signal()
}

func (cb tcpCallbacks) Info() *httpfilter.StreamInfo { return &cb.c.info }
func (cb tcpCallbacks) Context() context.Context     { return cb.c.ctx }
