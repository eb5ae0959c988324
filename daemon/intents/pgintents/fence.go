package pgintents

import (
	"context"
	"fmt"

	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// An owner's intents move with its records (a pod's principal moved to
// another pod): pgstore fences the owner's scope on the database they
// left. A replica that has not yet learned of the move must not answer
// from it, nor write to it. Inside a request's unit of work, its claim
// has already checked the fence, and holds the fence lock until it
// commits; outside one, the checks below do.

// ScopedTables are the intents' tables, by the column naming the owner:
// what a move of an owner to another database copies with its records.
var ScopedTables = map[string]string{"payment_intents": "owner"}

// readHere refuses what a read of owner's intents found, if owner is
// fenced here. It runs after the read: a fence is written before the
// moved rows are deleted, so a read that saw them gone sees the fence.
func (s *Store) readHere(ctx context.Context, q pgstore.Querier, owner string) error {
	if s.db.Joins(ctx) {
		return nil
	}
	var fenced bool
	if err := q.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM idempotency_fences WHERE scope = $1)`, owner).Scan(&fenced); err != nil {
		return fmt.Errorf("intents of %q: reading the fence: %w", owner, err)
	}
	if fenced {
		return moved(owner)
	}
	return nil
}

// writeHere refuses a write of owner's intents if owner is fenced here, or
// being fenced. It holds the fence lock shared until the write commits,
// as a claim does, so that a fence waits for it.
func (s *Store) writeHere(ctx context.Context, q pgstore.Querier, owner string) error {
	if s.db.Joins(ctx) {
		return nil
	}
	var granted bool
	if err := q.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock_shared($1)`, pgstore.FenceLock(owner)).Scan(&granted); err != nil {
		return fmt.Errorf("intents of %q: the fence lock: %w", owner, err)
	}
	if !granted {
		return moved(owner)
	}
	return s.readHere(ctx, q, owner)
}

// moved is the refusal of a fenced owner: retried, it goes where the
// owner lives now.
func moved(owner string) error {
	return &storage.ScopeUnavailableError{Scope: owner, Why: "moved to another database", RetryAfter: pgstore.FenceRetry}
}
