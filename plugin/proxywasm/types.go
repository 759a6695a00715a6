// Package proxywasm is chime's own proxy-wasm ABI v0.2.1 guest layer for the
// standard Go toolchain (GOOS=wasip1, -buildmode=c-shared), shaped like the
// proxy-wasm Go SDK (SPEC §1: the filter talks to Envoy only through this
// ABI).
//
// A plugin calls SetVMContext from an init function; the host then drives
// the VMContext → PluginContext → HttpContext callbacks. Everything is
// callback-driven: released Envoy 1.33–1.38 answer WASI poll_oneoff with
// ENOSYS and the Go runtime calls it whenever it would sleep, so guest code
// must never block (no time.Sleep, timers, channel waits or file I/O). Use
// DispatchHttpCall with a callback and SetTickPeriodMilliSeconds instead.
//
// Outside wasm the package compiles with no host; tests install the
// in-memory host from package proxytest.
package proxywasm

import (
	"fmt"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
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
type Status uint32

// Host statuses (proxy_status_t) as errors.
const (
	ErrNotFound             Status = Status(abi.StatusNotFound)
	ErrBadArgument          Status = Status(abi.StatusBadArgument)
	ErrSerializationFailure Status = Status(abi.StatusSerializationFailure)
	ErrParseFailure         Status = Status(abi.StatusParseFailure)
	ErrInvalidMemoryAccess  Status = Status(abi.StatusInvalidMemoryAccess)
	ErrEmpty                Status = Status(abi.StatusEmpty)
	ErrCasMismatch          Status = Status(abi.StatusCasMismatch)
	ErrInternalFailure      Status = Status(abi.StatusInternalFailure)
	ErrUnimplemented        Status = Status(abi.StatusUnimplemented)
)

func (s Status) Error() string {
	switch s {
	case ErrNotFound:
		return "proxy-wasm: not found"
	case ErrBadArgument:
		return "proxy-wasm: bad argument"
	case ErrSerializationFailure:
		return "proxy-wasm: serialization failure"
	case ErrParseFailure:
		return "proxy-wasm: parse failure"
	case ErrInvalidMemoryAccess:
		return "proxy-wasm: invalid memory access"
	case ErrEmpty:
		return "proxy-wasm: empty"
	case ErrCasMismatch:
		return "proxy-wasm: CAS mismatch"
	case ErrInternalFailure:
		return "proxy-wasm: internal failure"
	case ErrUnimplemented:
		return "proxy-wasm: unimplemented"
	}
	return fmt.Sprintf("proxy-wasm: status %d", uint32(s))
}

// statusErr maps a raw proxy_status_t to nil or a Status error.
func statusErr(s abi.Status) error {
	if s == abi.StatusOK {
		return nil
	}
	return Status(s)
}

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
