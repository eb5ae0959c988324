package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Health returns the last probe's finding. It is nil while the database
// answers, and writes again after a write failed because it could not.
func (db *DB) Health() error {
	db.mu.Lock()
	defer db.mu.Unlock()
	return db.health
}

// Probe checks that the database answers and that its user may read and
// write the tables. They are this store's table and tables: others the
// embedder's requests write, named as its statements name them. Probe
// records the finding for Health and returns it. A table renamed, dropped
// or out of the user's reach fails every request while the database itself
// answers. A probe that finds the database unreachable ends the
// connections held. They may lead to a server that went silent (see
// dropConnections).
//
// Once a write has failed because the database cannot write (a full disk,
// a read-only server), Probe writes too, until that succeeds. A full disk
// leaves reads working, so reads alone would report it healthy.
//
// Probe also commits a transaction that waits for the synchronous standby,
// when the server has one configured (see probeStandby). A server whose
// commits are not confirmed serves nothing that may be acknowledged: an
// old primary left running after a failover, or one whose only standby is
// down.
func (db *DB) Probe(ctx context.Context, tables ...string) error {
	tables = append([]string{"idempotency_records"}, tables...)
	var writable *bool
	err := db.pool.QueryRow(ctx, `SELECT bool_and(has_table_privilege(t, 'SELECT, INSERT, UPDATE, DELETE')) FROM unnest($1::text[]) AS t`,
		tables).Scan(&writable)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		err = fmt.Errorf("pgstore: the database answers, but not for its tables: %w", err)
	case err != nil:
		err = fmt.Errorf("pgstore: database unreachable: %w", err)
		db.dropConnections()
	case writable == nil || !*writable:
		err = fmt.Errorf("pgstore: the database user may not read and write the tables %v", tables)
	default:
		err = db.probeWrite(ctx)
		if err == nil {
			err = db.probeStandby(ctx)
		}
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	db.health = err
	return err
}

// cannotWrite reports whether err says the database cannot write, whatever
// the statement: no disk, memory or connection to spare (class 53, such as
// disk_full 53100), a failing disk (class 58, such as io_error 58030), or a
// read-only server (read_only_sql_transaction 25006: a hot standby, or
// default_transaction_read_only). A client's bad input, a conflict, a lock
// wait or a lost connection is none of these. Such an error only makes the
// next probes write. Their write decides health.
func cannotWrite(err error) bool {
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) {
		return false
	}
	return strings.HasPrefix(pgErr.Code, "53") || strings.HasPrefix(pgErr.Code, "58") || pgErr.Code == readOnly
}

// readOnly is the SQLSTATE of a write refused by a read-only transaction.
const readOnly = "25006"

// noteFailure returns err, the outcome of a request's statements. It notes
// err first if err says the database cannot write. Probe then writes too.
func (db *DB) noteFailure(err error) error {
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == readOnly {
		db.noteReadOnly()
	}
	if cannotWrite(err) {
		db.mu.Lock()
		db.writeFailed = err
		db.writeFailures++
		db.mu.Unlock()
	}
	return err
}

// probeWriteSQL fails where a request's write fails for want of a disk or
// of a writable server, and changes nothing. Its transaction is rolled back.
// The UPDATE matches no row, but a read-only transaction refuses it all the
// same. The sort spills about 70 KB to a temporary file in the database's
// default tablespace. On a full disk that write fails, as a table's growth
// does (disk_full). A committed UPDATE of a stored row would not fail
// there: it rewrites a page the table holds, and its WAL goes to a segment
// already written.
const probeWriteSQL = `SET LOCAL temp_tablespaces = '';
SET LOCAL work_mem = '64kB';
UPDATE idempotency_records SET key = key WHERE false;
SELECT count(*) FROM (SELECT g FROM generate_series(1, 5000) AS g ORDER BY g DESC) AS sorted`

// errProbed ends the write probe's transaction, which then rolls back.
var errProbed = errors.New("pgstore: write probe done")

// probeWrite writes, once a write failed because the database could not
// (noteFailure). Until then it costs nothing. It clears that failure once it
// succeeds, unless another was noted meanwhile. A read-only server may be a
// standby that pooled connections still reach after a failover. They are
// ended, so that new ones find the primary.
func (db *DB) probeWrite(ctx context.Context) error {
	db.mu.Lock()
	failed, seen := db.writeFailed, db.writeFailures
	db.mu.Unlock()
	if failed == nil {
		return nil
	}
	err := pgx.BeginTxFunc(ctx, db.pool, readCommitted, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, probeWriteSQL); err != nil {
			return err
		}
		return errProbed
	})
	if errors.Is(err, errProbed) {
		db.mu.Lock()
		if db.writeFailures == seen {
			db.writeFailed = nil
		}
		db.mu.Unlock()
		return nil
	}
	if pgErr := (*pgconn.PgError)(nil); errors.As(err, &pgErr) && pgErr.Code == readOnly {
		db.dropConnections()
	}
	return fmt.Errorf("pgstore: the database cannot write: %w", err)
}
