package pgstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrateLock is the advisory lock every migration holds, whatever its
// component. Processes that start together take turns, and the first one
// migrates.
const migrateLock = 0x7061796d656e7473 // "payments"

// Migrate brings component's tables up to date with the migrations in fsys.
// They are files named NNNN_description.sql, numbered from 1 without gaps,
// applied in order. Migrate runs in one transaction holding an advisory
// lock. So several processes starting together migrate once, and none sees
// a half-migrated schema. Each component's version is kept in the table
// schema_versions. A database whose version is newer than the newest file
// (written by a newer binary) is refused. The error names both versions:
// this binary would not know its tables.
//
// It is a small versioned runner rather than a migration library. The
// schema is a few tables, the runner fits on a page, and it needs no
// dependency beyond pgx.
func Migrate(ctx context.Context, pool *pgxpool.Pool, component string, fsys fs.FS) error {
	files, err := migrationFiles(fsys)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", component, err)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// The pool's lock_timeout is for claims. A migration waits for the
		// lock and for its tables as long as ctx lets it.
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = 0`); err != nil {
			return fmt.Errorf("migrate %s: %w", component, err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return fmt.Errorf("migrate %s: lock: %w", component, err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_versions (
			component text PRIMARY KEY,
			version integer NOT NULL
		)`); err != nil {
			return fmt.Errorf("migrate %s: %w", component, err)
		}
		var version int
		err := tx.QueryRow(ctx, `SELECT version FROM schema_versions WHERE component = $1`, component).Scan(&version)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("migrate %s: read version: %w", component, err)
		}
		if version > len(files) {
			return fmt.Errorf("%w: the database's %s schema is version %d, this binary knows versions up to %d; run a newer binary",
				ErrSchemaTooNew, component, version, len(files))
		}
		from := version
		for i, name := range files[from:] {
			sql, err := fs.ReadFile(fsys, name)
			if err != nil {
				return fmt.Errorf("migrate %s: %w", component, err)
			}
			if _, err := tx.Exec(ctx, string(sql)); err != nil {
				return fmt.Errorf("migrate %s: %s: %w", component, name, err)
			}
			version = from + i + 1
		}
		_, err = tx.Exec(ctx, `INSERT INTO schema_versions (component, version) VALUES ($1, $2)
			ON CONFLICT (component) DO UPDATE SET version = excluded.version`, component, version)
		return err
	})
}

// CheckVersion reports whether component's tables are at the version of the
// newest migration in fsys. It changes nothing. When they are not, it
// returns ErrSchemaTooNew or ErrSchemaTooOld, naming both versions.
func CheckVersion(ctx context.Context, pool *pgxpool.Pool, component string, fsys fs.FS) error {
	files, err := migrationFiles(fsys)
	if err != nil {
		return fmt.Errorf("check %s schema: %w", component, err)
	}
	var version int
	err = pool.QueryRow(ctx, `SELECT version FROM schema_versions WHERE component = $1`, component).Scan(&version)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == "42P01": // no schema_versions yet
		version = 0
	case err != nil:
		return fmt.Errorf("check %s schema: %w", component, err)
	}
	switch {
	case version > len(files):
		return fmt.Errorf("%w: the database's %s schema is version %d, this binary knows versions up to %d", ErrSchemaTooNew, component, version, len(files))
	case version < len(files):
		return fmt.Errorf("%w: the database's %s schema is version %d, this binary needs %d; start a server of this version first, which migrates it", ErrSchemaTooOld, component, version, len(files))
	}
	return nil
}

// migrationFiles lists the .sql files of fsys in order, checking that they
// are numbered 1, 2, 3, ...
func migrationFiles(fsys fs.FS) ([]string, error) {
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	for i, name := range names {
		num, _, ok := strings.Cut(path.Base(name), "_")
		if n, err := strconv.Atoi(num); !ok || err != nil || n != i+1 {
			return nil, fmt.Errorf("migration %s: want a name starting %04d_", name, i+1)
		}
	}
	return names, nil
}
