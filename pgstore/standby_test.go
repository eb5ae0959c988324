package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// standbyPair is a primary with a synchronous standby, a DB on it and a
// connection of the test's own to the primary.
func standbyPair(t *testing.T, name string) (*pgtest.Pair, *pgstore.DB, *pgx.Conn) {
	t.Helper()
	p := pgtest.StartPair(t, pgtest.Synchronous)
	url := p.NewDatabase(t, name)
	db, err := pgstore.Open(context.Background(), url+"&application_name=pgstore_standby_test", nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return p, db, pgtest.Connect(t, p.Primary().URL(name))
}

// create claims req and commits text as its answer, within limit.
func create(t *testing.T, db *pgstore.DB, req storage.ClaimRequest, text string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	_, rec, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	return tx.Commit(ctx, rec.Completed(result(t, text)))
}

// claimWithin claims req within limit.
func claimWithin(db *pgstore.DB, req storage.ClaimRequest, limit time.Duration) (storage.Outcome, error) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	outcome, _, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
	if tx != nil {
		tx.Rollback()
	}
	return outcome, err
}

// syncRepWaiters is the backends of the DB's whose commits wait for the
// synchronous standby.
func syncRepWaiters(t *testing.T, conn *pgx.Conn) []int {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE application_name = 'pgstore_standby_test' AND wait_event = 'SyncRep'`)
	if err != nil {
		t.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return pids
}

func stored(t *testing.T, conn *pgx.Conn, key string) bool {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_records WHERE key = $1`, key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// With its only synchronous standby gone, a primary's commits wait. A
// create whose deadline passes meanwhile is never cancelled on the server:
// its commit waits on, invisible, and its key stays locked, so the retry
// is refused (an error, not in flight: a lock on an old primary would
// say the same), never replayed. A replay of a record committed
// before is not given either, since the standby cannot confirm it, and
// health reports the stall. Once the standby is back, the waiting commit
// completes, its retry replays it, and health recovers.
func TestStandbyLost_CommitWaitsUncancelled_NothingReplayedUntilItIsBack(t *testing.T) {
	p, db, conn := standbyPair(t, "standby_lost")
	before, after := request("before", time.Now()), request("after", time.Now())
	if err := create(t, db, before, "acknowledged before", 10*time.Second); err != nil {
		t.Fatalf("create with the standby up: %v", err)
	}
	p.Standby().Stop(t)

	err := create(t, db, after, "never acknowledged", time.Second)
	if !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("create with no standby: %v; want ErrOutcomeUnknown", err)
	}
	if pids := syncRepWaiters(t, conn); len(pids) != 1 {
		t.Fatalf("backends waiting for the standby after the deadline: %v; want the create's one: it was cancelled", pids)
	}
	if stored(t, conn, "after") {
		t.Fatal("the create's record is visible on the primary: its wait was cancelled")
	}
	if outcome, err := claimWithin(db, after, 2*time.Second); err == nil {
		t.Fatalf("retry of the waiting create: %v; want an error: the server's lock is not known to be current", outcome)
	}
	time.Sleep(1100 * time.Millisecond) // past the second the process trusts what it wrote
	if outcome, err := claimWithin(db, before, 2*time.Second); err == nil {
		t.Fatalf("replay with no standby to confirm it: %v; want an error", outcome)
	}
	probeUntil(t, db, func(err error) bool {
		return err != nil && strings.Contains(err.Error(), "not confirmed by a synchronous standby")
	})
	if r := db.Replication(); r.Unconfirmed < 2 || r.Waiting < 5*time.Second {
		t.Errorf("Replication() = %+v; want the replay's and the probe's confirmations unconfirmed, waiting 5 s or more", r)
	}

	p.Standby().StartAgain(t)
	probeUntil(t, db, func(err error) bool { return err == nil })
	if r := db.Replication(); r.Waiting != 0 {
		t.Errorf("Replication().Waiting = %v once the standby confirms; want 0", r.Waiting)
	}
	if !stored(t, conn, "after") {
		t.Fatal("the waiting create's record is not stored once the standby is back")
	}
	for _, req := range []storage.ClaimRequest{before, after} {
		if outcome, err := claimWithin(db, req, 10*time.Second); err != nil || outcome != storage.OutcomeReplay {
			t.Errorf("retry of %s once the standby is back: %v, %v; want a replay", req.Key.Key, outcome, err)
		}
	}
}

