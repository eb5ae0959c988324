package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/storage"
)

// A record damaged in the database (bytes that do not decode) is reported
// as storage.ErrDamaged, by a claim of its key and by Get, not as a
// failure to retry. Another process reads it, so that no record kept in
// memory answers instead.
func TestClaim_DamagedRecord_ErrDamaged(t *testing.T) {
	for _, tc := range []struct {
		name     string
		complete bool
		damage   string // an UPDATE of the record of key $1
	}{
		{"result does not decode", true, `UPDATE idempotency_records SET result = '\xff'::bytea WHERE key = $1`},
		{"fingerprint too short", false, `UPDATE idempotency_records SET fingerprint = '\x00'::bytea WHERE key = $1`},
		{"claim token too long", true, `UPDATE idempotency_records SET claim_token = claim_token || '\x00'::bytea WHERE key = $1`},
		// The table has no CHECK constraints: these rules are the reader's.
		{"unknown state", true, `UPDATE idempotency_records SET state = 3 WHERE key = $1`},
		{"attempt 0", false, `UPDATE idempotency_records SET attempt = 0 WHERE key = $1`},
		{"completed without a result", true, `UPDATE idempotency_records SET result = NULL WHERE key = $1`},
		{"in flight with a result", false, `UPDATE idempotency_records SET result = '\x'::bytea WHERE key = $1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			name := fresh("damaged")
			writer := open(t, name, nil)
			reader := open(t, name, nil)
			req := request("damaged", time.Now())
			rec := claim(t, writer, req, storage.OutcomeFresh)
			if tc.complete {
				if err := writer.Complete(ctx, req.Key, rec.Completed(result(t, "done"))); err != nil {
					t.Fatalf("Complete: %v", err)
				}
			}
			if tag, err := writer.Pool().Exec(ctx, tc.damage, req.Key.Key); err != nil || tag.RowsAffected() != 1 {
				t.Fatalf("damage: %v, %v rows", err, tag.RowsAffected())
			}

			req.Now = time.Now()
			if outcome, _, err := reader.Claim(ctx, req); !errors.Is(err, storage.ErrDamaged) {
				t.Errorf("Claim of the damaged key = %v, %v; want ErrDamaged", outcome, err)
			}
			if _, _, tx, err := reader.ClaimTx(ctx, req, storage.Transactional); !errors.Is(err, storage.ErrDamaged) || tx != nil {
				t.Errorf("ClaimTx of the damaged key = %v, %v; want ErrDamaged and no Tx", tx, err)
			}
			if got, err := reader.Get(ctx, req.Key); !errors.Is(err, storage.ErrDamaged) {
				t.Errorf("Get of the damaged key = %v, %v; want ErrDamaged", got, err)
			}
			// The damage is the record's alone: other keys claim, and the
			// failed claims left the key unlocked.
			claim(t, reader, request("other", time.Now()), storage.OutcomeFresh)
			if _, err := writer.Pool().Exec(ctx, `DELETE FROM idempotency_records WHERE key = $1`, req.Key.Key); err != nil {
				t.Fatal(err)
			}
			req.Now = time.Now()
			claim(t, reader, req, storage.OutcomeFresh)
		})
	}
}
