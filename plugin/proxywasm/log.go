package proxywasm

import (
	"fmt"
	"math"

	abi "github.com/chimehq/chime/internal/proxywasmabi"
)

func logAt(level LogLevel, msg string) { host().Log(abi.LogLevel(level), msg) }

// LogTrace logs msg at trace level through the host (proxy_log).
func LogTrace(msg string) { logAt(LogLevelTrace, msg) }

// LogDebug logs msg at debug level.
func LogDebug(msg string) { logAt(LogLevelDebug, msg) }

// LogInfo logs msg at info level.
func LogInfo(msg string) { logAt(LogLevelInfo, msg) }

// LogWarn logs msg at warn level.
func LogWarn(msg string) { logAt(LogLevelWarn, msg) }

// LogError logs msg at error level.
func LogError(msg string) { logAt(LogLevelError, msg) }

// LogCritical logs msg at critical level.
func LogCritical(msg string) { logAt(LogLevelCritical, msg) }

// LogTracef formats and logs at trace level.
func LogTracef(format string, args ...any) { logAt(LogLevelTrace, fmt.Sprintf(format, args...)) }

// LogDebugf formats and logs at debug level.
func LogDebugf(format string, args ...any) { logAt(LogLevelDebug, fmt.Sprintf(format, args...)) }

// LogInfof formats and logs at info level.
func LogInfof(format string, args ...any) { logAt(LogLevelInfo, fmt.Sprintf(format, args...)) }

// LogWarnf formats and logs at warn level.
func LogWarnf(format string, args ...any) { logAt(LogLevelWarn, fmt.Sprintf(format, args...)) }

// LogErrorf formats and logs at error level.
func LogErrorf(format string, args ...any) { logAt(LogLevelError, fmt.Sprintf(format, args...)) }

// LogCriticalf formats and logs at critical level.
func LogCriticalf(format string, args ...any) {
	logAt(LogLevelCritical, fmt.Sprintf(format, args...))
}

// GetLogLevel returns the host's current log level for this plugin, so
// expensive debug output can be skipped.
func GetLogLevel() (LogLevel, error) {
	l, st := host().GetLogLevel()
	return LogLevel(l), statusErr(st)
}

// Metrics (proxy_define_metric and friends). The host owns the values and
// exports them (Envoy: the admin's Prometheus endpoint).

// MetricCounter is a monotonically increasing metric.
type MetricCounter uint32

// MetricGauge is a metric that goes up and down.
type MetricGauge uint32

// MetricHistogram records a distribution of values.
type MetricHistogram uint32

func defineMetric(t abi.MetricType, name string) (uint32, error) {
	id, st := host().DefineMetric(t, name)
	return id, statusErr(st)
}

// DefineCounterMetric defines (or finds) the counter name.
func DefineCounterMetric(name string) (MetricCounter, error) {
	id, err := defineMetric(abi.MetricCounter, name)
	return MetricCounter(id), err
}

// Increment adds delta to the counter.
func (m MetricCounter) Increment(delta uint64) error {
	if delta > math.MaxInt64 {
		return ErrBadArgument
	}
	return statusErr(host().IncrementMetric(uint32(m), int64(delta)))
}

// Value returns the counter's current value.
func (m MetricCounter) Value() (uint64, error) {
	v, st := host().GetMetric(uint32(m))
	return v, statusErr(st)
}

// DefineGaugeMetric defines (or finds) the gauge name.
func DefineGaugeMetric(name string) (MetricGauge, error) {
	id, err := defineMetric(abi.MetricGauge, name)
	return MetricGauge(id), err
}

// Add changes the gauge by delta.
func (m MetricGauge) Add(delta int64) error {
	return statusErr(host().IncrementMetric(uint32(m), delta))
}

// Set sets the gauge to value.
func (m MetricGauge) Set(value int64) error {
	return statusErr(host().RecordMetric(uint32(m), uint64(value)))
}

// Value returns the gauge's current value.
func (m MetricGauge) Value() (int64, error) {
	v, st := host().GetMetric(uint32(m))
	return int64(v), statusErr(st)
}

// DefineHistogramMetric defines (or finds) the histogram name.
func DefineHistogramMetric(name string) (MetricHistogram, error) {
	id, err := defineMetric(abi.MetricHistogram, name)
	return MetricHistogram(id), err
}

// Record adds one observation to the histogram.
func (m MetricHistogram) Record(value uint64) error {
	return statusErr(host().RecordMetric(uint32(m), value))
}
