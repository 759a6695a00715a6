// Package proxywasm is chime's own proxy-wasm ABI v0.2.1 guest layer for the
// standard Go toolchain (GOOS=wasip1, -buildmode=c-shared), shaped like the
// proxy-wasm Go SDK (docs/architecture.md: the filter talks to Envoy only through this
// ABI).
//
// A plugin calls SetVMContext from an init function; the host then drives
// the VMContext → PluginContext → HttpContext callbacks. Everything is
// callback-driven: released Envoy 1.33–1.38 answer WASI poll_oneoff with
// ENOSYS and the Go runtime calls it whenever it would sleep, so guest code
// must never block (no time.Sleep, timers, channel waits or file I/O). Use
// DispatchHttpCall with a callback and SetTickPeriodMilliSeconds instead.
//
// The exported API is what an HTTP filter needs: the contexts and their
// callbacks, header, body and property access, local responses, HTTP
// calls, the tick, counters and logging. The rest of the ABI (trailers
// editing, shared data and queues, gauges and histograms, foreign
// functions) is bound in internal packages and not exported.
//
// Outside wasm the package compiles with no host; tests install the
// in-memory host from package proxytest.
package proxywasm

import (
	"fmt"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/proxywasm/internal/hostcall"
)

// Action is what a stream callback tells the host to do next.
type Action uint32

const (
	// ActionContinue lets the host forward the headers, body or trailers.
	ActionContinue = Action(abi.ActionContinue)
	// ActionPause stops forwarding. From headers it stops the whole stream;
	// from a body callback it makes the host buffer the body, so the next
	// body callback sees everything received so far. Resume with
	// ResumeHttpRequest / ResumeHttpResponse.
	ActionPause = Action(abi.ActionPause)
)

func (a Action) String() string {
	switch a {
	case ActionContinue:
		return "Continue"
	case ActionPause:
		return "Pause"
	}
	return fmt.Sprintf("Action(%d)", uint32(a))
}

// Status is a non-OK proxy_status_t returned by a host function. It is an
// error; compare with errors.Is(err, ErrNotFound) or ==.
type Status = hostcall.Status

// Host statuses (proxy_status_t) as errors.
const (
	ErrNotFound             = hostcall.ErrNotFound
	ErrBadArgument          = hostcall.ErrBadArgument
	ErrSerializationFailure = hostcall.ErrSerializationFailure
	ErrParseFailure         = hostcall.ErrParseFailure
	ErrInvalidMemoryAccess  = hostcall.ErrInvalidMemoryAccess
	ErrEmpty                = hostcall.ErrEmpty
	ErrCasMismatch          = hostcall.ErrCasMismatch
	ErrInternalFailure      = hostcall.ErrInternalFailure
	ErrUnimplemented        = hostcall.ErrUnimplemented
)

// LogLevel is proxy_log_level_t.
type LogLevel uint32

// Log levels, lowest first.
const (
	LogLevelTrace    = LogLevel(abi.LogLevelTrace)
	LogLevelDebug    = LogLevel(abi.LogLevelDebug)
	LogLevelInfo     = LogLevel(abi.LogLevelInfo)
	LogLevelWarn     = LogLevel(abi.LogLevelWarn)
	LogLevelError    = LogLevel(abi.LogLevelError)
	LogLevelCritical = LogLevel(abi.LogLevelCritical)
)

func (l LogLevel) String() string {
	switch l {
	case LogLevelTrace:
		return "trace"
	case LogLevelDebug:
		return "debug"
	case LogLevelInfo:
		return "info"
	case LogLevelWarn:
		return "warn"
	case LogLevelError:
		return "error"
	case LogLevelCritical:
		return "critical"
	}
	return fmt.Sprintf("LogLevel(%d)", uint32(l))
}
