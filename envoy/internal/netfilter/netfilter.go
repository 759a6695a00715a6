// Package netfilter is the contract between a TCP listener's connection
// (envoy/internal/proxy, which runs tcp_proxy) and the network filters
// before it (the wasm network filter in envoy/internal/wasmhost). It
// follows Envoy's Network::ReadFilter / WriteFilter model:
//
//   - Filter methods are called from the connection's own goroutine, one at
//     a time, in Envoy's order: read filters in config order, write
//     filters (data from the upstream) in reverse order.
//   - Callbacks are signals: ContinueReading and Close may be called from
//     any goroutine (a tick, an http_call response) and only enqueue work
//     the connection goroutine does after the current filter call returns.
package netfilter

import (
	"context"

	"github.com/chimehq/chime/envoy/internal/httpfilter"
)

// Status is Network::FilterStatus.
type Status int

const (
	// Continue passes the data (or the new connection) to the next filter.
	Continue Status = iota
	// StopIteration stops here. Data a read filter stopped on stays in the
	// connection's read buffer and is presented again, with what arrives
	// next, on the next read; ContinueReading resumes with the next filter.
	StopIteration
)

// CloseType is the peer that closed the downstream connection, as the
// wasm filter reports it (proxy-wasm PeerType).
type CloseType int

const (
	CloseUnknown CloseType = 0
	CloseLocal   CloseType = 1 // the proxy closed it (tcp_proxy, a filter)
	CloseRemote  CloseType = 2 // the client closed it (or reset it)
)

// Filter is one network filter instance bound to one downstream connection.
type Filter interface {
	// OnNewConnection is ReadFilter::onNewConnection, called once before
	// any data.
	OnNewConnection() Status
	// OnDownstreamData is ReadFilter::onData: buf is the connection's read
	// buffer (everything not yet passed on); the filter may edit it.
	OnDownstreamData(buf *httpfilter.Buffer, endStream bool) Status
	// OnUpstreamData is WriteFilter::onWrite: bytes about to be written to
	// the client (received from the upstream).
	OnUpstreamData(buf *httpfilter.Buffer, endStream bool) Status
	// OnDownstreamClose is the connection's close event. It is the last
	// call; the filter releases its state in it.
	OnDownstreamClose(peer CloseType)
}

// Callbacks is what a filter may ask of its connection. All methods are
// safe from any goroutine and never call back into a Filter before
// returning.
type Callbacks interface {
	// ContinueReading resumes read filter iteration after this filter
	// (ReadFilterCallbacks::continueReading).
	ContinueReading()
	// Close closes the downstream connection after writing what is
	// already queued for it (ConnectionCloseType::FlushWrite); details is
	// the reason, for logs.
	Close(details string)
	// Info describes the connection (addresses, listener, connection id,
	// worker); valid for the connection's lifetime.
	Info() *httpfilter.StreamInfo
	// Context is cancelled when the connection is closed.
	Context() context.Context
}

// Factory creates one Filter per downstream connection.
type Factory interface {
	NewNetworkFilter(cb Callbacks) (Filter, error)
	Close() error
}
