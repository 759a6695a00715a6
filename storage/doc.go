// Package storage is the host's persistent state (docs/architecture.md, docs/clock-tool.md, docs/continuation.md, docs/time.md#ntp):
// sessions, clock tasks, stopMessage state and the NTP state, in one Badger
// v4 database opened with SyncWrites so that a write that returned nil
// survives SIGKILL (docs/clock-tool.md "write-through").
//
// # Key scheme (version 1)
//
// Every key starts with "v1/" so a later layout can live beside this one.
// <sid> is always the output of [SanitizeSessionID]: it never contains "/",
// and every per-session key continues with "/" after it, so a prefix scan
// for one session can never see another's keys ("a" vs "a/b" vs "ab").
//
//	v1/s/<sid>/meta              Session
//	v1/s/<sid>/task/<taskId>     ClockTask            (docs/clock-tool.md)
//	v1/s/<sid>/stop              StopMessage          (docs/continuation.md)
//	v1/s/<sid>/directives        AppliedDirectives    (docs/directives.md#applied-once)
//	v1/s/<sid>/timer/<id>        Timer                (docs/timers.md)
//	v1/s/<sid>/job/<id>          CronJob              (docs/cron.md)
//	v1/s/<sid>/heartbeat         Heartbeat            (docs/scheduler.md#heartbeat)
//	v1/s/<sid>/events            EventQueue           (docs/scheduler.md#system-events)
//	v1/s/<sid>/runs              WakeRuns             (docs/scheduler.md#runs)
//	v1/s/<sid>/template          WakeTemplate, no credentials (docs/scheduler.md#templates)
//	v1/s/<sid>/dlv/<id>          Delivery             (docs/delivery.md)
//	v1/s/<sid>/evt/<seq>         SessionEvent: the sse log (docs/delivery.md#sse)
//	v1/dlvq/<seq>                the delivery queue's pending index, in enqueue order
//	v1/dlvseq                    the delivery sequence counter
//	v1/resv/<rid>                Reservation: request id → reserved task ids
//	v1/ntp                       NTPState             (docs/time.md#ntp)
//
// <rid> is a request id passed through the same sanitizer as session ids.
// Values are JSON documents; times are Unix milliseconds.
package storage
