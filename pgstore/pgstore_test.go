package pgstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/internal/testkit/faultproxy"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/once/oncetest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
	"github.com/paymentsd/paymentsd/storage/storagetest"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// runs makes fresh's names new in every run of a test (go test -count).
var runs atomic.Int64

// fresh returns a database name, base and a number new in this process.
func fresh(base string) string { return fmt.Sprintf("%s_%d", base, runs.Add(1)) }

// open opens a DB on database name, closed when the test ends.
func open(t testing.TB, name string, opts *pgstore.Options) *pgstore.DB {
	t.Helper()
	url := pgtest.Require(t, cluster).NewDatabase(t, name)
	db, err := pgstore.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestConformance(t *testing.T) { storagetest.RunTests(t, openSuiteDB) }

func TestOnce(t *testing.T) { oncetest.RunTests(t, openSuiteDB) }

func TestOnceCrash(t *testing.T) { oncetest.RunCrashTests(t, openSuiteDB) }

// openSuiteDB opens a database of its own for dir. The suites simulate
// time, so the store takes the caller's clock; a short lock timeout keeps
// its waits for uncommitted claims short.
func openSuiteDB(t *testing.T, dir string) storagetest.Store {
	url := pgtest.Require(t, cluster).NewDatabase(t, pgtest.DatabaseName(dir))
	db, err := pgstore.Open(context.Background(), url, &pgstore.Options{CallerClock: true, LockTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return db
}

func request(key string, now time.Time) storage.ClaimRequest {
	return storage.ClaimRequest{
		Key:         storage.RecordKey{Scope: "alice", Key: key},
		Fingerprint: sha256.Sum256([]byte("request")),
		Scheme:      "test",
		Now:         now,
		Lease:       30 * time.Second,
		TTL:         time.Hour,
	}
}

func result(t testing.TB, text string) *storage.Result {
	t.Helper()
	resp, err := anypb.New(wrapperspb.String(text))
	if err != nil {
		t.Fatal(err)
	}
	return &storage.Result{Response: resp}
}

func claim(t *testing.T, db *pgstore.DB, req storage.ClaimRequest, want storage.Outcome) *storage.Record {
	t.Helper()
	got, rec, err := db.Claim(context.Background(), req)
	if err != nil || got != want {
		t.Fatalf("Claim(%s) = %v, %v; want %v", req.Key.Key, got, err, want)
	}
	return rec
}

// Two processes on one database, the second with a clock ten minutes
// ahead: it must neither take over the first one's live claim nor find its
// live record expired, nor sweep it, since leases and expiry are judged on
// the database's clock.
func TestDatabaseClock_SkewedProcess_NeitherTakesOverNorExpiresEarly(t *testing.T) {
	name := fresh("skewed_clock")
	honest := open(t, name, nil)
	skewed := open(t, name, nil)
	ahead := 10 * time.Minute

	req := request("k", time.Now())
	req.Lease, req.TTL = time.Minute, 5*time.Minute
	first := claim(t, honest, req, storage.OutcomeFresh)
	if d := time.Until(first.LeaseExpiry); d < 50*time.Second || d > 70*time.Second {
		t.Errorf("lease ends in %v, want about a minute on the database's clock", d)
	}

	late := req
	late.Now = time.Now().Add(ahead) // past the lease and the record's life, on this process's clock
	claim(t, skewed, late, storage.OutcomeInFlight)
	if err := skewed.Renew(context.Background(), req.Key, first); err != nil {
		t.Fatalf("Renew of the live claim from the skewed process = %v", err)
	}
	if err := honest.Complete(context.Background(), req.Key, first.Completed(result(t, "done"))); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	rec := claim(t, skewed, late, storage.OutcomeReplay)
	if rec.Attempt != 1 {
		t.Errorf("replay of attempt %d, want 1", rec.Attempt)
	}
	if n, err := skewed.Sweep(context.Background(), time.Now().Add(ahead)); err != nil || n != 0 {
		t.Errorf("Sweep from the skewed process = %d, %v; want 0 deleted", n, err)
	}
	claim(t, honest, req, storage.OutcomeReplay)
}

// A duplicate on another process finds the key locked by an
// uncommitted claim: it waits for the lock and replays the result once it
// commits; past LockTimeout it answers in flight instead.
func TestClaimTx_DuplicateOnOtherProcess_WaitsThenReplaysOrIsInFlight(t *testing.T) {
	for _, holdPastTimeout := range []bool{false, true} {
		t.Run(fmt.Sprintf("holdPastTimeout=%t", holdPastTimeout), func(t *testing.T) {
			name := fresh(fmt.Sprintf("duplicate_wait_%t", holdPastTimeout))
			opts := &pgstore.Options{LockTimeout: 300 * time.Millisecond}
			a, b := open(t, name, opts), open(t, name, opts)
			req := request("k", time.Now())
			outcome, rec, tx, err := a.ClaimTx(context.Background(), req, storage.Transactional)
			if err != nil || outcome != storage.OutcomeFresh {
				t.Fatalf("ClaimTx = %v, %v", outcome, err)
			}
			type answer struct {
				outcome storage.Outcome
				err     error
			}
			got := make(chan answer, 1)
			go func() {
				o, _, err := b.Claim(context.Background(), request("k", time.Now()))
				got <- answer{o, err}
			}()
			if holdPastTimeout {
				if ans := <-got; ans.err != nil || ans.outcome != storage.OutcomeInFlight {
					t.Fatalf("duplicate held past the lock timeout = %v, %v; want in flight", ans.outcome, ans.err)
				}
			} else {
				time.Sleep(50 * time.Millisecond) // let it reach the lock (if it does not, it still replays)
			}
			if err := tx.Commit(context.Background(), rec.Completed(result(t, "done"))); err != nil {
				t.Fatalf("Commit: %v", err)
			}
			if !holdPastTimeout {
				if ans := <-got; ans.err != nil || ans.outcome != storage.OutcomeReplay {
					t.Fatalf("duplicate = %v, %v; want a replay", ans.outcome, ans.err)
				}
			}
			claim(t, b, req, storage.OutcomeReplay)
		})
	}
}

// A process watching a key hears when another process completes its claim.
func TestWatch_ClaimEndsInOtherProcess_WakesWatcher(t *testing.T) {
	name := fresh("watch")
	a, b := open(t, name, nil), open(t, name, nil)
	req := request("k", time.Now())
	_, rec, tx, err := a.ClaimTx(context.Background(), req, storage.Durable)
	if err != nil {
		t.Fatal(err)
	}
	ended, stop := b.Watch(req.Key)
	defer stop()
	other, stopOther := b.Watch(storage.RecordKey{Scope: "alice", Key: "other"})
	defer stopOther()
	if err := tx.Commit(context.Background(), rec.Completed(result(t, "done"))); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("no notice within 10s of the commit")
	}
	select {
	case <-other:
		t.Error("the watch of another key was woken too")
	default:
	}
}

// Every process sweeping at once deletes each expired record once, and no
// live one.
func TestSweep_ConcurrentProcesses_DeleteEachExpiredRecordOnce(t *testing.T) {
	name := fresh("sweep_concurrent")
	opts := &pgstore.Options{CallerClock: true}
	dbs := []*pgstore.DB{open(t, name, opts), open(t, name, opts), open(t, name, opts)}
	t0 := time.Now()
	const expired, live = 2500, 10
	for i := range expired + live {
		req := request(fmt.Sprint("k", i), t0)
		if i < live {
			req.TTL = 3 * time.Hour
		}
		claim(t, dbs[i%3], req, storage.OutcomeFresh)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		total int
	)
	for _, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := db.Sweep(context.Background(), t0.Add(2*time.Hour))
			if err != nil {
				t.Errorf("Sweep: %v", err)
			}
			mu.Lock()
			total += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if total != expired {
		t.Errorf("sweepers deleted %d in all, want %d", total, expired)
	}
	for i := range live { // still there: its lease has ended, so the next attempt takes it over
		if rec := claim(t, dbs[0], request(fmt.Sprint("k", i), t0.Add(2*time.Hour)), storage.OutcomeTakeover); rec.Attempt != 2 {
			t.Errorf("k%d: attempt %d after the sweep, want 2", i, rec.Attempt)
		}
	}
}

// While the database is down, claims fail (no handler may run without
// one) and Probe reports it; once it is back, both work again, and a
// claim whose transaction the restart cut stored nothing.
func TestRestart_ClaimsFailWhileDownRecoverAfter(t *testing.T) {
	c := pgtest.Require(t, cluster)
	db := open(t, fresh("restart"), nil)
	ctx := context.Background()
	req := request("cut", time.Now())
	_, rec, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
	if err != nil {
		t.Fatal(err)
	}
	c.Stop(t)
	restarted := false
	defer func() {
		if !restarted {
			c.StartAgain(t)
		}
	}()
	if err := tx.Commit(ctx, rec.Completed(result(t, "lost"))); err == nil {
		t.Fatal("Commit with the database down = nil, want an error")
	}
	down, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, _, err := db.Claim(down, request("other", time.Now())); err == nil {
		t.Fatal("Claim with the database down = nil error")
	}
	if err := db.Probe(down); err == nil || db.Health() == nil {
		t.Fatalf("Probe with the database down = %v, Health %v; want errors", err, db.Health())
	}
	c.StartAgain(t)
	restarted = true
	if err := db.Probe(ctx); err != nil || db.Health() != nil {
		t.Fatalf("Probe after restart = %v, Health %v", err, db.Health())
	}
	claim(t, db, request("cut", time.Now()), storage.OutcomeFresh) // nothing of the cut claim was stored
}

// A claim whose read waits past the lock timeout behind a table lock (a
// schema change, say), after it took the key's lock, leaves no lock
// behind: another process claims the key once the table is free.
func TestClaim_ReadTimesOutAfterKeyLock_LeavesNoLock(t *testing.T) {
	name := fresh("read_timeout")
	opts := &pgstore.Options{MaxConns: 1, LockTimeout: 200 * time.Millisecond}
	a, b := open(t, name, opts), open(t, name, nil)
	ctx := context.Background()
	claim(t, a, request("warm", time.Now()), storage.OutcomeFresh) // its statements are prepared: none waits now

	locker := pgtest.Connect(t, cluster.URL(name))
	tx, err := locker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `LOCK TABLE idempotency_records IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	if outcome, _, err := a.Claim(ctx, request("k", time.Now())); err == nil && outcome.Claimed() {
		t.Fatalf("Claim behind a table lock = %v, want in flight or an error", outcome)
	}
	tx.Rollback(ctx)

	wantNoAdvisoryLocks(t, locker, "after the claim gave up")
	claim(t, b, request("k", time.Now()), storage.OutcomeFresh)
}

// wantNoAdvisoryLocks fails t if any session of conn's database server
// holds an advisory lock: a key left locked, for every process.
func wantNoAdvisoryLocks(t *testing.T, conn *pgx.Conn, when string) {
	t.Helper()
	var advisory int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&advisory); err != nil || advisory != 0 {
		t.Errorf("advisory locks held %s = %d, %v; want 0", when, advisory, err)
	}
}

// A claim's transaction is READ COMMITTED on a database whose default is
// REPEATABLE READ: there the snapshot would be taken by the lock's
// statement, before the lock is granted, and the read could miss a record
// committed by the claim that held the key just before. The handler's
// statements run at the same level.
func TestClaimTx_ReadCommittedWhateverTheDatabasesDefault(t *testing.T) {
	ctx := context.Background()
	name := fresh("isolation")
	url := pgtest.Require(t, cluster).NewDatabase(t, name)
	if _, err := pgtest.Connect(t, url).Exec(ctx, `ALTER DATABASE `+name+` SET default_transaction_isolation = 'repeatable read'`); err != nil {
		t.Fatal(err)
	}
	db, err := pgstore.Open(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var level string
	if err := db.Pool().QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level); err != nil || level != "repeatable read" {
		t.Fatalf("the database's default = %q, %v; want repeatable read", level, err)
	}
	for _, durability := range []storage.Durability{storage.Transactional, storage.Durable} {
		outcome, _, tx, err := db.ClaimTx(ctx, request(fmt.Sprint("isolation-", durability), time.Now()), durability)
		if err != nil || outcome != storage.OutcomeFresh {
			t.Fatalf("ClaimTx(durable %v) = %v, %v", durability, outcome, err)
		}
		err = db.Run(tx.Context(ctx), func(q pgstore.Querier) error {
			return q.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level)
		})
		tx.Rollback()
		if err != nil || level != "read committed" {
			t.Errorf("durable %v: the handler's transaction is %q, %v; want read committed", durability, level, err)
		}
	}
	// A call without a key: Run with no Tx, in a transaction of its own.
	err = db.Run(ctx, func(q pgstore.Querier) error {
		return q.QueryRow(ctx, `SHOW transaction_isolation`).Scan(&level)
	})
	if err != nil || level != "read committed" {
		t.Errorf("Run without a Tx: the transaction is %q, %v; want read committed", level, err)
	}
}

// The notice listener's line for a lost connection says when it tries
// again as an operator reads a duration ("100ms"), not in nanoseconds.
func TestWatch_ListenerLost_LogsRetryInAsADuration(t *testing.T) {
	c := pgtest.Require(t, cluster)
	proxy, err := faultproxy.New(c.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	u, err := url.Parse(c.NewDatabase(t, fresh("watch_log")))
	if err != nil {
		t.Fatal(err)
	}
	u.Host = proxy.Addr()
	var log lockedBuffer
	db, err := pgstore.Open(context.Background(), u.String(), &pgstore.Options{Logger: slog.New(slog.NewJSONHandler(&log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	const lost = "pgstore: listening for ended claims failed"
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), lost) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q line within 30 s of cutting every connection; the log:\n%s", lost, log.String())
		}
		proxy.CutAll()
		time.Sleep(50 * time.Millisecond)
	}
	for line := range strings.Lines(log.String()) {
		var entry struct {
			Msg     string
			RetryIn any `json:"retry_in"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.HasPrefix(entry.Msg, lost) {
			if s, ok := entry.RetryIn.(string); !ok || s != "100ms" {
				t.Fatalf("retry_in = %#v, want \"100ms\": %s", entry.RetryIn, line)
			}
			return
		}
	}
	t.Fatal("the line was logged, then not found")
}

// lockedBuffer is a buffer the store's goroutines write while the test
// reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
