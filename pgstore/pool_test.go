package pgstore_test

import (
	"context"
	"errors"
	"io/fs"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
	"github.com/paymentsd/paymentsd/storage"
)

// countingTracer counts the queries of the connections it traces.
type countingTracer struct{ queries atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.queries.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// storeAndRelease claims a key, stores a transactional error, replays it
// and releases it: the store's every kind of statement.
func storeAndRelease(t *testing.T, db *pgstore.DB) {
	t.Helper()
	ctx := context.Background()
	req := request("k", time.Now())
	_, rec, tx, err := db.ClaimTx(ctx, req, storage.Transactional)
	if err != nil {
		t.Fatal(err)
	}
	done := rec.Completed(&storage.Result{Status: &spb.Status{Code: int32(codes.InvalidArgument), Message: "bad amount"}})
	done.Durability = storage.Transactional
	if err := tx.Commit(ctx, done); err != nil {
		t.Fatal(err)
	}
	claim(t, db, request("k", time.Now()), storage.OutcomeReplay)
	if _, err := db.Release(ctx, req.Key, time.Now(), "oncall", storage.Seen{}); err != nil {
		t.Fatalf("Release: %v", err)
	}
}

// New takes the embedder's pool as it is (its tracer sees the store's
// statements, its size stays), and Close leaves it open.
func TestNew_EmbeddersPool(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgtest.Require(t, cluster).NewDatabase(t, fresh("own_pool")))
	if err != nil {
		t.Fatal(err)
	}
	tracer := new(countingTracer)
	cfg.ConnConfig.Tracer, cfg.MaxConns = tracer, 3
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	db, err := pgstore.New(context.Background(), pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	storeAndRelease(t, db)
	db.Close()
	if tracer.queries.Load() == 0 || pool.Config().MaxConns != 3 {
		t.Errorf("the embedder's tracer saw %d queries, its pool holds %d connections; want some, and 3", tracer.queries.Load(), pool.Config().MaxConns)
	}
	if err := pool.Ping(context.Background()); err != nil {
		t.Errorf("the embedder's pool after Close: %v", err)
	}
}

// pool_max_conns in the URL is honoured; Options.MaxConns, when given,
// wins; neither gives 20.
func TestOpen_PoolSize(t *testing.T) {
	url := pgtest.Require(t, cluster).NewDatabase(t, fresh("pool_size"))
	for _, c := range []struct {
		url  string
		opts *pgstore.Options
		want int32
	}{
		{url + "&pool_max_conns=3", nil, 3},
		{url + "&pool_max_conns=3", &pgstore.Options{MaxConns: 5}, 5},
		{url, nil, 20},
	} {
		db, err := pgstore.Open(context.Background(), c.url, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		if got := db.Pool().Config().MaxConns; got != c.want {
			t.Errorf("Open(%q, %+v): pool of %d, want %d", c.url, c.opts, got, c.want)
		}
		db.Close()
	}
}

// A team that applies the exported migrations with a tool of its own
// (here, file by file) opens the store with OwnMigrations; MigrateRecords
// migrates apart from opening, after which NoMigrate opens.
func TestMigrations_AppliedApart(t *testing.T) {
	ctx := context.Background()
	own, err := pgxpool.New(ctx, pgtest.Require(t, cluster).NewDatabase(t, fresh("own_migrations")))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	files, err := fs.Glob(pgstore.Migrations(), "*.sql")
	if err != nil || len(files) < 4 {
		t.Fatalf("exported migrations: %v, %v", files, err)
	}
	for _, name := range files {
		sql, err := fs.ReadFile(pgstore.Migrations(), name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := own.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if _, err := pgstore.New(ctx, own, &pgstore.Options{NoMigrate: true}); !errors.Is(err, pgstore.ErrSchemaTooOld) {
		t.Errorf("NoMigrate on a schema whose version was not recorded: %v, want ErrSchemaTooOld", err)
	}
	db, err := pgstore.New(ctx, own, &pgstore.Options{OwnMigrations: true})
	if err != nil {
		t.Fatal(err)
	}
	storeAndRelease(t, db)
	db.Close()

	url := pgtest.Require(t, cluster).NewDatabase(t, fresh("migrate_apart"))
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := pgstore.MigrateRecords(ctx, pool); err != nil {
		t.Fatal(err)
	}
	db, err = pgstore.Open(ctx, url, &pgstore.Options{NoMigrate: true})
	if err != nil {
		t.Fatalf("NoMigrate after MigrateRecords: %v", err)
	}
	db.Close()
}

// With search_path in the URL the tables live in that schema, not in
// public, and every statement finds them there.
func TestOpen_SchemaOtherThanPublic(t *testing.T) {
	ctx := context.Background()
	url := pgtest.Require(t, cluster).NewDatabase(t, fresh("schema"))
	setup := pgtest.Connect(t, url)
	if _, err := setup.Exec(ctx, `CREATE SCHEMA payments`); err != nil {
		t.Fatal(err)
	}
	db, err := pgstore.Open(ctx, url+"&search_path=payments", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	storeAndRelease(t, db)
	claim(t, db, request("in-flight", time.Now()), storage.OutcomeFresh)
	if got, err := db.InFlight(ctx, storage.RecordKey{}, 10); err != nil || len(got) != 1 {
		t.Errorf("InFlight = %d, %v; want the claim", len(got), err)
	}
	if err := db.Probe(ctx); err != nil {
		t.Errorf("Probe: %v", err)
	}
	if _, err := db.CountRecords(ctx); err != nil {
		t.Errorf("CountRecords: %v", err)
	}
	var inPayments, inPublic *string
	if err := setup.QueryRow(ctx, `SELECT to_regclass('payments.idempotency_records')::text, to_regclass('public.idempotency_records')::text`).Scan(&inPayments, &inPublic); err != nil {
		t.Fatal(err)
	}
	if inPayments == nil || inPublic != nil {
		t.Errorf("the table is in payments: %v, in public: %v; want payments alone", inPayments != nil, inPublic != nil)
	}
}

// A multi-host URL is named with every host, in order, and without its
// password.
func TestOpen_MultiHostName(t *testing.T) {
	c := pgtest.Require(t, cluster)
	name := fresh("multi_host")
	c.NewDatabase(t, name)
	u, err := url.Parse(c.URL(name))
	if err != nil {
		t.Fatal(err)
	}
	u.Host += ",127.0.0.1:1" // a second host, never reached while the first answers
	db, err := pgstore.Open(context.Background(), u.String(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if want := "postgres://" + pgtest.User + "@" + c.Addr() + ",127.0.0.1:1/" + name; db.String() != want {
		t.Errorf("String() = %q, want %q", db.String(), want)
	}
}
