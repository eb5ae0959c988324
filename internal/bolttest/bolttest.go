// Package bolttest makes and measures bbolt data files, for the tests that
// damage them.
package bolttest

import (
	"context"
	"crypto/rand"
	"fmt"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/paymentsd/paymentsd/boltstore"
)

// Fill writes mib MiB of random 1 KiB values into bucket, a thousand a
// transaction, as an embedder's data fills a busy server's file.
func Fill(tb testing.TB, db *boltstore.DB, bucket string, mib int) {
	tb.Helper()
	value := make([]byte, 1024)
	for batch := range mib {
		err := db.Update(context.Background(), func(tx *bolt.Tx) error {
			b, err := tx.CreateBucketIfNotExists([]byte(bucket))
			if err != nil {
				return err
			}
			for i := range 1000 {
				rand.Read(value)
				if err := b.Put(fmt.Appendf(nil, "%s-%d-%d", bucket, batch, i), value); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			tb.Fatal(err)
		}
	}
}

// UsedSize is how much of the file at path bbolt uses: its high-water mark.
// The file is longer, since bbolt grows it ahead of need; cutting only that
// slack loses nothing.
func UsedSize(tb testing.TB, path string) int64 {
	tb.Helper()
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		tb.Fatal(err)
	}
	defer db.Close()
	var size int64
	db.View(func(tx *bolt.Tx) error {
		size = tx.Size()
		return nil
	})
	return size
}
