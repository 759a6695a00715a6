package storage

import "slices"

// Applied-once digests inside a caller's transaction (docs/directives.md):
// the prepare call claims the digests of a request's directives in the
// same transaction that applies them, so a failure undoes both.

// DirectiveClaims is a session's applied-directive digests read once in a
// transaction; Claim adds to it and Save writes it back.
type DirectiveClaims struct {
	sessionID string
	a         AppliedDirectives
	changed   bool
}

// DirectiveClaims reads the session's applied-directive digests.
func (tx *Tx) DirectiveClaims(sessionID string) (*DirectiveClaims, error) {
	a, err := tx.AppliedDirectives(sessionID)
	if err != nil {
		return nil, err
	}
	return &DirectiveClaims{sessionID: sessionID, a: a}, nil
}

// Has reports whether digest is recorded as applied.
func (c *DirectiveClaims) Has(digest string) bool { return slices.Contains(c.a.Digests, digest) }

// Claim records digest as applied (forgetting the oldest past
// MaxDirectiveDigests) and reports whether it was new.
func (c *DirectiveClaims) Claim(digest string) bool {
	if digest == "" || c.Has(digest) {
		return false
	}
	c.a.Digests = append(c.a.Digests, digest)
	if n := len(c.a.Digests) - MaxDirectiveDigests; n > 0 {
		c.a.Digests = slices.Delete(c.a.Digests, 0, n)
	}
	c.changed = true
	return true
}

// Save writes the claims back when Claim added any.
func (c *DirectiveClaims) Save(tx *Tx) error {
	if !c.changed {
		return nil
	}
	return tx.PutAppliedDirectives(c.sessionID, c.a)
}
