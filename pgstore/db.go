// Package pgstore keeps idempotency records in PostgreSQL. Any number of
// processes (paymentsd replicas) behind a load balancer then share them.
// The table's primary key on (scope, key) makes one claim of a key win,
// whichever process its duplicates reach.
//
// It is an storage.TxStore. A handler's writes made through Run, with the
// context the interceptor gives it, join the transaction that completes its
// record. So the two commit together or not at all. For a transactional
// method, the record is inserted in that same transaction: one commit per
// request. A duplicate arriving meanwhile, on any process, waits for the
// key's lock (LockTimeout at most), then replays the result.
//
// Leases and expiry are judged on the database's clock, read in the
// claim's own statements. So a process whose clock runs ahead cannot take
// over a live claim or expire a live record early. Waiters (the
// interceptor's WithInFlightWait) are woken through LISTEN/NOTIFY when a
// claim ends in any process.
package pgstore

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/paymentsd/paymentsd/internal/ledger"
	"github.com/paymentsd/paymentsd/storage"
)

// Errors returned when opening a database.
var (
	// ErrSchemaTooNew is returned when the database was migrated by a newer
	// binary than this one.
	ErrSchemaTooNew = errors.New("pgstore: database schema is newer than this binary")
	// ErrSchemaTooOld is returned, with NoMigrate, when the database has
	// not been migrated to this binary's schema.
	ErrSchemaTooOld = errors.New("pgstore: database schema is older than this binary")
)

// Errors returned by a DB in use.
var (
	// ErrTxDone is returned by Run for a write through a unit of work that
	// has ended.
	ErrTxDone = errors.New("pgstore: write to a unit of work that has ended")
)

//go:embed migrations/*.sql
var migrations embed.FS

// component names the records' tables in schema_versions.
const component = "idempotency"

// Migrations are the SQL files of the records' tables, named
// NNNN_description.sql and applied in order. MigrateRecords applies them.
// They are for teams that apply migrations with a tool of their own (see
// Options.OwnMigrations).
func Migrations() fs.FS {
	sub, _ := fs.Sub(migrations, "migrations") // a fixed, valid path
	return sub
}

// MigrateRecords brings the records' tables in pool's database up to date
// (Migrate), without opening a store. Open and New migrate first unless
// told not to.
func MigrateRecords(ctx context.Context, pool *pgxpool.Pool) error {
	return Migrate(ctx, pool, component, Migrations())
}

// Options tunes a DB. The zero value is ready to use.
type Options struct {
	// MaxConns is the size of the connection pool Open makes. A request
	// under the interceptor holds at most one connection from its claim to
	// its commit. Default: the connection string's pool_max_conns, else 20.
	// New uses the pool it is given as it is.
	MaxConns int32
	// LockTimeout bounds how long a claim waits for another process's
	// uncommitted claim of the same key. The claim then answers that the
	// key is in flight. It also bounds how long Open's pool waits for any
	// lock (its lock_timeout). Default 500ms.
	LockTimeout time.Duration
	// CallerClock judges leases and expiry by the times callers pass,
	// instead of the database's clock. Those are ClaimRequest.Now, a
	// renewal's LeaseExpiry and Sweep's now. It is only for tests that
	// simulate time. Processes whose clocks differ would then disagree
	// about leases.
	CallerClock bool
	// Logger receives the notice listener's reconnections. Default: none.
	Logger *slog.Logger
	// NoMigrate opens a database without bringing its schema up to date.
	// The schema must already be at this binary's version, or Open fails.
	// It is for tools that read what servers wrote (paymentsd record). Such
	// tools must not change the schema under the servers.
	NoMigrate bool
	// OwnMigrations says the embedder applies Migrations with a tool of
	// its own. Open and New then neither migrate nor read schema_versions.
	// Tables that are missing fail Probe, and the requests, instead.
	OwnMigrations bool
	// ClaimantID is who this DB's claims are made by, in the records (a
	// claim's owner, which the console shows). Default: the host, the
	// process id and a random suffix. A process that opens several
	// databases may name itself once for all of them.
	ClaimantID string
}

// defaultMaxConns is the size of Open's pool when neither Options nor the
// connection string gives one.
const defaultMaxConns = 20

