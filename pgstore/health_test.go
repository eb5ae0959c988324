package pgstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/interceptor/storage"
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
