package boltstore

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	bolt "go.etcd.io/bbolt"
)

func openTest(t testing.TB) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "paymentsd.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	err = db.Update(context.Background(), func(tx *bolt.Tx) error {
		_, err := tx.CreateBucket(bucketTest)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// bucketTest is the embedder's own bucket in these tests.
var bucketTest = []byte("test")

func put(key string) func(*bolt.Tx) error {
	return func(tx *bolt.Tx) error { return tx.Bucket(bucketTest).Put([]byte(key), []byte("v")) }
}

func has(t testing.TB, db *DB, key string) bool {
	t.Helper()
	found := false
	db.bolt.View(func(tx *bolt.Tx) error {
		found = tx.Bucket(bucketTest).Get([]byte(key)) != nil
		return nil
	})
	return found
}

func TestCommit_FailedWriteRollsBackAloneAndTheRestCommit(t *testing.T) {
	db := openTest(t)
	boom := errors.New("boom")
	runs := 0
	batch := []*write{
		{fn: put("a"), done: make(chan error, 1)},
		{fn: func(tx *bolt.Tx) error {
			runs++
			put("bad")(tx)
			return boom
		}, done: make(chan error, 1)},
		{fn: put("c"), done: make(chan error, 1)},
	}
	writes := slices.Clone(batch) // commit reuses batch's array
	before, beforeWrites := db.Commits(), db.CommittedWrites()
	db.commit(batch)
	for i, want := range []error{nil, boom, nil} {
		if err := <-writes[i].done; !errors.Is(err, want) {
			t.Errorf("write %d: %v, want %v", i, err, want)
		}
	}
	if !has(t, db, "a") || !has(t, db, "c") || has(t, db, "bad") {
		t.Errorf("after the batch: a %t, c %t, bad %t; want a and c only", has(t, db, "a"), has(t, db, "c"), has(t, db, "bad"))
	}
	// The batch, then the writes before the failed one, then those after it.
	if got := db.Commits() - before; got != 3 || runs != 1 {
		t.Errorf("%d commits, failing write ran %d times; want 3 and 1", got, runs)
	}
	// Two writes committed, one each: the failed one and the rolled-back
	// batch carried none.
	if got := db.CommittedWrites() - beforeWrites; got != 2 {
		t.Errorf("%d committed writes, want 2", got)
	}
}

func TestUpdate_ConcurrentWritesAllDurable(t *testing.T) {
	db := openTest(t)
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Go(func() {
			if err := db.Update(context.Background(), put(fmt.Sprint(i))); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for i := range 200 {
		if !has(t, db, fmt.Sprint(i)) {
			t.Fatalf("write %d is missing", i)
		}
	}
	if got := db.CommittedWrites(); got != 201 { // the 200 and openTest's bucket
		t.Errorf("%d committed writes, want 201", got)
	}
	t.Logf("200 concurrent writes in %d commits", db.Commits())
}

func TestUpdate_AfterClose_ErrClosed(t *testing.T) {
	db := openTest(t)
	db.Close()
	if err := db.Update(context.Background(), put("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("update after Close: %v, want ErrClosed", err)
	}
}

func TestUpdate_PanickingWrite_FailsAloneProcessLives(t *testing.T) {
	db := openTest(t)
	var wg sync.WaitGroup
	errs := make([]error, 20)
	for i := range errs {
		wg.Go(func() {
			errs[i] = db.Update(context.Background(), func(tx *bolt.Tx) error {
				if i == 7 {
					put("doomed")(tx)
					panic("write bug")
				}
				return put(fmt.Sprint(i))(tx)
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i == 7 {
			if err == nil || !strings.Contains(err.Error(), "write bug") {
				t.Errorf("panicking write: %v, want an error naming the panic", err)
			}
			continue
		}
		if err != nil || !has(t, db, fmt.Sprint(i)) {
			t.Errorf("write %d beside the panic: %v, stored %t; want committed", i, err, has(t, db, fmt.Sprint(i)))
		}
	}
	if has(t, db, "doomed") {
		t.Error("the panicking write's put was committed")
	}
	if err := db.Update(context.Background(), put("after")); err != nil {
		t.Errorf("write after the panic: %v", err)
	}
}

func TestUpdate_CanceledContext_WritesNothing(t *testing.T) {
	db := openTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := db.Update(ctx, put("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Update with a canceled context: %v, want context.Canceled", err)
	}
	if has(t, db, "x") {
		t.Error("a canceled Update wrote")
	}
}

func TestCommit_ManyFailingWrites_EachRunsAtMostTwice(t *testing.T) {
	db := openTest(t)
	var batch []*write
	runs := make([]int, 100)
	for i := range runs {
		batch = append(batch, &write{fn: func(tx *bolt.Tx) error {
			runs[i]++
			if i%2 == 1 {
				return errors.New("conflict")
			}
			return put(fmt.Sprint(i))(tx)
		}, done: make(chan error, 1)})
	}
	writes := slices.Clone(batch)
	db.commit(batch)
	for i, w := range writes {
		if err := <-w.done; (err != nil) != (i%2 == 1) {
			t.Errorf("write %d: %v", i, err)
		}
		if runs[i] > 2 {
			t.Errorf("write %d ran %d times, want at most 2", i, runs[i])
		}
	}
}

func TestUpdate_MisusedBucket_IsTheCallersErrorNotDamage(t *testing.T) {
	db := openTest(t)
	err := db.Update(context.Background(), func(tx *bolt.Tx) error {
		return tx.Bucket([]byte("no such bucket")).Put([]byte("k"), []byte("v"))
	})
	if err == nil || errors.Is(err, ErrDamaged) {
		t.Errorf("Put on a bucket that does not exist: %v, want an error that is not ErrDamaged", err)
	}
	if err := db.Health(); err != nil {
		t.Errorf("Health after a caller's misuse: %v, want healthy", err)
	}
	if err := db.Update(context.Background(), put("after")); err != nil {
		t.Errorf("write after the misuse: %v", err)
	}
}

// TestCheck_WhileWritesCommit_FindsNothing checks a sound file again and
// again while writers commit: bbolt's check of a read transaction is not
// sound while writes commit meanwhile (pages a later commit freed look
// reachable and free at once), and an operator told that a sound file is
// damaged might set it aside, and with it every record.
func TestCheck_WhileWritesCommit_FindsNothing(t *testing.T) {
	db := openTest(t)
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				db.Update(context.Background(), func(tx *bolt.Tx) error {
					return tx.Bucket(bucketTest).Put(fmt.Appendf(nil, "w%d-%d", w, i), make([]byte, 500))
				})
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	for i := range 30 {
		if err := db.Check(); err != nil {
			t.Fatalf("check %d of a sound file under writes: %v", i+1, err)
		}
	}
}

// TestCheck_AfterACommitFailed_WalksTheFile: once a commit failed after its
// meta page was written, the DB takes no more writes, though its file may
// well be sound; Check still walks the file and says what it finds, rather
// than answer with that failure, which an operator would read as damage.
func TestCheck_AfterACommitFailed_WalksTheFile(t *testing.T) {
	db := openTest(t)
	db.health.poison(&damaged{latch: true, cause: errors.New("transaction 7 failed (fdatasync: EIO) after its meta page was written")})
	if err := db.Update(context.Background(), func(*bolt.Tx) error { return nil }); !errors.Is(err, ErrDamaged) {
		t.Fatalf("a write after the failure: %v, want it refused", err)
	}
	if err := db.Check(); err != nil {
		t.Errorf("Check of a sound file after a failed commit: %v, want nil", err)
	}
}
