package pgstore_test

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/internal/testkit/faultproxy"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// A commit whose connection is lost once its COMMIT went out may have been
// kept or not: Commit says the outcome is unknown, never that nothing was
// stored, and the same request's next claim finds the one answer, or the
// key free to run. (The cut comes as pgx sends the COMMIT's text, which is
// when it prepares the statement, before it runs: from the client's side
// no different from a cut after it ran.)
func TestCommit_ConnectionLostAtCommit_OutcomeUnknown(t *testing.T) {
	c := pgtest.Require(t, cluster)
	proxy, err := faultproxy.New(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u, err := url.Parse(c.NewDatabase(t, fresh("commit_lost")))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy.Addr()
	ctx := context.Background()
	db, err := pgstore.Open(ctx, u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })

	req := request("k", time.Now())
	outcome, rec, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
	if err != nil || outcome != storage.OutcomeFresh {
		t.Fatalf("ClaimTx = %v, %v; want fresh", outcome, err)
	}
	proxy.CutWhenClientSends([]byte("COMMIT"))
	err = tx.Commit(ctx, rec.Completed(result(t, "the answer")))
	if !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("Commit over a connection lost at COMMIT = %v, want ErrOutcomeUnknown", err)
	}
	if proxy.Cuts() != 1 {
		t.Fatalf("%d cuts, want the one at COMMIT", proxy.Cuts())
	}
	switch outcome, _, tx, err := db.ClaimTx(ctx, request("k", time.Now()), storage.Transactional); {
	case err != nil:
		t.Fatalf("the next claim: %v", err)
	case outcome == storage.OutcomeFresh:
		tx.Rollback() // not kept
	case outcome != storage.OutcomeReplay:
		t.Fatalf("the next claim: %v, want the answer replayed or the key free", outcome)
	}
}

// A result stored without the handler's writes (an error's) is written in
// a transaction of its own, after the writes are rolled back: the key stays
// locked from that rollback until the record commits, so that no other
// process claims it in between, and no lock is left once it has. The
// record's insert is held up behind a table lock, and another session asks
// for the key's lock meanwhile. (One connection, whose statements a first
// such commit prepares: preparing the insert would wait for the table lock
// too, but before the rollback.)
func TestCommit_DroppedWrites_KeyLockedUntilTheRecordCommits(t *testing.T) {
	name := fresh("dropped_writes")
	db := open(t, name, &pgstore.Options{MaxConns: 1, LockTimeout: 30 * time.Second})
	ctx := context.Background()
	_, rec, tx, err := db.ClaimTx(ctx, request("warm", time.Now()), storage.Transactional)
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx, rec.Completed(result(t, "bad amount"))); err != nil {
		t.Fatal(err)
	}
	req := request("k", time.Now())
	_, rec, tx, err = db.ClaimTx(ctx, req, storage.Transactional)
	if err != nil {
		t.Fatal(err)
	}

	hold, err := pgtest.Connect(t, cluster.URL(name)).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `LOCK TABLE idempotency_records IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	committed := make(chan error, 1)
	go func() {
		committed <- tx.Commit(ctx, rec.Completed(result(t, "bad amount")))
	}()

	asker := pgtest.Connect(t, cluster.URL(name))
	for waiting := false; !waiting; {
		err := asker.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_locks
			WHERE NOT granted AND relation = 'idempotency_records'::regclass)`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	var free bool
	if err := asker.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, pgstore.KeyLock(req.Key)).Scan(&free); err != nil {
		t.Fatal(err)
	}
	if free {
		t.Error("the key's lock was free between the rollback of the writes and the record's commit")
		asker.Exec(ctx, `SELECT pg_advisory_unlock_all()`)
	}

	hold.Rollback(ctx)
	if err := <-committed; err != nil {
		t.Fatalf("Commit: %v", err)
	}
	claim(t, db, request("k", time.Now()), storage.OutcomeReplay)
	wantNoAdvisoryLocks(t, asker, "once the record committed")
}
