package storage

import (
	"errors"
	"fmt"
	"time"
)

// ErrScopeUnavailable, wrapped in a store's error, says that one scope
// cannot be served right now while others can: a store that spreads
// scopes over several databases cannot reach the scope's, or the scope is
// being moved. Nothing was claimed or stored. The caller is told
// UNAVAILABLE with a retry delay, and to retry with the same key.
var ErrScopeUnavailable = errors.New("idempotency: scope unavailable")

// ScopeUnavailableError is a store's error wrapping ErrScopeUnavailable.
type ScopeUnavailableError struct {
	Scope string
	// Why says what keeps the scope away, for the log and the caller:
	// "moving", say, or "database unreachable". It never holds a secret.
	Why string
	// RetryAfter is when a retry may succeed; zero leaves it to the
	// caller's default.
	RetryAfter time.Duration
	// Err is the cause, if any. It goes to the log, never to the caller.
	Err error
}

func (e *ScopeUnavailableError) Error() string {
	msg := fmt.Sprintf("scope %q unavailable: %s", e.Scope, e.Why)
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns ErrScopeUnavailable and the cause.
func (e *ScopeUnavailableError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrScopeUnavailable}
	}
	return []error{ErrScopeUnavailable, e.Err}
}

// RetryDelay is RetryAfter.
func (e *ScopeUnavailableError) RetryDelay() time.Duration { return e.RetryAfter }
