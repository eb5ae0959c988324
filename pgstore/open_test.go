package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/internal/testkit/pgtest"
	"github.com/paymentsd/paymentsd/pgstore"
)

// Processes starting together on a new database migrate it once; a
// database migrated by a newer binary is refused, naming both versions.
func TestOpen_Migrations_OnceConcurrentlyAndNewerRefused(t *testing.T) {
	name := fresh("migrate")
	url := pgtest.Require(t, cluster).NewDatabase(t, name)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db, err := pgstore.Open(context.Background(), url, nil)
			if err != nil {
				t.Errorf("concurrent Open: %v", err)
				return
			}
			db.Close()
		}()
	}
	wg.Wait()

	db := open(t, name, nil)
	var version int
	if err := db.Pool().QueryRow(context.Background(), `SELECT version FROM schema_versions WHERE component = 'idempotency'`).Scan(&version); err != nil || version != 8 {
		t.Fatalf("schema version = %d, %v; want 8", version, err)
	}
	if _, err := db.Pool().Exec(context.Background(), `UPDATE schema_versions SET version = 9 WHERE component = 'idempotency'`); err != nil {
		t.Fatal(err)
	}
	_, err := pgstore.Open(context.Background(), url, nil)
	if !errors.Is(err, pgstore.ErrSchemaTooNew) || !strings.Contains(err.Error(), "version 9") || !strings.Contains(err.Error(), "up to 8") {
		t.Errorf("Open of a newer schema = %v, want ErrSchemaTooNew naming versions 9 and 8", err)
	}
}

// A password never appears in Open's errors.
func TestOpen_BadPassword_ErrorHidesIt(t *testing.T) {
	c := pgtest.Require(t, cluster)
	name := fresh("password")
	c.NewDatabase(t, name)
	url := strings.Replace(c.URL(name), pgtest.Password, "not-the-password-xyzzy", 1)
	_, err := pgstore.Open(context.Background(), url, nil)
	if err == nil || strings.Contains(err.Error(), "xyzzy") {
		t.Errorf("Open with a wrong password = %v, want an error without the password", err)
	}
}

// Migrating waits for another process's migration however long it takes
// (within the caller's context), not the claims' lock timeout; a tool that
// must not migrate is refused by a database not yet at its version.
func TestOpen_MigrationWaitsPastLockTimeout_NoMigrateRefusesOldSchema(t *testing.T) {
	c := pgtest.Require(t, cluster)
	name := fresh("migrate_wait")
	url := c.NewDatabase(t, name)
	ctx := context.Background()

	if _, err := pgstore.Open(ctx, url, &pgstore.Options{NoMigrate: true}); !errors.Is(err, pgstore.ErrSchemaTooOld) {
		t.Errorf("NoMigrate Open of a new database = %v, want ErrSchemaTooOld", err)
	}
	holder := pgtest.Connect(t, url)
	const migrateLock = 0x7061796d656e7473
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(migrateLock)); err != nil {
		t.Fatal(err)
	}
	unlocked := make(chan struct{})
	time.AfterFunc(time.Second, func() {
		defer close(unlocked)
		holder.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(migrateLock))
	})
	db, err := pgstore.Open(ctx, url, &pgstore.Options{LockTimeout: 100 * time.Millisecond})
	<-unlocked // holder is used by one goroutine at a time
	if err != nil {
		t.Fatalf("Open while another process migrates for 1s = %v, want it to wait", err)
	}
	db.Close()
	if db, err := pgstore.Open(ctx, url, &pgstore.Options{NoMigrate: true}); err != nil {
		t.Errorf("NoMigrate Open of a migrated database = %v", err)
	} else {
		db.Close()
	}
}
