package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	spb "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// scoped is request's claim of key under scope.
func scoped(scope, key string) storage.ClaimRequest {
	req := request(key, time.Now())
	req.Key.Scope = scope
	return req
}

// wantFenced fails t unless err is a scope refused for now.
func wantFenced(t *testing.T, what string, err error) {
	t.Helper()
	var away *storage.ScopeUnavailableError
	if !errors.As(err, &away) || away.RetryAfter <= 0 {
		t.Errorf("%s: %v; want a ScopeUnavailableError with a retry delay", what, err)
	}
}

// A fenced scope's claims are refused, a fresh key's and a stored one's;
// other scopes are served; once unfenced, the scope is served again.
func TestFence_ScopeRefused_OtherScopesServed(t *testing.T) {
	db := open(t, fresh("fence"), nil)
	ctx := context.Background()
	claimed := claim(t, db, scoped("moving", "stored"), storage.OutcomeFresh)
	if err := db.Complete(ctx, scoped("moving", "stored").Key, claimed.Completed(result(t, "done"))); err != nil {
		t.Fatal(err)
	}
	if err := db.Fence(ctx, "moving", "to pod b"); err != nil {
		t.Fatal(err)
	}
	if fenced, note, err := db.Fenced(ctx, "moving"); !fenced || note != "to pod b" || err != nil {
		t.Errorf("Fenced = %v, %q, %v; want true and its note", fenced, note, err)
	}
	_, _, err := db.Claim(ctx, scoped("moving", "new"))
	wantFenced(t, "a fresh key of a fenced scope", err)
	_, _, _, err = db.ClaimTx(ctx, scoped("moving", "new"), storage.Transactional)
	wantFenced(t, "a transactional claim of a fenced scope", err)
	claim(t, db, scoped("staying", "new"), storage.OutcomeFresh)
	if err := db.Unfence(ctx, "moving"); err != nil {
		t.Fatal(err)
	}
	claim(t, db, scoped("moving", "new"), storage.OutcomeFresh)
	claim(t, db, scoped("moving", "stored"), storage.OutcomeReplay)
}

// A fence waits for a transactional claim in progress, whose commit is
// kept; meanwhile new claims of the scope are refused at once. The same
// holds for a claim whose error result drops its writes, which commits on
// a session lock after its rollback.
func TestFence_WaitsForAClaimInProgress_ItsCommitKept(t *testing.T) {
	for _, tc := range []struct {
		name   string
		result *storage.Result
	}{
		{"response", nil},
		{"error", &storage.Result{Status: &spb.Status{Code: int32(code.Code_FAILED_PRECONDITION), Message: "refused"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := open(t, fresh("fencewait"), nil)
			ctx := context.Background()
			req := scoped("moving", "held")
			_, rec, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
			if err != nil || tx == nil {
				t.Fatalf("ClaimTx: %v", err)
			}
			fenced := make(chan error, 1)
			go func() { fenced <- db.Fence(ctx, "moving", "") }()
			time.Sleep(200 * time.Millisecond)
			select {
			case err := <-fenced:
				t.Fatalf("Fence returned (%v) while a claim of the scope was in progress", err)
			default:
			}
			_, _, err = db.Claim(ctx, scoped("moving", "other"))
			wantFenced(t, "a claim while the fence waits", err)
			res := tc.result
			if res == nil {
				res = result(t, "done")
			}
			if err := tx.Commit(ctx, rec.Completed(res)); err != nil {
				t.Fatalf("Commit of the claim in progress: %v", err)
			}
			if err := <-fenced; err != nil {
				t.Fatal(err)
			}
			if got, err := db.Get(ctx, req.Key); err != nil || got == nil || got.State != storage.StateCompleted {
				t.Errorf("the claim in progress after the fence: %+v, %v; want completed", got, err)
			}
		})
	}
}

// A durable claim taken before the fence is not completed after it: it
// stays in flight here, for its copy to be taken over where the scope now
// lives.
func TestFence_DurableCompletionRefused_RecordStaysInFlight(t *testing.T) {
	db := open(t, fresh("fencedurable"), nil)
	ctx := context.Background()
	req := scoped("moving", "durable")
	rec := claim(t, db, req, storage.OutcomeFresh)
	if err := db.Fence(ctx, "moving", ""); err != nil {
		t.Fatal(err)
	}
	wantFenced(t, "a durable completion after the fence", db.Complete(ctx, req.Key, rec.Completed(result(t, "late"))))
	if got, err := db.Get(ctx, req.Key); err != nil || got == nil || got.State != storage.StateInFlight {
		t.Errorf("the record after the refused completion: %+v, %v; want in flight", got, err)
	}
}

// FenceLock is the scope's alone: not a key's lock.
func TestFenceLock_ApartFromKeyLocks(t *testing.T) {
	if pgstore.FenceLock("alice") == pgstore.KeyLock(storage.RecordKey{Scope: "alice"}) || pgstore.FenceLock("alice") == pgstore.FenceLock("bob") {
		t.Error("a fence lock shared with a key's or another scope's")
	}
}
