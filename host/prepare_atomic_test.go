package host

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chimehq/chime/hostapi"
	"github.com/chimehq/chime/llm"
)

// fourDirectives is one request's mix: every feature that stages a write.
func fourDirectives() []hostapi.HostDirective {
	return []hostapi.HostDirective{
		{Kind: hostapi.DirectiveStopMessage, Text: "go on", MaxRepeats: 2},
		{Kind: hostapi.DirectiveRoute, Route: "fast"},
		{Kind: hostapi.DirectiveClock, Clock: &llm.ClockItem{DueAt: t0.Add(2 * time.Hour).Format(time.RFC3339), Task: "stretch"}},
		{Kind: hostapi.DirectiveHeartbeat, EveryMs: (30 * time.Minute).Milliseconds()},
	}
}

// appliedState reports which of fourDirectives the session holds, and
// how many digests it has claimed.
func appliedState(t *testing.T, f *fixture, sid string) (applied []string, claimed int) {
	t.Helper()
	st := f.svc.store
	if _, ok, err := st.GetStopMessage(sid); err != nil {
		t.Fatal(err)
	} else if ok {
		applied = append(applied, "stopMessage")
	}
	if sess, ok, err := st.GetSession(sid); err != nil {
		t.Fatal(err)
	} else if ok && sess.Route != "" {
		applied = append(applied, "route")
	}
	if ts, err := st.ListTasks(sid); err != nil {
		t.Fatal(err)
	} else if len(ts) > 0 {
		applied = append(applied, "clock")
	}
	if _, ok, err := f.svc.storedHeartbeat(sid); err != nil {
		t.Fatal(err)
	} else if ok {
		applied = append(applied, "heartbeat")
	}
	ds, err := st.DirectiveDigests(sid)
	if err != nil {
		t.Fatal(err)
	}
	return applied, len(ds)
}

// TestPrepareDirectivesAllOrNone: whichever write of a prepare the disk
// refuses, the request's directives are applied all together with their
// applied-once claims, or none of them and nothing claimed (then a retry
// applies them). Before prepare was atomic, a refusal at the third write
// left the first directive applied and claimed.
func TestPrepareDirectivesAllOrNone(t *testing.T) {
	var writes, failFrom atomic.Int64
	f := newFixture(t, func(c *Config) {
		c.FreeSpace = func(string) (uint64, error) {
			if n := writes.Add(1); failFrom.Load() > 0 && n >= failFrom.Load() {
				return 0, nil // below any headroom: the write is refused
			}
			return 1 << 40, nil
		}
	})
	for k := int64(1); k <= 10; k++ {
		sid := fmt.Sprintf("atomic-%d", k)
		writes.Store(0)
		failFrom.Store(k)
		req := hostapi.PrepareRequest{RequestID: "r-" + sid, SessionID: sid, Directives: fourDirectives()}
		f.prepare(t, req)
		failFrom.Store(0)
		applied, claimed := appliedState(t, f, sid)
		switch {
		case len(applied) == 0 && claimed == 0:
			// none, nothing claimed: the same request applies them all later
			f.prepare(t, req)
			if applied, claimed := appliedState(t, f, sid); len(applied) != 4 || claimed != 4 {
				t.Errorf("refused from write %d, then retried: applied %v, %d claimed; want all 4", k, applied, claimed)
			}
		case len(applied) == 4 && claimed == 4:
		default:
			t.Errorf("disk refused writes from the %d. on: applied %v with %d claimed; want all 4 or none", k, applied, claimed)
		}
	}
}

