package resolve

import (
	"context"
	"errors"
	"log/slog"
	"time"
)

// KindHold is the followup kind of a hold.
const KindHold = "hold"

// DefaultHoldMax is holdMaxMs (docs/continuation.md#holds).
const DefaultHoldMax = 60 * time.Second

// Hold outcomes (holds_total label).
const (
	HoldCommitted  = "committed"   // the followup got 2xx: reminders delivered
	HoldRolledBack = "rolled_back" // the followup failed: reminders released
	HoldCancelled  = "cancelled"   // the chain was cancelled while holding or sending
	HoldEmpty      = "empty"       // nothing left to reserve once due
)

// Reminders is the clock engine as holds use it (docs/clock-tool.md, docs/continuation.md#holds).
type Reminders interface {
	// NextDue is when the session's next task becomes injectable into requestID.
	NextDue(ctx context.Context, sessionID, requestID string) (time.Time, bool)
	// Reserve reserves the due reminders for requestID and renders them ("" when none).
	Reserve(ctx context.Context, sessionID, requestID string, now time.Time) (string, error)
	Commit(ctx context.Context, requestID string) (int, error)
	Rollback(ctx context.Context, requestID string) (int, error)
}

// HoldConfig wires the hold step. Reminders is required.
type HoldConfig struct {
	Reminders Reminders
	// Max is holdMaxMs: hold only for a task due within it (default
	// DefaultHoldMax).
	Max time.Duration
	// NoNonStreaming is holdNonStreaming=false: no holds for JSON clients.
	NoNonStreaming bool
	// Count counts holds by outcome (Hold*); nil counts nothing.
	Count  func(outcome string)
	Logger *slog.Logger
}

// holdStep waits for the session's next task when it comes due within
// Max and follows up with its reminder (docs/continuation.md#holds); last in docs/continuation.md's
// priority, so it applies only when stopMessage did not trigger.
type holdStep struct {
	cfg HoldConfig
	log *slog.Logger
}

// NewHoldStep checks cfg and fills its defaults.
func NewHoldStep(cfg HoldConfig) (Step, error) {
	if cfg.Reminders == nil {
		return nil, errors.New("resolve: the hold step needs Reminders")
	}
	setDefault(&cfg.Max, DefaultHoldMax)
	if cfg.Count == nil {
		cfg.Count = func(string) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &holdStep{cfg: cfg, log: cfg.Logger}, nil
}

func (*holdStep) Kind() string { return KindHold }

// Next holds a turn that ended with stop or length when a task comes due
// within Max: it waits on the chain's clock (monotonic: an NTP step does
// not move it), reserves the reminders for the followup's id, and returns
// the followup, whose Settle commits or rolls back the reservation.
func (s *holdStep) Next(ctx context.Context, c Chain) (Followup, bool, string) {
	if _, ok := Continuable(c); !ok || (!c.Streaming() && s.cfg.NoNonStreaming) {
		return Followup{}, false, ""
	}
	id := c.NextID(KindHold)
	due, ok := s.cfg.Reminders.NextDue(ctx, c.SessionID(), id)
	if !ok {
		return Followup{}, false, ""
	}
	clk := c.Clock()
	wait := due.Sub(clk.Now())
	if wait > s.cfg.Max {
		return Followup{}, false, ""
	}
	if reason := c.Guard(); reason != "" {
		return Followup{}, false, reason
	}
	if wait > 0 {
		s.log.Debug("holding for a due task", "request", c.RequestID(), "wait", wait)
		t := clk.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			s.cfg.Count(HoldCancelled)
			return Followup{}, false, Stopped(ctx)
		case <-t.Chan():
		}
	}
	text, err := s.cfg.Reminders.Reserve(ctx, c.SessionID(), id, clk.Now())
	if err != nil {
		s.log.Warn("hold: reserving reminders failed", "request", c.RequestID(), "err", err)
	}
	if text == "" {
		s.cfg.Count(HoldEmpty)
		return Followup{}, false, ReasonDone
	}
	return Followup{ID: id, UserText: text, Settle: func(o Outcome) { s.settle(ctx, id, o) }}, true, ""
}

// settle commits the reservation of a delivered followup and rolls it back
// otherwise, whatever the chain's context says.
func (s *holdStep) settle(ctx context.Context, id string, o Outcome) {
	if o == Failed && ctx.Err() != nil {
		s.cfg.Count(HoldCancelled)
	}
	bg := context.WithoutCancel(ctx)
	var err error
	if o == Delivered {
		_, err = s.cfg.Reminders.Commit(bg, id)
		s.cfg.Count(HoldCommitted)
	} else {
		_, err = s.cfg.Reminders.Rollback(bg, id)
		if ctx.Err() == nil {
			s.cfg.Count(HoldRolledBack)
		}
	}
	if err != nil {
		s.log.Warn("hold: finishing the reservation failed", "request", id, "commit", o == Delivered, "err", err)
	}
}
