package boltstore

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/internal/sealed"
	"github.com/paymentsd/paymentsd/storage"
)

// TestScale fills the store with PAYMENTSD_SCALE_RECORDS completed records
// (run by `make bench` with 1,000,000) and reports claim and replay latency
// against a store of 1,000, the longest stall a sweep of them all causes to
// concurrent claims, and the file size after sweeping and refilling. It
// asserts only that the refilled file did not grow: the figures are
// measurements, for BENCHMARKS.md, not pass marks.
func TestScale(t *testing.T) {
	total, _ := strconv.Atoi(os.Getenv("PAYMENTSD_SCALE_RECORDS"))
	if total == 0 {
		t.Skip("set PAYMENTSD_SCALE_RECORDS, e.g. 1000000 (make bench does)")
	}
	s := &scaleRun{t: t, db: openTest(t), t0: time.Now()}
	response, _ := anypb.New(wrapperspb.Bytes(make([]byte, 300)))
	s.result = &storage.Result{Response: response}
	s.fp = sha256.Sum256([]byte("body"))

	s.fill(0, 1000)
	claim1k, replay1k := s.measure(1000)
	start := time.Now()
	s.fill(1000, total)
	t.Logf("filled %d records in %v", total, time.Since(start).Round(time.Second))
	claimN, replayN := s.measure(total)

	path := s.db.Path()
	s.reopen(path, total)
	t.Logf("median claim+complete: %v with 1k records, %v with %d (%.2fx)", claim1k, claimN, total, float64(claimN)/float64(claim1k))
	t.Logf("median replay:         %v with 1k records, %v with %d (%.2fx)", replay1k, replayN, total, float64(replayN)/float64(replay1k))
	filled := fileSize(t, s.db)

	s.sweepUnderClaims()

	s.fill(total, 2*total)
	refilled := fileSize(t, s.db)
	t.Logf("file: %d MiB filled, %d MiB after sweeping and refilling as many records", filled>>20, refilled>>20)
	if refilled > filled+filled/10 {
		t.Errorf("the file grew from %d to %d bytes: freed pages were not reused", filled, refilled)
	}

	s.reopenUnsealed(path, total)
}

// scaleTTL is every TestScale record's time to live. The sweep runs at
// t0 plus it, so every filled record has expired by then.
const scaleTTL = time.Hour

// scaleRun is what TestScale's steps share: the store (a step may reopen
// it), the time every record is claimed at, the result they complete with,
// and a count that keeps each fresh key new.
type scaleRun struct {
	t      *testing.T
	db     *DB
	t0     time.Time
	result *storage.Result
	fp     storage.Fingerprint
	fresh  int
}

func (s *scaleRun) req(key string, now time.Time) storage.ClaimRequest {
	return storage.ClaimRequest{
		Key: storage.RecordKey{Scope: "scale", Key: key}, Fingerprint: s.fp,
		Now: now, Lease: time.Minute, TTL: scaleTTL,
	}
}

// fill writes completed records fill-from .. fill-to, 20,000 a transaction.
func (s *scaleRun) fill(from, to int) {
	for lo := from; lo < to; lo += 20000 {
		err := s.db.bolt.Update(func(tx *bolt.Tx) error {
			for i := lo; i < min(lo+20000, to); i++ {
				r := s.req(fmt.Sprintf("fill-%09d", i), s.t0)
				_, rec := storage.Decide(nil, false, r, storage.Durable, s.db.Claimant())
				if err := putClaim(tx, recordKey(r.Key), nil, rec.Completed(s.result)); err != nil {
					return err // the record and its index entry, as a claim writes them
				}
			}
			return nil
		})
		if err != nil {
			s.t.Fatal(err)
		}
	}
}

