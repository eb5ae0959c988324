package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// storeTxError stores a transactional method's error for key through db.
func storeTxError(t *testing.T, db *pgstore.DB, key string) {
	t.Helper()
	outcome, rec, tx, err := db.ClaimTx(context.Background(), request(key, time.Now()), storage.Transactional)
	if err != nil || outcome != storage.OutcomeFresh {
		t.Fatalf("ClaimTx(%s) = %v, %v", key, outcome, err)
	}
	done := rec.Completed(&storage.Result{Status: &spb.Status{Code: int32(codes.InvalidArgument), Message: "bad amount"}})
	done.Durability = storage.Transactional
	if err := tx.Commit(context.Background(), done); err != nil {
		t.Fatalf("Commit(%s): %v", key, err)
	}
}

// Two replicas on one database: the second answers the key's retries from
// memory, yet once the first's Release returns, its next claim runs fresh.
func TestRelease_TwoReplicas_OtherReplicaRunsFreshOnceReleaseReturns(t *testing.T) {
	name := fresh("release_replicas")
	a, b := open(t, name, nil), open(t, name, nil)

	// The hazard: a record deleted behind b's back is still replayed by b
	// from memory.
	storeTxError(t, a, "probe")
	claim(t, b, request("probe", time.Now()), storage.OutcomeReplay)
	if _, err := a.Pool().Exec(context.Background(), `DELETE FROM idempotency_records WHERE key = 'probe'`); err != nil {
		t.Fatal(err)
	}
	claim(t, b, request("probe", time.Now()), storage.OutcomeReplay)

	storeTxError(t, a, "k")
	claim(t, b, request("k", time.Now()), storage.OutcomeReplay) // kept in b's memory
	claim(t, a, request("k", time.Now()), storage.OutcomeReplay) // and in a's
	released, err := a.Release(context.Background(), request("k", time.Time{}).Key, time.Time{}, "oncall", storage.Seen{})
	if err != nil || released == nil || released.Result.Status.GetMessage() != "bad amount" {
		t.Fatalf("Release = %+v, %v; want the stored error", released, err)
	}
	if rec := claim(t, b, request("k", time.Now()), storage.OutcomeFresh); rec.Attempt != 1 {
		t.Errorf("the other replica's claim after Release: attempt %d, want 1", rec.Attempt)
	}
}

// Release refuses, on the database's clock, a record whose method was not
// transactional, and a key a transactional claim holds locked in another
// replica, and leaves both as they were.
func TestRelease_RealClock_RefusesAndKeeps(t *testing.T) {
	name := fresh("release_refusals")
	opts := &pgstore.Options{LockTimeout: 100 * time.Millisecond}
	a, b := open(t, name, opts), open(t, name, opts)
	done := claim(t, a, request("durable", time.Now()), storage.OutcomeFresh).Completed(
		&storage.Result{Status: &spb.Status{Code: int32(codes.Unavailable), Message: "downstream"}})
	done.Durability = storage.Transactional // Complete keeps only what a durable claim can be: not transactional
	if err := a.Complete(context.Background(), request("durable", time.Time{}).Key, done); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(context.Background(), request("durable", time.Time{}).Key, time.Time{}, "oncall", storage.Seen{}); !errors.Is(err, storage.ErrReleaseNotTransactional) {
		t.Errorf("Release of a durable claim's error: %v, want ErrReleaseNotTransactional", err)
	}
	claim(t, b, request("durable", time.Now()), storage.OutcomeReplay)

	outcome, rec, tx, err := a.ClaimTx(context.Background(), request("held", time.Now()), storage.Transactional)
	if err != nil || outcome != storage.OutcomeFresh {
		t.Fatalf("ClaimTx = %v, %v", outcome, err)
	}
	if _, err := b.Release(context.Background(), request("held", time.Time{}).Key, time.Time{}, "oncall", storage.Seen{}); !errors.Is(err, storage.ErrReleaseInFlight) {
		t.Errorf("Release of a key another replica's claim holds: %v, want ErrReleaseInFlight", err)
	}
	if err := tx.Commit(context.Background(), rec.Completed(result(t, "ok"))); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(context.Background(), request("held", time.Time{}).Key, time.Time{}, "oncall", storage.Seen{}); !errors.Is(err, storage.ErrReleaseSuccess) {
		t.Errorf("Release of a stored success: %v, want ErrReleaseSuccess", err)
	}
}
