package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// Probe fails while the store's table, or another named, is missing,
// although the database answers, and passes again once it is back.
func TestProbe_TableMissing_Fails(t *testing.T) {
	db := open(t, fresh("probe_tables"), nil)
	ctx := context.Background()
	if err := db.Probe(ctx); err != nil {
		t.Fatalf("Probe of a migrated database: %v", err)
	}
	if err := db.Probe(ctx, "no_such_table"); err == nil || !strings.Contains(err.Error(), "not for its tables") {
		t.Errorf("Probe naming a missing table: %v", err)
	}
	exec := func(sql string) {
		if _, err := db.Pool().Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec(`ALTER TABLE idempotency_records RENAME TO idempotency_records_moved`)
	if err := db.Probe(ctx); err == nil || !strings.Contains(err.Error(), "idempotency_records") || db.Health() == nil {
		t.Errorf("Probe with the table renamed: %v (Health %v)", err, db.Health())
	}
	exec(`ALTER TABLE idempotency_records_moved RENAME TO idempotency_records`)
	if err := db.Probe(ctx); err != nil || db.Health() != nil {
		t.Errorf("Probe with the table back: %v", err)
	}
}

// CountRecords is the database's estimate, which follows the rows as
// they are written, without counting the table.
func TestCountRecords_FollowsTheRows(t *testing.T) {
	db := open(t, fresh("count_estimate"), nil)
	ctx := context.Background()
	for i := range 300 {
		claim(t, db, request(fmt.Sprintf("k-%d", i), time.Now()), storage.OutcomeFresh)
	}
	deadline := time.Now().Add(10 * time.Second) // the statistics are flushed within a second or so
	for {
		n, err := db.CountRecords(ctx)
		if err == nil && n == 300 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CountRecords = %d, %v; want 300", n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Only errors that say the database cannot write make Probe write: no
// disk, memory or connection to spare, a failing disk, a read-only server.
// A client's bad input, a conflict, a lock wait, a lost connection or an
// error of paymentsd's own never do.
func TestCannotWrite_ClassifiesSQLSTATE(t *testing.T) {
	pg := func(code string) error { return &pgconn.PgError{Severity: "ERROR", Code: code} }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"disk_full", pg("53100"), true},
		{"disk_full, wrapped by a handler", fmt.Errorf("create intent pi_1: %w", pg("53100")), true},
		{"insufficient_resources", pg("53000"), true},
		{"out_of_memory", pg("53200"), true},
		{"too_many_connections", pg("53300"), true},
		{"io_error", pg("58030"), true},
		{"undefined_file", pg("58P01"), true},
		{"read_only_sql_transaction", pg("25006"), true},
		{"unique_violation", pg("23505"), false},
		{"invalid_text_representation", pg("22P02"), false},
		{"string_data_right_truncation", pg("22001"), false},
		{"program_limit_exceeded (a value too long for an index)", pg("54000"), false},
		{"serialization_failure", pg("40001"), false},
		{"deadlock_detected", pg("40P01"), false},
		{"lock_not_available", pg("55P03"), false},
		{"query_canceled", pg("57014"), false},
		{"in_failed_sql_transaction", pg("25P02"), false},
		{"admin_shutdown", pg("57P01"), false},
		{"connection_failure", pg("08006"), false},
		{"a claim superseded (PI001)", pg("PI001"), false},
		{"nil", nil, false},
		{"not PostgreSQL's", errors.New("no space left on device"), false},
		{"a deadline", context.DeadlineExceeded, false},
		{"superseded", storage.ErrSuperseded, false},
	} {
		if got := pgstore.CannotWrite(c.err); got != c.want {
			t.Errorf("%s (%v): %t, want %t", c.name, c.err, got, c.want)
		}
	}
}

// A database that refuses writes (here default_transaction_read_only, as
// on a hot standby) fails Probe once a write failed for it. Probe then
// writes at each call, and passes once writes succeed again, with no
// reopening. Errors of the statements themselves never make it write: the
// database is read-only then too, yet Probe passes.
func TestProbe_ReadOnlyDatabase_FailsAfterAWriteFailedUntilWritable(t *testing.T) {
	name := fresh("probe_read_only")
	db := open(t, name, nil)
	conn := pgtest.Connect(t, pgtest.Require(t, cluster).NewDatabase(t, name))
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	database := pgx.Identifier{name}.Sanitize()
	exec(`ALTER DATABASE ` + database + ` SET default_transaction_read_only = on`)
	db.Pool().Reset() // the setting holds for new sessions
	run := func(sql string) error {
		return db.Run(ctx, func(q pgstore.Querier) error {
			_, err := q.Exec(ctx, sql)
			return err
		})
	}

	for _, sql := range []string{
		`SELECT 1/0`, // a client's bad input
		`DO $$BEGIN RAISE unique_violation; END$$`,      // a conflict
		`DO $$BEGIN RAISE serialization_failure; END$$`, // another
		`SELECT 'not a number'::int`,                    // bad input again
		`DO $$BEGIN RAISE lock_not_available; END$$`,    // a lock wait
	} {
		if err := run(sql); err == nil {
			t.Fatalf("%s: no error", sql)
		}
	}
	if err := db.Probe(ctx); err != nil {
		t.Fatalf("Probe after errors of the statements = %v, want nil: none says the database cannot write", err)
	}

	err := run(`UPDATE idempotency_records SET expire_time = expire_time WHERE key = 'k'`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
		t.Fatalf("a write to the read-only database = %v, want SQLSTATE 25006", err)
	}
	for i := range 2 {
		if err := db.Probe(ctx); err == nil || !strings.Contains(err.Error(), "cannot write") || db.Health() == nil {
			t.Fatalf("Probe %d after the write failed = %v (Health %v), want the database cannot write", i+1, err, db.Health())
		}
	}

	exec(`ALTER DATABASE ` + database + ` RESET default_transaction_read_only`)
	if err := db.Probe(ctx); err != nil || db.Health() != nil {
		t.Fatalf("Probe with writes allowed again = %v (Health %v), want nil", err, db.Health())
	}
	if err := run(`UPDATE idempotency_records SET expire_time = expire_time WHERE key = 'k'`); err != nil {
		t.Errorf("a write once the probe passed: %v", err)
	}
}
