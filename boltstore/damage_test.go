package boltstore_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/boltstore/bolttest"
	"github.com/paymentsd/paymentsd/storage"
)

const pageSize = 4096

// makeFile writes a data file of at least 16 MiB: idempotency records and
// an embedder's bucket of 1 KiB values, as a busy server's would be.
func makeFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "paymentsd.db")
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	now := time.Now()
	for i := range 2000 {
		req := storage.ClaimRequest{
			Key:         storage.RecordKey{Scope: "s", Key: fmt.Sprint("k", i)},
			Fingerprint: sha256.Sum256([]byte{byte(i)}), Scheme: storage.FingerprintScheme,
			Now: now, Lease: time.Minute, TTL: time.Hour,
		}
		if _, _, err := db.Claim(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	bolttest.Fill(t, db, "orders", 20)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if info, err := os.Stat(path); err != nil || info.Size() < 16<<20 {
		t.Fatalf("data file: %v, %v; want at least 16 MiB", info.Size(), err)
	}
	return path
}

// zeroPages writes n zero pages from page first, through a file descriptor
// of its own, as dd would.
func zeroPages(t *testing.T, path string, first, n int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(make([]byte, n*pageSize), first*pageSize); err != nil {
		t.Fatal(err)
	}
}

func pages(t *testing.T, path string) int64 {
	t.Helper()
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size() / pageSize
}

func TestOpen_DamagedFile_RefusedNamingFileAndRemedy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(t *testing.T, path string)
		want   string
	}{
		{"zeroed pages in the middle", func(t *testing.T, path string) {
			zeroPages(t, path, pages(t, path)/2, 16)
		}, ""},
		{"truncated to half", func(t *testing.T, path string) {
			os.Truncate(path, bolttest.UsedSize(t, path)/2)
		}, "truncated"},
		{"truncated by 10%", func(t *testing.T, path string) {
			os.Truncate(path, bolttest.UsedSize(t, path)*9/10)
		}, "truncated"},
		{"both meta pages zeroed", func(t *testing.T, path string) {
			zeroPages(t, path, 0, 2)
		}, "meta"},
		{"every page after the metas zeroed", func(t *testing.T, path string) {
			zeroPages(t, path, 2, pages(t, path)-2)
		}, ""},
		{"emptied", func(t *testing.T, path string) {
			os.Truncate(path, 0)
		}, "the file is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := makeFile(t)
			tc.damage(t, path)
			db, err := boltstore.Open(path, nil)
			if err == nil {
				db.Close()
				t.Fatal("a damaged file was opened")
			}
			msg := err.Error()
			if !errors.Is(err, boltstore.ErrDamaged) || !strings.Contains(msg, path) ||
				!strings.Contains(msg, "backup") || !strings.Contains(msg, "check") || !strings.Contains(msg, tc.want) {
				t.Errorf("Open = %v\nwant ErrDamaged naming %s, %q, a backup and the check", err, path, tc.want)
			}
			// An operator's tools read nothing from a file the server refuses.
			ro, err := boltstore.OpenReadOnly(path, 0)
			if err == nil {
				ro.Close()
				t.Fatal("OpenReadOnly opened a file that Open refuses")
			}
			if !errors.Is(err, boltstore.ErrDamaged) {
				t.Errorf("OpenReadOnly = %v, want ErrDamaged", err)
			}
		})
	}
}

// A new data file appears whole, never empty or half written, which is
// what lets Open refuse an empty one; and of two Opens racing to create
// it, neither replaces the file the other made.
func TestOpen_NewFile_CreatedWholeByOneOfTwo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "paymentsd.db")
	type opened struct {
		db  *boltstore.DB
		err error
	}
	results := make(chan opened, 2)
	for range 2 {
		go func() {
			db, err := boltstore.Open(path, &boltstore.Options{LockTimeout: 200 * time.Millisecond})
			results <- opened{db, err}
		}()
	}
	var winner *boltstore.DB
	for range 2 {
		r := <-results
		switch {
		case r.err == nil && winner == nil:
			winner = r.db
			t.Cleanup(func() { winner.Close() })
		case r.err == nil:
			r.db.Close()
			t.Fatal("two Opens of one new file both succeeded")
		case !errors.Is(r.err, boltstore.ErrLocked):
			t.Fatalf("Open = %v, want success or ErrLocked", r.err)
		}
	}
	if winner == nil {
		t.Fatal("neither Open succeeded")
	}
	bolttest.Fill(t, winner, "orders", 1)
	winner.Close()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != "paymentsd.db" {
		t.Errorf("the directory holds %v, want the data file alone", entries)
	}
	info, err := os.Stat(path)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("data file: %v, %v; want mode 0600", info, err)
	}
	db, err := boltstore.Open(path, nil) // the winner's file, with its writes
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(context.Background(), func(tx *bolt.Tx) error {
		if tx.Bucket([]byte("orders")) == nil {
			t.Error("the winner's writes are not in the file")
		}
		return nil
	})
}

// Pages damaged under a running store: reads and writes that meet them
// fail with ErrDamaged, Health reports the damage, and the process lives on.
func TestServing_DamagedPages_ErrorsNotPanicsHealthReportsIt(t *testing.T) {
	path := makeFile(t)
	db, err := boltstore.Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Health(); err != nil {
		t.Fatalf("Health before the damage: %v", err)
	}
	zeroPages(t, path, 2, pages(t, path)-2) // the mapping is shared: the store sees it at once

	ctx := context.Background()
	read := db.View(ctx, func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("orders")).ForEach(func(k, v []byte) error { return nil })
	})
	if !errors.Is(read, boltstore.ErrDamaged) || !errors.Is(read, storage.ErrDamaged) {
		t.Errorf("read over damaged pages: %v, want ErrDamaged and storage.ErrDamaged", read)
	}
	_, _, claim := db.Claim(ctx, storage.ClaimRequest{
		Key: storage.RecordKey{Scope: "s", Key: "k7"}, Fingerprint: sha256.Sum256([]byte{7}),
		Scheme: storage.FingerprintScheme, Now: time.Now(), Lease: time.Minute, TTL: time.Hour,
	})
	if !errors.Is(claim, storage.ErrDamaged) {
		t.Errorf("claim of a record on a damaged page: %v, want storage.ErrDamaged", claim)
	}
	if err := db.Health(); !errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("Health after the damage: %v, want ErrDamaged", err)
	}
	if err := db.Probe(ctx); !errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("Probe of a damaged store: %v, want ErrDamaged", err)
	}
}

func TestView_PanicOfTheCallersOwn_IsAnErrorNotDamage(t *testing.T) {
	db, err := boltstore.Open(filepath.Join(t.TempDir(), "paymentsd.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.View(context.Background(), func(tx *bolt.Tx) error {
		var ids []int
		_ = ids[len(ids)] // a bug of the caller's: index out of range
		return nil
	})
	if err == nil || errors.Is(err, boltstore.ErrDamaged) {
		t.Errorf("View whose function panics: %v, want an error that is not ErrDamaged", err)
	}
	if err := db.Health(); err != nil {
		t.Errorf("Health after a caller's panic: %v, want healthy", err)
	}
}
