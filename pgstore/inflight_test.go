package pgstore_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// A page of claims in flight is read through their partial index, so that
// it costs the claims it returns however many completed records the table
// holds: with 100,000 completed records and 3 claims, the plan scans the
// index and the page reads a few buffers, not the table's 2,000.
func TestInFlight_ReadsTheIndexNotTheTable(t *testing.T) {
	db := open(t, fresh("inflight_plan"), nil)
	ctx := context.Background()
	fillCompleted(t, db)
	for _, key := range []string{"a", "b", "c"} {
		req := storage.ClaimRequest{Key: storage.RecordKey{Scope: "principal-7", Key: key}, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}
		if _, _, err := db.Claim(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool().Exec(ctx, `ANALYZE idempotency_records`); err != nil {
		t.Fatal(err)
	}
	text := explain(t, db, `EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF) `+pgstore.SelectInFlight, "", "", 50)
	// The page's buffers, the top node's: a few pages of the index and the
	// heap, where a scan of the table reads about 2,000.
	var buffers int
	if m := regexp.MustCompile(`Buffers: shared hit=(\d+)`).FindStringSubmatch(text); m != nil {
		buffers, _ = strconv.Atoi(m[1])
	}
	if !strings.Contains(text, "Index Scan on idempotency_records_in_flight") && !strings.Contains(text, "Index Scan using idempotency_records_in_flight") ||
		strings.Contains(text, "Seq Scan") || buffers == 0 || buffers > 20 {
		t.Errorf("a page of claims in flight is not read from their index alone (%d buffers):\n%s", buffers, text)
	}
	got, err := db.InFlight(ctx, storage.RecordKey{}, 50)
	if err != nil || len(got) != 3 {
		t.Fatalf("InFlight = %d claims, %v; want the 3 claims", len(got), err)
	}
}

// fillCompleted stores 100,000 completed records in 100 scopes, for a
// plan's test.
func fillCompleted(t *testing.T, db *pgstore.DB) {
	t.Helper()
	_, err := db.Pool().Exec(context.Background(), `INSERT INTO idempotency_records
			(scope, key, fingerprint, fingerprint_scheme, state, attempt, claim_token, owner, lease_us, expire_time, result)
		SELECT 'principal-' || (i % 100), 'key-' || i, decode(repeat('00', 32), 'hex'), 'v1', 2, 1, decode(repeat('00', 16), 'hex'),
			'test', 1000000, now() + interval '1 day', '\x'::bytea
		FROM generate_series(1, 100000) AS i`)
	if err != nil {
		t.Fatal(err)
	}
}

// explain is the plan of an EXPLAIN statement, its lines joined.
func explain(t *testing.T, db *pgstore.DB, stmt string, args ...any) string {
	t.Helper()
	rows, err := db.Pool().Query(context.Background(), stmt, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return strings.Join(lines, "\n")
}