// TestPrepareStorageFailurePartWay: a storage failure while staging the
// Nth directive undoes the ones before it: none applied, none claimed,
// each counted as an error, and the scheduler not re-armed for the
// heartbeat staged before the failure. The same request applies them all
// once the store works again.
func TestPrepareStorageFailurePartWay(t *testing.T) {
	for n := 1; n < len(fourDirectives()); n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			f := newFixture(t)
			sid := "partway"
			ds := fourDirectives()
			ds[0], ds[3] = ds[3], ds[0] // the heartbeat first: its re-arm must wait for the commit
			f.svc.stageFault = func(i int) error {
				if i == n {
					return fmt.Errorf("storage: put v1/s/%s/x: %w", sid, errors.New("injected write failure"))
				}
				return nil
			}
			req := hostapi.PrepareRequest{RequestID: "r1", SessionID: sid, Directives: ds}
			f.prepare(t, req)
			if applied, claimed := appliedState(t, f, sid); len(applied) != 0 || claimed != 0 {
				t.Fatalf("failure at directive %d: applied %v, %d claimed; want none", n, applied, claimed)
			}
			if _, armed := f.svc.sched.NextHeartbeat(sid); armed {
				t.Fatal("heartbeat armed in the scheduler though its write was undone")
			}
			m := scrape(t, f)
			if got := m[`chime_directive_errors_total{kind="heartbeat"}`] + m[`chime_directive_errors_total{kind="stopMessage"}`] +
				m[`chime_directive_errors_total{kind="route"}`] + m[`chime_directive_errors_total{kind="clock"}`]; got != 4 {
				t.Fatalf("directive errors = %v, want 4", got)
			}
			f.svc.stageFault = nil
			f.prepare(t, req)
			if applied, claimed := appliedState(t, f, sid); len(applied) != 4 || claimed != 4 {
				t.Fatalf("retry: applied %v, %d claimed; want all 4", applied, claimed)
			}
			if _, armed := f.svc.sched.NextHeartbeat(sid); !armed {
				t.Fatal("heartbeat not armed after the commit")
			}
		})
	}
}

// TestPrepareDeadlinePassedAppliesNothing: a prepare served after the
// filter's deadline, or after the filter went away, applies none of its
// directives and claims nothing: the filter failed open and keeps them
// for the session's next prepare, which applies them.
func TestPrepareDeadlinePassedAppliesNothing(t *testing.T) {
	f := newFixture(t)
	late := hostapi.PrepareRequest{RequestID: "late", SessionID: "late", Directives: fourDirectives(),
		DeadlineMs: t0.Add(-deadlineSlack - time.Millisecond).UnixMilli()}
	f.prepare(t, late)
	if applied, claimed := appliedState(t, f, "late"); len(applied) != 0 || claimed != 0 {
		t.Fatalf("late prepare: applied %v, %d claimed; want none", applied, claimed)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f.svc.Prepare(ctx, hostapi.PrepareRequest{RequestID: "gone", SessionID: "gone", Directives: fourDirectives()})
	if applied, claimed := appliedState(t, f, "gone"); len(applied) != 0 || claimed != 0 {
		t.Fatalf("prepare of a filter that went away: applied %v, %d claimed; want none", applied, claimed)
	}
	// The filter sends them kept with the session's next request.
	f.prepare(t, hostapi.PrepareRequest{RequestID: "next", SessionID: "late",
		Kept: []hostapi.KeptDirectives{{RequestID: "late", Directives: fourDirectives()}}})
	if applied, claimed := appliedState(t, f, "late"); len(applied) != 4 || claimed != 4 {
		t.Fatalf("kept copy: applied %v, %d claimed; want all 4", applied, claimed)
	}
	// In time (deadline ahead): applied.
	f.prepare(t, hostapi.PrepareRequest{RequestID: "ok", SessionID: "ok", Directives: fourDirectives(), DeadlineMs: t0.Add(time.Second).UnixMilli()})
	if applied, _ := appliedState(t, f, "ok"); len(applied) != 4 {
		t.Fatalf("prepare in time: applied %v", applied)
	}
}

// TestPrepareBadDirectiveSkipsOnlyItself: a directive refused for its own
// content is skipped and not claimed; the others of its request apply.
func TestPrepareBadDirectiveSkipsOnlyItself(t *testing.T) {
	f := newFixture(t)
	ds := fourDirectives()
	ds[2].Clock.DueAt = "soon" // not a time
	f.prepare(t, hostapi.PrepareRequest{RequestID: "r", SessionID: "s", Directives: ds})
	applied, claimed := appliedState(t, f, "s")
	if fmt.Sprint(applied) != "[stopMessage route heartbeat]" || claimed != 3 {
		t.Fatalf("applied %v, %d claimed; want all but the clock, 3 claimed", applied, claimed)
	}
	if got := scrape(t, f)[`chime_directive_errors_total{kind="clock"}`]; got != 1 {
		t.Fatalf("clock errors = %v", got)
	}
}
