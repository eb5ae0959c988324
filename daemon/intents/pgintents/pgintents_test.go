package pgintents

import (
	"context"
	"crypto/sha256"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	paymentsv1 "github.com/paymentsd/paymentsd/daemon/gen/payments/v1"
	"github.com/paymentsd/paymentsd/daemon/intents/intenttest"
	"github.com/paymentsd/paymentsd/daemon/server"
	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

var cluster *pgtest.Cluster

func TestMain(m *testing.M) { pgtest.Main(m, &cluster) }

// open opens the database name (created if new) and its intents, closed
// when the test ends. The suites simulate time: the records store judges
// it by the caller's clock.
func open(t *testing.T, name string, opts pgstore.Options) (*pgstore.DB, *Store) {
	t.Helper()
	c := pgtest.Require(t, cluster)
	opts.CallerClock = true
	db, err := pgstore.Open(context.Background(), c.NewDatabase(t, name), &opts)
	if err != nil {
		t.Fatal(err)
	}
	intents, err := New(context.Background(), db)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return db, intents
}

func TestConformance(t *testing.T) {
	pgtest.Require(t, cluster)
	intenttest.RunTests(t, func(t *testing.T, dir string) intenttest.Backend {
		db, intents := open(t, pgtest.DatabaseName(dir), pgstore.Options{})
		return intenttest.Backend{Intents: intents, Records: db, Close: db.Close}
	})
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func intent(id string, created time.Time) *paymentsv1.PaymentIntent {
	return &paymentsv1.PaymentIntent{
		Id:         id,
		State:      paymentsv1.State_STATE_CREATED,
		Version:    1,
		Amount:     "100",
		CreateTime: timestamppb.New(created),
		ExpireTime: timestamppb.New(created.Add(15 * time.Minute)),
	}
}

func create(t *testing.T, s *Store, owner string, pi *paymentsv1.PaymentIntent) {
	t.Helper()
	if err := s.CreateIntent(context.Background(), owner, "", pi); err != nil {
		t.Fatalf("CreateIntent(%s): %v", pi.Id, err)
	}
}

// A cursor comes from a caller's page token: a malformed one is an error,
// never a panic nor a statement PostgreSQL refuses.
func TestList_MalformedCursor_IsError(t *testing.T) {
	db, s := open(t, pgtest.DatabaseName(t.TempDir()), pgstore.Options{})
	defer db.Close()
	create(t, s, "alice", intent("pi_a", t0))
	for name, cursor := range map[string][]byte{
		"short":    {1, 2, 3},
		"not utf8": append(encodeCursor(0, ""), 0xff, 0xfe),
		"nul":      append(encodeCursor(0, "pi_"), 0),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("ListIntents panicked: %v", p)
				}
			}()
			page, next, err := s.ListIntents(context.Background(), "alice", cursor, 10)
			if err == nil || !strings.Contains(err.Error(), "malformed cursor") {
				t.Errorf("ListIntents(cursor %x) = %d intents, next %x, %v; want a malformed cursor error", cursor, len(page), next, err)
			}
		})
	}
	// The empty cursor is the first page, as nil is.
	page, _, err := s.ListIntents(context.Background(), "alice", []byte{}, 10)
	if err != nil || len(page) != 1 {
		t.Errorf("ListIntents(empty cursor) = %d intents, %v; want the one intent", len(page), err)
	}
}

// Reopening a database finds its intents; New migrates once.
func TestReopen_KeepsIntentsAndMigratesOnce(t *testing.T) {
	name := pgtest.DatabaseName(t.TempDir())
	db, s := open(t, name, pgstore.Options{})
	pi := intent("pi_kept", t0)
	create(t, s, "alice", pi)
	db.Close()

	db, s = open(t, name, pgstore.Options{})
	defer db.Close()
	if _, err := New(context.Background(), db); err != nil {
		t.Fatalf("New on a migrated database: %v", err)
	}
	got, err := s.GetIntent(context.Background(), "alice", pi.Id)
	if err != nil || !proto.Equal(got, pi) {
		t.Errorf("GetIntent after reopen = %v, %v; want %v", got, err, pi)
	}
	var version int
	if err := db.Pool().QueryRow(context.Background(),
		`SELECT version FROM schema_versions WHERE component = $1`, component).Scan(&version); err != nil || version != 2 {
		t.Errorf("schema_versions for %s = %d, %v; want 2", component, version, err)
	}
}

