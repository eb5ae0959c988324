package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// selectFence reads whether a scope is fenced: a statement of its own,
// after the lock statement, so that its snapshot is taken with the fence
// lock held (see lockAndRead).
const selectFence = `SELECT EXISTS (SELECT 1 FROM idempotency_fences WHERE scope = $1)`

// FenceRetry is the retry delay of a claim refused by a fence: by then the
// directory that routes the caller has most likely learned where the
// scope lives.
const FenceRetry = time.Second

// ScopedTables are pgstore's tables whose rows each belong to one scope,
// by the column that names it: what a move of a scope to another database
// copies. The fences are not: each database keeps its own.
var ScopedTables = map[string]string{"idempotency_records": "scope", "idempotency_releases": "scope"}

// FenceLock is the advisory lock, a bigint, of a scope's fence. Every
// claim holds it shared from its look to its commit, and Fence takes it
// exclusive. It is the first 8 bytes of the SHA-256 of "fence", a zero
// byte and the scope. In pg_locks it is a row of locktype 'advisory'.
func FenceLock(scope string) int64 {
	h := sha256.Sum256([]byte("fence\x00" + scope))
	return int64(binary.BigEndian.Uint64(h[:8]))
}

// Fence closes scope on db, for a move of its records to another
// database: from its return, no claim of the scope is taken here and no
// durable claim of it completed, each refused with a
// storage.ScopeUnavailableError. It first waits for the claims of the
// scope in progress to commit or roll back, as long as ctx allows; new
// claims are refused meanwhile. Fencing a fenced scope again only
// replaces its note. Records already stored stay, readable, until the
// mover deletes them.
func (db *DB) Fence(ctx context.Context, scope, note string) error {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return db.noteFailure(err)
	}
	lock := FenceLock(scope)
	// A session lock: the connection is closed on any failure, which
	// releases it, rather than returned to the pool holding it.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lock); err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx))
		conn.Release()
		return fmt.Errorf("pgstore: waiting for the claims of %q in progress: %w", scope, err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO idempotency_fences (scope, note) VALUES ($1, $2)
		ON CONFLICT (scope) DO UPDATE SET note = excluded.note`, scope, note)
	if err == nil {
		err = db.commitOn(ctx, conn, proveReadSQL) // the fence is on the synchronous standby too
	}
	if _, unlockErr := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, lock); err == nil && unlockErr != nil {
		err = unlockErr
	}
	if err != nil {
		conn.Conn().Close(context.WithoutCancel(ctx))
	}
	conn.Release()
	return db.noteFailure(err)
}

// Unfence opens scope on db again, once it lives here: the target of a
// move, or a source whose move was undone.
func (db *DB) Unfence(ctx context.Context, scope string) error {
	_, err := db.pool.Exec(ctx, `DELETE FROM idempotency_fences WHERE scope = $1`, scope)
	return db.noteFailure(err)
}

// Fenced reports whether scope is fenced on db, and its note.
func (db *DB) Fenced(ctx context.Context, scope string) (bool, string, error) {
	var note string
	err := db.pool.QueryRow(ctx, `SELECT note FROM idempotency_fences WHERE scope = $1`, scope).Scan(&note)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, "", nil
	}
	return err == nil, note, db.noteFailure(err)
}