// measure returns median fresh claim+complete and replay latencies.
func (s *scaleRun) measure(records int) (claim, replay time.Duration) {
	ctx := context.Background()
	var claims, replays []time.Duration
	for i := range 500 {
		s.fresh++
		r := s.req(fmt.Sprintf("new-%d", s.fresh), s.t0)
		start := time.Now()
		_, rec, err := s.db.Claim(ctx, r)
		if err == nil {
			err = s.db.Complete(ctx, r.Key, rec.Completed(s.result))
		}
		claims = append(claims, time.Since(start))
		if err != nil {
			s.t.Fatal(err)
		}
		r = s.req(fmt.Sprintf("fill-%09d", (i*7919)%records), s.t0)
		start = time.Now()
		if o, _, err := s.db.Claim(ctx, r); err != nil || o != storage.OutcomeReplay {
			s.t.Fatalf("replay: %v %v", o, err)
		}
		replays = append(replays, time.Since(start))
	}
	slices.Sort(claims)
	slices.Sort(replays)
	return claims[len(claims)/2], replays[len(replays)/2]
}

// reopen closes the store and opens its file again. Open checks the whole
// file before serving from it: it logs what that costs, and what Check
// alone costs.
func (s *scaleRun) reopen(path string, total int) {
	t := s.t
	s.db.Close()
	start := time.Now()
	reopened, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("reopening the file of %d records, with its check, took %v", total, time.Since(start).Round(time.Millisecond))
	s.db = reopened
	t.Cleanup(func() { s.db.Close() })
	start = time.Now()
	if err := s.db.Check(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Check of the structure and every record's checksum took %v", time.Since(start).Round(time.Millisecond))
}

// sweepUnderClaims sweeps everything while claims go on, and logs how
// long the claims took.
func (s *scaleRun) sweepUnderClaims() {
	t, ctx := s.t, context.Background()
	sweepDone := make(chan struct{})
	var swept int
	start := time.Now()
	go func() {
		defer close(sweepDone)
		var err error
		if swept, err = s.db.Sweep(ctx, s.t0.Add(scaleTTL)); err != nil {
			t.Error(err)
		}
	}()
	var stalls []time.Duration
	for running := true; running; {
		select {
		case <-sweepDone:
			running = false
		default:
		}
		s.fresh++
		r := s.req(fmt.Sprintf("during-%d", s.fresh), s.t0.Add(scaleTTL))
		begin := time.Now()
		if _, _, err := s.db.Claim(ctx, r); err != nil {
			t.Fatal(err)
		}
		stalls = append(stalls, time.Since(begin))
	}
	slices.Sort(stalls)
	t.Logf("swept %d records in %v; %d concurrent claims: median %v, p99 %v, longest %v",
		swept, time.Since(start).Round(time.Millisecond), len(stalls),
		stalls[len(stalls)/2], stalls[len(stalls)*99/100], stalls[len(stalls)-1])
}

// reopenUnsealed stores the same records as a version before checksums
// wrote them, and logs what the first Open of such a file costs to seal
// them.
func (s *scaleRun) reopenUnsealed(path string, total int) {
	t := s.t
	unseal(t, s.db.bolt)
	s.db.Close()
	start := time.Now()
	var err error
	if s.db, err = Open(path, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("the first Open of %d records written before checksums, sealing them, took %v", total, time.Since(start).Round(time.Millisecond))
	if err := s.db.Check(); err != nil {
		t.Fatal(err)
	}
}

// unseal stores every record bare, as a version before checksums did, and
// drops the mark that says they are sealed.
func unseal(t *testing.T, b *bolt.DB) {
	t.Helper()
	var after []byte
	for {
		err := b.Update(func(tx *bolt.Tx) error {
			records := tx.Bucket(bucketRecords)
			var bare [][2][]byte
			c := records.Cursor()
			k, v := c.First()
			if after != nil {
				k, v = c.Seek(append(after, 0))
			}
			for ; k != nil && len(bare) < 20000; k, v = c.Next() {
				payload, err := sealed.Open(k, v)
				if err != nil {
					return err
				}
				bare = append(bare, [2][]byte{clone(k), clone(payload)})
			}
			for _, kv := range bare {
				if err := records.Put(kv[0], kv[1]); err != nil {
					return err
				}
			}
			if after = nil; len(bare) == 20000 {
				after = bare[len(bare)-1][0]
			}
			if err := tx.DeleteBucket([]byte("idempotency_sealed")); err != nil && !errors.Is(err, berrors.ErrBucketNotFound) {
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if after == nil {
			return
		}
	}
}

func fileSize(t *testing.T, db *DB) int64 {
	info, err := os.Stat(db.Path())
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}
