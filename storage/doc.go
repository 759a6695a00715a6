// Package storage is the host's persistent state (SPEC §1, §6, §7, §11):
// sessions, clock tasks, stopMessage state and the NTP state, in one Badger
// v4 database opened with SyncWrites so that a write that returned nil
// survives SIGKILL (SPEC §6 "write-through").
//
// # Key scheme (version 1)
//
// Every key starts with "v1/" so a later layout can live beside this one.
// <sid> is always the output of [SanitizeSessionID]: it never contains "/",
// and every per-session key continues with "/" after it, so a prefix scan
// for one session can never see another's keys ("a" vs "a/b" vs "ab").
//
//	v1/s/<sid>/meta              Session
//	v1/s/<sid>/task/<taskId>     ClockTask            (SPEC §6)
//	v1/s/<sid>/stop              StopMessage          (SPEC §7)
//	v1/s/<sid>/directives        AppliedDirectives    (SPEC §4 applied once)
//	v1/s/<sid>/timer/<id>        reserved: timers     (SPEC §9)
//	v1/s/<sid>/inbox/<seq>       reserved: per-session deliveries (SPEC §10)
//	v1/resv/<rid>                Reservation: request id → reserved task ids
//	v1/ntp                       NTPState             (SPEC §11)
//	v1/job/<id>                  reserved: scheduler jobs (SPEC §10)
//	v1/delivery/<seq>            reserved: delivery queue (SPEC §10)
//	v1/sysevent/<seq>            reserved: system event queue (SPEC §10)
//
// <rid> is a request id passed through the same sanitizer as session ids.
// Values are JSON documents; times are Unix milliseconds.
package storage