// With its only synchronous standby gone, the server may be an old
// primary left running after a failover, its data stale. Nothing read
// there is answered: each read fails, and so does each refusal read from
// it (a release of a key with no record), until the standby is back.
func TestStandbyLost_NoReadAnswered(t *testing.T) {
	p, db, _ := standbyPair(t, "standby_reads")
	req := request("stored", time.Now())
	if err := create(t, db, req, "acknowledged", 10*time.Second); err != nil {
		t.Fatalf("create with the standby up: %v", err)
	}
	k, missing := req.Key, storage.RecordKey{Scope: req.Key.Scope, Key: "missing"}
	one := func(q pgstore.Querier, ctx context.Context) error { return q.QueryRow(ctx, `SELECT 1`).Scan(new(int)) }
	reads := []struct {
		name string
		read func(ctx context.Context) error
		want error // once the standby is back
	}{
		{"Get", func(ctx context.Context) error { _, err := db.Get(ctx, k); return err }, nil},
		{"Get of a missing key", func(ctx context.Context) error { _, err := db.Get(ctx, missing); return err }, nil},
		{"FindKey", func(ctx context.Context) error { _, err := db.FindKey(ctx, k.Key, 10); return err }, nil},
		{"InFlight", func(ctx context.Context) error { _, err := db.InFlight(ctx, storage.RecordKey{}, 10); return err }, nil},
		{"Releases", func(ctx context.Context) error { _, err := db.Releases(ctx, k); return err }, nil},
		{"Release of a missing key", func(ctx context.Context) error {
			_, err := db.Release(ctx, missing, time.Now(), "test", storage.Seen{})
			return err
		}, storage.ErrNoRecord},
		{"Read", func(ctx context.Context) error {
			return db.Read(ctx, func(q pgstore.Querier) error { return one(q, ctx) })
		}, nil},
		{"Run", func(ctx context.Context) error {
			return db.Run(ctx, func(q pgstore.Querier) error { return one(q, ctx) })
		}, nil},
	}
	within := func(limit time.Duration, read func(ctx context.Context) error) error {
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		return read(ctx)
	}
	p.Standby().Stop(t)
	for _, r := range reads {
		if err := within(time.Second, r.read); err == nil || errors.Is(err, storage.ErrNoRecord) {
			t.Errorf("%s with no standby: %v; want an error: what was read is not known to be current", r.name, err)
		}
	}
	p.Standby().StartAgain(t)
	for _, r := range reads {
		if err := within(30*time.Second, r.read); !errors.Is(err, r.want) {
			t.Errorf("%s once the standby is back: %v; want %v", r.name, err, r.want)
		}
	}
}

// A commit whose wait for the standby someone else cancels (an operator's
// pg_cancel_backend) succeeds on the server, with a warning, kept locally
// only. Its create is told the outcome is unknown, not that it was done,
// and a retry is not replayed until the standby has it.
func TestStandbyWaitCancelledOnTheServer_NeitherAnsweredNorReplayed(t *testing.T) {
	p, db, conn := standbyPair(t, "standby_cancelled")
	req := request("cancelled", time.Now())
	p.Standby().Stop(t)
	done := make(chan error, 1)
	go func() { done <- create(t, db, req, "kept locally", time.Minute) }()
	var pids []int
	for deadline := time.Now().Add(20 * time.Second); len(pids) == 0; time.Sleep(20 * time.Millisecond) {
		if pids = syncRepWaiters(t, conn); time.Now().After(deadline) {
			t.Fatal("no commit waits for the standby 20 s after the create began")
		}
	}
	if _, err := conn.Exec(context.Background(), `SELECT pg_cancel_backend($1)`, pids[0]); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, storage.ErrOutcomeUnknown) {
		t.Fatalf("create whose wait was cancelled: %v; want ErrOutcomeUnknown", err)
	}
	if !stored(t, conn, "cancelled") {
		t.Fatal("the cancelled wait's record is not visible on the primary: the test shows nothing")
	}
	if outcome, err := claimWithin(db, req, 2*time.Second); err == nil {
		t.Fatalf("retry of a record kept locally only: %v; want an error", outcome)
	}
	p.Standby().StartAgain(t)
	if outcome, err := claimWithin(db, req, 10*time.Second); err != nil || outcome != storage.OutcomeReplay {
		t.Fatalf("retry once the standby has it: %v, %v; want a replay", outcome, err)
	}
}

