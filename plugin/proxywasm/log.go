package proxywasm

import (
	"fmt"
	"math"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
	"github.com/chimehq/chime/plugin/proxywasm/internal/hostcall"
)

// logf formats only what the host would keep: formatting a message the
// host drops costs fmt and a copy on every request (docs/performance.md).
// The host's level (proxy_get_log_level) is asked once per tick, so a
// level changed at runtime applies within a tick.
func logf(level abi.LogLevel, format string, args []any) {
	if min, err := hostcall.GetLogLevel(); err == nil && level < min {
		return
	}
	_ = hostcall.Log(level, fmt.Sprintf(format, args...))
}

// LogDebugEnabled reports whether the host keeps debug messages. A hot
// path asks it before LogDebugf: the arguments of a variadic call are
// boxed (allocated) even when the message is then dropped.
func LogDebugEnabled() bool {
	min, err := hostcall.GetLogLevel()
	return err != nil || min <= abi.LogLevelDebug
}

// LogDebugf formats and logs at debug level through the host (proxy_log).
func LogDebugf(format string, args ...any) { logf(abi.LogLevelDebug, format, args) }

// LogInfof formats and logs at info level.
func LogInfof(format string, args ...any) { logf(abi.LogLevelInfo, format, args) }

// LogWarnf formats and logs at warn level.
func LogWarnf(format string, args ...any) { logf(abi.LogLevelWarn, format, args) }

// LogErrorf formats and logs at error level.
func LogErrorf(format string, args ...any) { logf(abi.LogLevelError, format, args) }

// MetricCounter is a monotonically increasing metric the host owns and
// exports (Envoy: the admin's Prometheus endpoint).
type MetricCounter uint32

// DefineCounterMetric defines (or finds) the counter name.
func DefineCounterMetric(name string) (MetricCounter, error) {
	id, err := hostcall.DefineMetric(abi.MetricCounter, name)
	return MetricCounter(id), err
}

// Increment adds delta to the counter.
func (m MetricCounter) Increment(delta uint64) error {
	if delta > math.MaxInt64 {
		return ErrBadArgument
	}
	return hostcall.IncrementMetric(uint32(m), int64(delta))
}
