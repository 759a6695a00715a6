// Package timesource is chime's one injected clock. Every piece of host code
// that reads the time or waits for it takes a [Clock] instead of calling the
// time package, so tests drive it with a [clockwork.FakeClock] (Advance,
// BlockUntilContext) instead of sleeping.
//
// The name avoids host/clock, which is the `clock` tool (docs/clock-tool.md). The
// fake is github.com/jonboulle/clockwork rather than hand-written:
// dependency-free, with Advance, BlockUntilContext (wait until N waits are
// pending, so a test knows a hold is armed) and fake-clock contexts;
// k8s.io/utils/clock/testing has the same model but drags in k8s.io/utils.
//
// # Two kinds of time
//
//   - Host time is what Now returns on the host's clock: the wall clock plus
//     the NTP offset (docs/time.md#time-tag, §6 "time comes from the host", §11). It
//     is what dueAt, expiry, stopMessage timestamps and the time tag compare
//     against. ntp.Tracker.Clock gives that clock, built with [WithOffset].
//   - Waits (After, NewTimer, NewTicker, AfterFunc, Sleep) count a duration
//     on monotonic time. An NTP step or a wall-clock jump neither stretches
//     nor cuts a wait that is under way (docs/timers.md).
//
// Code that waits for an instant of host time converts it to a duration
// once (Until) and waits on that. A long wait must re-arm and convert again,
// so a changed offset is picked up: [WaitUntil] does that in steps of at
// most [MaxStep] (the scheduler's "re-arm at least every 60 s", docs/scheduler.md).
// Timers that wait on a duration (docs/timers.md#waiting) wait with NewTimer
// and keep their remaining time as a duration; pause is Stop plus the
// remaining time, resume is a new timer of that remaining time. Several
// concurrent waits are several timers of the one clock.
package timesource

import (
	"context"
	"time"

	"github.com/jonboulle/clockwork"
)

// Clock is the injected clock: Now, Since, Until, and the waits After,
// Sleep, NewTimer, NewTicker and AfterFunc. Tests pass a
// *clockwork.FakeClock.
type Clock = clockwork.Clock

// Timer is a stoppable, resettable one-shot wait (time.Timer).
type Timer = clockwork.Timer

// Ticker is a periodic wait (time.Ticker).
type Ticker = clockwork.Ticker

// MaxStep is the longest single wait of WaitUntil (docs/scheduler.md: timers re-arm
// at least every 60 s).
const MaxStep = 60 * time.Second

// Real is the process clock: time.Now and the runtime's timers.
func Real() Clock { return clockwork.NewRealClock() }

// OrReal returns c, or Real when c is nil (for zero configs).
func OrReal(c Clock) Clock {
	if c == nil {
		return Real()
	}
	return c
}

// WithOffset is base with offset() added to Now, Since and Until: host time
// (docs/time.md#time-tag = wall clock + ntpOffsetMs). The waits are base's, on
// monotonic time, so a change of offset never moves a wait under way.
func WithOffset(base Clock, offset func() time.Duration) Clock {
	return offsetClock{Clock: base, offset: offset}
}

type offsetClock struct {
	Clock
	offset func() time.Duration
}

func (c offsetClock) Now() time.Time                  { return c.Clock.Now().Add(c.offset()) }
func (c offsetClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c offsetClock) Until(t time.Time) time.Duration { return t.Sub(c.Now()) }

// Wait blocks for d on c, or until ctx ends; then it returns
// context.Cause(ctx). A d <= 0 returns nil at once unless ctx has ended.
func Wait(ctx context.Context, c Clock, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return context.Cause(ctx)
	}
	if d <= 0 {
		return nil
	}
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.Chan():
		return nil
	}
}

// WaitUntil blocks until c.Now() reaches at, or until ctx ends (returning
// context.Cause(ctx)). It waits in steps of at most MaxStep and reads Now
// again after each, so host-time offsets that change meanwhile count.
func WaitUntil(ctx context.Context, c Clock, at time.Time) error {
	for {
		d := c.Until(at)
		if d <= 0 {
			return nil
		}
		if err := Wait(ctx, c, min(d, MaxStep)); err != nil {
			return err
		}
	}
}
