package boltstore

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/storage"
)

// Writes of 300-byte values, three ways, each alone and with 64 writers:
// bbolt's DB.Update (one fsync per write), DB.Batch (fsyncs shared after a
// 10ms wait) and the DB's group commit. Run with
//
//	go test -run '^$' -bench BenchmarkWrite -benchtime 2s ./boltstore
func BenchmarkWrite(b *testing.B) {
	value := make([]byte, 300)
	ways := []struct {
		name  string
		write func(db *DB, fn func(*bolt.Tx) error) error
	}{
		{"Update", func(db *DB, fn func(*bolt.Tx) error) error { return db.bolt.Update(fn) }},
		{"Batch", func(db *DB, fn func(*bolt.Tx) error) error { return db.bolt.Batch(fn) }},
		{"GroupCommit", func(db *DB, fn func(*bolt.Tx) error) error { return db.Update(context.Background(), fn) }},
	}
	for _, way := range ways {
		for _, writers := range []int{1, 64} {
			b.Run(fmt.Sprintf("%s/writers=%d", way.name, writers), func(b *testing.B) {
				db := openBench(b)
				var n atomic.Uint64
				before := db.Commits()
				b.SetParallelism(max(1, writers/runtime.GOMAXPROCS(0)))
				run := func() {
					key := binary.BigEndian.AppendUint64(nil, n.Add(1))
					err := way.write(db, func(tx *bolt.Tx) error {
						return tx.Bucket(bucketTest).Put(key, value)
					})
					if err != nil {
						b.Error(err)
					}
				}
				b.ResetTimer()
				if writers == 1 {
					for b.Loop() {
						run()
					}
				} else {
					b.RunParallel(func(pb *testing.PB) {
						for pb.Next() {
							run()
						}
					})
				}
				b.StopTimer()
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
				if way.name == "GroupCommit" {
					b.ReportMetric(float64(db.Commits()-before)/float64(b.N), "commits/write")
				}
			})
		}
	}
}

// BenchmarkRecords measures the idempotency paths of the store: a fresh
// claim, its completion, and a replay (a read transaction only).
func BenchmarkRecords(b *testing.B) {
	now := time.Now()
	req := func(i uint64) storage.ClaimRequest {
		return storage.ClaimRequest{
			Key:         storage.RecordKey{Scope: "bench", Key: fmt.Sprint("key-", i)},
			Fingerprint: sha256.Sum256([]byte("body")),
			Now:         now, Lease: time.Minute, TTL: time.Hour,
		}
	}
	response, err := anypb.New(wrapperspb.Bytes(make([]byte, 300)))
	if err != nil {
		b.Fatal(err)
	}
	result := &storage.Result{Response: response}
	ctx := context.Background()

	b.Run("ClaimFresh", func(b *testing.B) {
		db := openBench(b)
		var i uint64
		for b.Loop() {
			i++
			if o, _, err := db.Claim(ctx, req(i)); err != nil || o != storage.OutcomeFresh {
				b.Fatal(o, err)
			}
		}
	})
	b.Run("ClaimAndComplete", func(b *testing.B) {
		db := openBench(b)
		var i uint64
		for b.Loop() {
			i++
			_, rec, err := db.Claim(ctx, req(i))
			if err != nil {
				b.Fatal(err)
			}
			if err := db.Complete(ctx, req(i).Key, rec.Completed(result)); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Replay", func(b *testing.B) {
		db := openBench(b)
		_, rec, _ := db.Claim(ctx, req(0))
		db.Complete(ctx, req(0).Key, rec.Completed(result))
		for b.Loop() {
			if o, _, err := db.Claim(ctx, req(0)); err != nil || o != storage.OutcomeReplay {
				b.Fatal(o, err)
			}
		}
	})
}

func openBench(b *testing.B) *DB { return openTest(b) }