// DB is an idempotency store on a PostgreSQL database.
type DB struct {
	pool     *pgxpool.Pool
	ownsPool bool // Open made it: Close closes it
	opts     Options
	watcher  *watcher
	name     string // for String

	// standby is what the DB knows of the server's synchronous standby.
	standby *standby

	// ledger is what this process knows of its records beyond the
	// database. That is its uncommitted claims and the completed records it
	// trusts.
	ledger *ledger.Ledger

	mu     sync.Mutex
	health error // the last probe's finding; nil when healthy
	// writeFailed is the last failure of a write that says the database
	// cannot write (cannotWrite), until a probe writes. writeFailures counts
	// them, so that a probe clears only those noted before it began.
	writeFailed   error
	writeFailures uint64
	// clockOffset is the database's clock minus this process's.
	clockOffset time.Duration
}

// listenWait bounds how long Open waits for the watcher to listen.
const listenWait = 5 * time.Second

// Open connects to the database connString names, with a pool of its
// own. It opens the store in it as New does. The connection string is a
// postgres:// URL or key=value pairs. The libpq environment variables
// (PGPASSWORD and the like) fill in what it leaves out. Its settings are
// honoured, pool_max_conns and search_path (a schema other than public)
// among them. Options.MaxConns, when given, wins. Each host gets 3 s to
// connect unless connString sets connect_timeout. Errors never contain the
// password.
func Open(ctx context.Context, connString string, opts *Options) (*DB, error) {
	o := withDefaults(opts)
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err) // pgx leaves the password out
	}
	switch {
	case o.MaxConns > 0:
		cfg.MaxConns = o.MaxConns
	case !setsMaxConns(connString):
		cfg.MaxConns = defaultMaxConns
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = strconv.FormatInt(max(o.LockTimeout.Milliseconds(), 1), 10)
	ConfigurePool(cfg)
	sb := &standby{}
	sb.configure(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", err)
	}
	db, err := open(ctx, pool, opts, sb)
	if err != nil {
		pool.Close()
		return nil, err
	}
	return db, nil
}

// setsMaxConns reports whether connString sets pool_max_conns itself.
// The setting is consumed by pgxpool's parser and left in place by pgx's.
func setsMaxConns(connString string) bool {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return false
	}
	_, ok := cfg.RuntimeParams["pool_max_conns"]
	return ok
}

// New opens the store in the database of pool, the embedder's own. The
// pool's size, tracer, TLS roots and hooks are the embedder's, and Close
// leaves it open. New brings the schema up to date first (see Options for
// the other ways). It listens for ended claims on a connection of its own,
// made with pool's settings. It waits up to 5 s for that. A claim never
// waits for a key's lock on the pool (see DB.look). Other lock waits (a
// table's, behind a schema change) may still happen. They run as long as
// the request's context if the pool has no lock_timeout of its own.
//
// With a synchronous standby, make the pool from a config passed to
// ConfigurePool first. pgx otherwise cancels a statement cut off by its
// deadline, and a cancelled commit that waits for the standby is kept
// locally: a failover then loses what a retry may have been told was done.
func New(ctx context.Context, pool *pgxpool.Pool, opts *Options) (*DB, error) {
	return open(ctx, pool, opts, nil)
}

// ConfigurePool makes cfg's connections keep a synchronous standby's
// promise, as Open's do. They never cancel a statement, and no
// statement_timeout of the role or database applies to them (see
// refuseCancelRequests). Each host gets 3 s to connect unless cfg sets a
// connect timeout. An embedder calls it before making the pool it passes
// to New. Open also tracks the server's warnings of a wait cancelled by
// someone else, and tries last a server whose commits stalled; New's pool
// does neither.
func ConfigurePool(cfg *pgxpool.Config) {
	refuseCancelRequests(&cfg.ConnConfig.Config)
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "0"
	boundConnect(&cfg.ConnConfig.Config)
}

// open is New. With sb, the standby its pool's config was made for, the
// pool is Open's, and the DB closes it.
func open(ctx context.Context, pool *pgxpool.Pool, opts *Options, sb *standby) (*DB, error) {
	o := withDefaults(opts)
	if err := pool.Ping(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: connect: %w", err)
	}
	switch {
	case o.OwnMigrations:
	case o.NoMigrate:
		if err := CheckVersion(ctx, pool, component, Migrations()); err != nil {
			return nil, err
		}
	default:
		if err := MigrateRecords(ctx, pool); err != nil {
			return nil, err
		}
	}
	cfg := pool.Config().ConnConfig
	db := &DB{
		pool:     pool,
		ownsPool: sb != nil,
		standby:  cmp.Or(sb, &standby{}),
		opts:     o,
		ledger:   ledger.New(storage.Claimant{ID: cmp.Or(o.ClaimantID, NewClaimantID())}, completedTrust),
		name:     fmt.Sprintf("postgres://%s@%s/%s", url.PathEscape(cfg.User), hosts(cfg), url.PathEscape(cfg.Database)),
	}
	db.watcher = newWatcher(cfg.Copy(), o.Logger)
	// Notices sent before the watcher listens are missed. A waiter would
	// then find its claim ended only by polling.
	if !db.watcher.waitListening(ctx, listenWait) {
		o.Logger.LogAttrs(ctx, slog.LevelWarn, "pgstore: not yet listening for ended claims; waiters poll until it does",
			slog.Duration("waited", listenWait))
	}
	return db, nil
}