// A page is a scan of the owner's index from the cursor, in its order: no
// sort, no reading of the owner's earlier intents.
func TestList_UsesOwnerIndexWithoutSort(t *testing.T) {
	db, s := open(t, pgtest.DatabaseName(t.TempDir()), pgstore.Options{})
	defer db.Close()
	create(t, s, "alice", intent("pi_a", t0))
	ctx := context.Background()
	conn, err := db.Pool().Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// So few rows would be read whole otherwise: ask for the plan an owner
	// with many intents gets.
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		// Sorting is allowed, at a prohibitive cost: a plan with a sort is
		// one the index cannot serve.
		for _, off := range []string{"enable_seqscan", "enable_bitmapscan", "enable_sort"} {
			if _, err := tx.Exec(ctx, `SET LOCAL `+off+` = off`); err != nil {
				return err
			}
		}
		for query, args := range map[string][]any{
			listFirst: {"alice", 11},
			listAfter: {"alice", int64(0), "pi_", 11},
		} {
			rows, err := tx.Query(ctx, "EXPLAIN "+query, args...)
			if err != nil {
				return err
			}
			var plan []string
			for rows.Next() {
				var line string
				if err := rows.Scan(&line); err != nil {
					return err
				}
				plan = append(plan, line)
			}
			if err := rows.Err(); err != nil {
				return err
			}
			p := strings.Join(plan, "\n")
			if !strings.Contains(p, "payment_intents_owner_order") || strings.Contains(p, "Sort") {
				t.Errorf("plan of\n%s\n=\n%s\nwant a scan of payment_intents_owner_order and no sort", query, p)
			}
			inIndex := slices.ContainsFunc(plan, func(line string) bool {
				return strings.Contains(line, "Index Cond:") && strings.Contains(line, "ROW(create_time_ns, id) > ROW(")
			})
			if query == listAfter && !inIndex {
				t.Errorf("plan of the page after a cursor =\n%s\nwant the cursor in the index condition", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Outside a request's Tx, an update waits out a row lock held longer than
// the lock timeout, and applies update once.
func TestUpdate_LockHeldPastLockTimeout_Waits(t *testing.T) {
	db, s := open(t, pgtest.DatabaseName(t.TempDir()), pgstore.Options{LockTimeout: 50 * time.Millisecond})
	defer db.Close()
	pi := intent("pi_locked", t0)
	create(t, s, "alice", pi)

	ctx := context.Background()
	holder, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := holder.Exec(ctx, `SELECT 1 FROM payment_intents WHERE id = $1 FOR UPDATE`, pi.Id); err != nil {
		holder.Rollback(ctx)
		t.Fatal(err)
	}
	released := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond) // six lock timeouts
		released <- holder.Commit(ctx)
	}()
	defer func() {
		if err := <-released; err != nil {
			t.Errorf("releasing the lock: %v", err)
		}
	}()

	calls := 0
	got, err := s.UpdateIntent(ctx, "alice", pi.Id, func(pi *paymentsv1.PaymentIntent) bool {
		calls++
		pi.Version++
		return true
	})
	if err != nil || got.Version != 2 || calls != 1 {
		t.Fatalf("UpdateIntent past the lock timeout = %v, %v after %d calls of update; want version 2 after 1", got, err, calls)
	}
}

// Inside a request's Tx, a lock wait that times out fails the Tx: the
// update returns the error, and does not try forever.
func TestUpdate_LockTimeoutInTx_FailsTx(t *testing.T) {
	db, s := open(t, pgtest.DatabaseName(t.TempDir()), pgstore.Options{LockTimeout: 50 * time.Millisecond})
	defer db.Close()
	pi := intent("pi_locked", t0)
	create(t, s, "alice", pi)

	ctx := context.Background()
	holder, err := db.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx)
	if _, err := holder.Exec(ctx, `SELECT 1 FROM payment_intents WHERE id = $1 FOR UPDATE`, pi.Id); err != nil {
		t.Fatal(err)
	}

	req := storage.ClaimRequest{
		Key:         storage.RecordKey{Scope: "scope", Key: "k"},
		Fingerprint: sha256.Sum256([]byte("body")),
		Scheme:      storage.FingerprintScheme,
		Now:         t0, Lease: 30 * time.Second, TTL: time.Hour,
	}
	outcome, rec, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
	if err != nil || outcome != storage.OutcomeFresh {
		t.Fatalf("ClaimTx = %v, %v", outcome, err)
	}
	defer tx.Rollback()
	ctx, cancel := context.WithTimeout(tx.Context(ctx), 10*time.Second)
	defer cancel()
	calls := 0
	_, err = s.UpdateIntent(ctx, "alice", pi.Id, func(*paymentsv1.PaymentIntent) bool { calls++; return true })
	if err == nil || !isLockTimeout(err) || ctx.Err() != nil || calls != 0 {
		t.Fatalf("UpdateIntent in a Tx past the lock timeout = %v (context %v) after %d calls of update; want the lock timeout at once, update never called", err, ctx.Err(), calls)
	}
	if err := tx.Commit(context.Background(), rec.Completed(&storage.Result{})); err == nil {
		t.Error("Commit of a Tx whose update timed out = nil, want an error")
	}
	holder.Rollback(context.Background())
	got, err := s.GetIntent(context.Background(), "alice", pi.Id)
	if err != nil || !proto.Equal(got, pi) {
		t.Errorf("intent after the failed Tx = %v, %v; want it unchanged", got, err)
	}
	if _, err := s.GetIntent(context.Background(), "bob", pi.Id); !errors.Is(err, server.ErrNotFound) {
		t.Errorf("GetIntent(bob) = %v, want ErrNotFound", err)
	}
}

// A row written before keys were kept (migration 0001's columns alone)
// reads with no key.
func TestIntentWrittenBeforeKeys_FoundWithNoKey(t *testing.T) {
	db, s := open(t, pgtest.DatabaseName(t.TempDir()), pgstore.Options{})
	defer db.Close()
	old := intent("pi_000000000000000000000001", t0)
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool().Exec(context.Background(), `INSERT INTO payment_intents (id, owner, create_time_ns, intent)
		VALUES ($1, 'alice', $2, $3)`, old.Id, t0.UnixNano(), raw); err != nil {
		t.Fatal(err)
	}
	found, err := s.FindIntent(context.Background(), old.Id)
	if err != nil || found.Owner != "alice" || found.Key != "" || !proto.Equal(found.Intent, old) {
		t.Fatalf("FindIntent of a row written before keys = %+v, %v; want alice's, with no key", found, err)
	}
}
