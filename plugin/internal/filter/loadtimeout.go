package filter

// Load-scaled prepare timeout (docs/failures.md#overload). A burst of
// requests reaches the host as a burst of prepare calls, which the host
// answers in order, group-committed: the last of them waits for those
// before it. A fixed timeout fails that tail open although the host
// serves it; a timeout that grows with the calls this worker has in
// flight lets it through, up to prepareTimeoutMaxMs, so a host that does
// not answer still costs a request no more than that.

// prepareCallsPerStep is how many prepare calls in flight add one more
// prepareTimeoutMs to the timeout of the next call (in proportion: 4 add
// half of it).
const prepareCallsPerStep = 8

// prepareTimeoutMs is the timeout of a prepare call sent now:
// prepareTimeoutMs × (1 + inFlight/8), at most prepareTimeoutMaxMs (and
// never below prepareTimeoutMs).
func (p *pluginContext) prepareTimeoutMs() int64 {
	base := p.cfg.PrepareTimeoutMs
	t := base + base*int64(p.preparesInFlight)/prepareCallsPerStep
	return max(min(t, p.cfg.PrepareTimeoutMaxMs), base)
}
