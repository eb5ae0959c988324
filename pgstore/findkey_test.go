package pgstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// FindKey reads a key's records through the index on the key (migration
// 0006). The primary key leads with the scope and cannot serve it: with
// 100,000 records in 100 scopes, the plan must not scan the table.
func TestFindKey_ReadsTheKeyIndexNotTheTable(t *testing.T) {
	db := open(t, fresh("findkey_plan"), nil)
	ctx := context.Background()
	fillCompleted(t, db)
	for _, scope := range []string{"principal-b", "principal-a"} {
		req := storage.ClaimRequest{Key: storage.RecordKey{Scope: scope, Key: "wanted"}, Now: time.Now(), Lease: time.Minute, TTL: time.Hour}
		if _, _, err := db.Claim(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool().Exec(ctx, `ANALYZE idempotency_records`); err != nil {
		t.Fatal(err)
	}
	text := explain(t, db, `EXPLAIN (COSTS OFF) `+pgstore.SelectKey, "wanted", 10)
	if !strings.Contains(text, "idempotency_records_key") || strings.Contains(text, "Seq Scan") {
		t.Errorf("FindKey does not read the index on the key:\n%s", text)
	}
	found, err := db.FindKey(ctx, "wanted", 10)
	if err != nil || len(found) != 2 || found[0].Key.Scope != "principal-a" || found[1].Key.Scope != "principal-b" {
		t.Fatalf("FindKey = %+v, %v; want the key in principal-a, then principal-b", found, err)
	}
}