// hosts names every host:port cfg tries, in order, as a multi-host URL
// does. A log that named the first alone would hide the one in use after a
// failover.
func hosts(cfg *pgx.ConnConfig) string {
	names := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, fb := range cfg.Fallbacks {
		if name := net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))); !slices.Contains(names, name) {
			names = append(names, name) // a host with two TLS attempts is one host
		}
	}
	return strings.Join(names, ",")
}

// withDefaults is opts with its zero values replaced by the defaults.
func withDefaults(opts *Options) Options {
	o := Options{LockTimeout: 500 * time.Millisecond}
	if opts != nil {
		o = *opts
		o.LockTimeout = cmp.Or(opts.LockTimeout, 500*time.Millisecond)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// Close stops listening, and ends the health probe's heartbeat if one is
// pending. If Open made the pool, Close closes it, waiting for
// connections in use to be returned.
func (db *DB) Close() error {
	db.watcher.close()
	db.endBeat()
	if db.ownsPool {
		db.pool.Close()
	}
	return nil
}

// String names the database as a URL without its password, for logs.
func (db *DB) String() string { return db.name }

// Pool is the connection pool. It is for an embedder's own statements
// outside any request's unit of work.
func (db *DB) Pool() *pgxpool.Pool { return db.pool }

// Querier runs statements: the request's transaction, or the pool.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Run calls fn with the transaction of the Tx that ctx carries (a handler
// under the interceptor). The statements of fn then commit with the
// request's record, or not at all. An error fn returns fails the whole Tx,
// which stores nothing. Without a Tx, fn runs in a transaction of its own,
// committed when fn returns nil. Either way the transaction is READ
// COMMITTED, whatever the database's default, as a Tx's is. So a call
// without an idempotency key runs its statements as one with a key does.
// A transaction of its own commits as Read proves a read: whatever fn
// read or wrote, Run returns once the synchronous standby has it.
//
// Return misses that are answers (no such row) as values, not as errors of
// fn. An error of fn means the storage failed.
func (db *DB) Run(ctx context.Context, fn func(q Querier) error) error {
	if t, ok := ctx.Value(txKey{}).(*Tx); ok && t.db == db {
		return t.run(ctx, fn)
	}
	return db.noteFailure(pgx.BeginTxFunc(ctx, db.pool, readCommitted, func(tx pgx.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, proveReadSQL)
		return err
	}))
}

// Joins reports whether ctx carries a Tx of db, which Run and Read then
// join. Its claim holds the scope's fence lock (see FenceLock).
func (db *DB) Joins(ctx context.Context) bool {
	t, ok := ctx.Value(txKey{}).(*Tx)
	return ok && t.db == db
}

// Read calls fn with the transaction of the Tx that ctx carries, as Run
// does. Without one, it calls fn with a pooled connection, each statement
// a transaction of its own, and then proves what fn read (see
// proveReadSQL): Read returns once the synchronous standby has confirmed
// that connection's server is current. So an old primary left running
// after a failover answers no read.
func (db *DB) Read(ctx context.Context, fn func(q Querier) error) error {
	if t, ok := ctx.Value(txKey{}).(*Tx); ok && t.db == db {
		return t.run(ctx, fn)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return db.noteFailure(err)
	}
	defer conn.Release()
	if err := fn(conn); err != nil {
		return err
	}
	if err := db.commitOn(ctx, conn, proveReadSQL); err != nil {
		db.standby.unconfirmed.Add(1)
		return fmt.Errorf("pgstore: what was read is not known to be on the synchronous standby, so it is not answered from: %w", err)
	}
	return nil
}

// Claimant is who this DB claims as. It is not exclusive, since other
// processes share the database. So the lease rule alone decides takeovers.
func (db *DB) Claimant() storage.Claimant { return db.ledger.Claimant() }
