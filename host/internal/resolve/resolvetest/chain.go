// Package resolvetest fakes a resolve.Chain, so that each continuation
// step (server tools, stopMessage, hold, and later timers and wakes) can be
// tested alone, without a proxy or a resolve call.
package resolvetest

import (
	"strconv"

	"github.com/chimehq/chime/host/internal/resolve"
	"github.com/chimehq/chime/internal/timesource"
	"github.com/chimehq/chime/llm"
)

// Chain is a resolve.Chain with every answer set by hand.
type Chain struct {
	T            *llm.Turn
	Session      string
	Request      string
	Server       []string // the server tools
	Stream       bool
	IsCompaction bool
	Hops         int  // followups sent so far: NextID numbers the next one
	AtHopLimit   bool // Guard answers ReasonMaxHops
	Clk          timesource.Clock
	// Proto and Body are the protocol and last request AssignCallIDs
	// derives ids from.
	Proto llm.Protocol
	Body  []byte

	// GuardCalls counts Guard calls; Assigned reports AssignCallIDs.
	GuardCalls int
	Assigned   bool
}

var _ resolve.Chain = (*Chain)(nil)

func (c *Chain) Turn() *llm.Turn       { return c.T }
func (c *Chain) SessionID() string     { return c.Session }
func (c *Chain) RequestID() string     { return c.Request }
func (c *Chain) ServerTools() []string { return c.Server }
func (c *Chain) Streaming() bool       { return c.Stream }
func (c *Chain) Compaction() bool      { return c.IsCompaction }

func (c *Chain) NextID(kind string) string {
	return c.Request + ":" + kind + strconv.Itoa(c.Hops+1)
}

func (c *Chain) AssignCallIDs() {
	c.Assigned = true
	llm.AssignCallIDs(c.Proto, c.Body, c.T)
}

func (c *Chain) Guard() string {
	c.GuardCalls++
	if c.AtHopLimit {
		return resolve.ReasonMaxHops
	}
	return ""
}

// Clock is Clk, or the real clock when it is nil.
func (c *Chain) Clock() timesource.Clock { return timesource.OrReal(c.Clk) }
