// Package directive is what the host's features share to stage a
// directive inside the prepare call's one transaction
// (docs/directives.md#applied-once): a rejection marker that tells bad
// input, which skips that one directive, from a storage failure, which
// undoes every directive of the request.
package directive

import (
	"errors"
	"fmt"
)

// rejected is a directive refused for its own content. A Stage function
// returns one only before it has written anything to the transaction.
type rejected struct{ err error }

func (r *rejected) Error() string { return r.err.Error() }
func (r *rejected) Unwrap() error { return r.err }

// Reject marks err as the directive's own fault; nil stays nil.
func Reject(err error) error {
	if err == nil {
		return nil
	}
	return &rejected{err}
}

// Rejectf is Reject(fmt.Errorf(format, a...)).
func Rejectf(format string, a ...any) error { return Reject(fmt.Errorf(format, a...)) }

// IsRejected reports whether err refuses the directive itself, so the
// other directives of its request may still be applied. Any other error
// from a Stage function aborts the request's transaction.
func IsRejected(err error) bool {
	var r *rejected
	return errors.As(err, &r)
}
