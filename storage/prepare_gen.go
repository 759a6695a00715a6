package storage

import "strings"

// Writes that change what a prepare answers (docs/architecture.md#skipping-prepare).
// The host keeps a generation that moves whenever such state changes, so
// a filter that skips prepare for a quiet session learns of it. The store
// is the one place every write passes: a committed transaction that wrote
// a key of that state calls the hook set by SetPrepareChangeHook. The
// rule is conservative: every key counts except those listed in
// quietWrite, which prepare never reads (or reads only on paths that
// always ask the host), and a session record write counts only when it
// changes the route.

// SetPrepareChangeHook sets fn to run after each committed transaction
// that changed state a prepare answer depends on. Call it before use.
func (s *Store) SetPrepareChangeHook(fn func()) { s.prepareChanged = fn }

// quietWrite reports whether a write of key leaves every prepare answer
// unchanged.
func quietWrite(key []byte) bool {
	k := string(key)
	if !strings.HasPrefix(k, sessionPrefix) {
		// Reservations (their tasks are written too), NTP state, the
		// delivery queue and its sequence, the generation mark.
		return true
	}
	rest := k[len(sessionPrefix):]
	i := strings.IndexByte(rest, '/')
	if i < 0 {
		return false
	}
	switch rec := rest[i+1:]; {
	case rec == metaSuffix: // PutSession notes a route change itself
		return true
	case rec == dirsSuffix, // applied-once digests: only prepares with directives
		rec == eventsSuffix, rec == runsSuffix, rec == templateSuffix, // drained by wakes
		strings.HasPrefix(rec, deliverySegment), strings.HasPrefix(rec, eventSegment):
		// Deliveries to the session itself arrive as tasks (away_*).
		return true
	}
	return false
}

// noteWrite marks the transaction as changing prepare state unless key is quiet.
func (tx *Tx) noteWrite(key []byte) {
	if !tx.prepareChanged && !quietWrite(key) {
		tx.prepareChanged = true
	}
}