// probeUntil probes db until ok accepts the finding, for up to 30 s.
func probeUntil(t *testing.T, db *pgstore.DB, ok func(error) bool) {
	t.Helper()
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
		err = db.Probe(ctx)
		cancel()
		if ok(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("probe 30 s on: %v", err)
		}
	}
}

// A create whose commit waits for a standby that has gone is given up
// once the health probe finds the server's commits stalled: told its
// outcome is unknown then, not at its deadline, so that its retry may
// find a server whose commits are confirmed. Its commit waits on, never
// cancelled.
func TestStandbyLost_WaitingCommitsGivenUpOnceTheProbeStalls(t *testing.T) {
	p, db, conn := standbyPair(t, "standby_give_up")
	p.Standby().Stop(t)
	done := make(chan error, 1)
	go func() { done <- create(t, db, request("waiting", time.Now()), "never acknowledged", 5*time.Minute) }()
	for deadline := time.Now().Add(20 * time.Second); len(syncRepWaiters(t, conn)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no commit waits for the standby 20 s after the create began")
		}
	}
	probeUntil(t, db, func(err error) bool { return err != nil })
	select {
	case err := <-done:
		if !errors.Is(err, storage.ErrOutcomeUnknown) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("create given up: %v; want ErrOutcomeUnknown, before its deadline", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the create still waits a minute after the probe found the server's commits stalled")
	}
	if len(syncRepWaiters(t, conn)) == 0 {
		t.Error("no commit waits for the standby after the create was given up: it was cancelled")
	}
	if stored(t, conn, "waiting") {
		t.Error("the given-up create's record is visible: its wait was cancelled")
	}
}

// Close returns with a health probe's heartbeat pending: one whose commit
// waits for a standby that is gone, which no later probe confirms. (A
// server stopped right after its first probe once hung so, its pool
// waiting for the heartbeat's connection.)
func TestClose_WithAHeartbeatPending_Returns(t *testing.T) {
	p, db, _ := standbyPair(t, "standby_close")
	p.Standby().Stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	db.Probe(ctx) // begins a heartbeat that waits for the standby, and gives up on it
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- db.Close() }()
	select {
	case <-closed:
	case <-time.After(time.Minute):
		t.Fatal("Close still waits a minute later: the pending heartbeat's connection was never returned")
	}
}

// A server that stalls is suspect for SuspectFor. Commits that stall at
// once while it is suspect count once. Marked again soon after it lapsed,
// it is suspect twice as long; marked long after, as long as at first.
func TestSuspicion_OncePerEpisodeDoubledWhenItRecurs(t *testing.T) {
	mark, until := pgstore.Suspicion()
	t0 := time.Date(2026, 12, 5, 9, 0, 0, 0, time.UTC)
	mark("a", t0)
	for range 10 {
		mark("a", t0.Add(time.Second)) // many commits stall together
	}
	if got, want := until("a"), t0.Add(pgstore.SuspectFor); !got.Equal(want) {
		t.Fatalf("suspect until %v; want %v: one episode", got, want)
	}
	relapse := t0.Add(pgstore.SuspectFor + time.Second)
	mark("a", relapse)
	if got, want := until("a"), relapse.Add(2*pgstore.SuspectFor); !got.Equal(want) {
		t.Fatalf("marked again just after it lapsed: suspect until %v; want %v", got, want)
	}
	later := relapse.Add(10 * pgstore.SuspectFor)
	mark("a", later)
	if got, want := until("a"), later.Add(pgstore.SuspectFor); !got.Equal(want) {
		t.Fatalf("marked again long after: suspect until %v; want %v", got, want)
	}
	mark("b", later)
	if got := until("b"); !got.Equal(later.Add(pgstore.SuspectFor)) {
		t.Fatalf("another server: %v", got)
	}
}
