// Package bolttest makes and measures bbolt data files. The tests that
// damage files use it.
package bolttest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
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
// The file is longer, since bbolt grows it ahead of need. Cutting only
// that slack loses nothing.
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

// ChangeByte sets to b the byte at offset of every marker in the file at
// path. Freed pages may hold old copies, so there may be several. It
// writes through a file descriptor, as a failing disk would. It returns
// how many it changed, failing the test when there are none.
func ChangeByte(tb testing.TB, path string, marker []byte, offset int, b byte) int {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	n := 0
	for from := 0; ; n++ {
		i := bytes.Index(data[from:], marker)
		if i < 0 {
			break
		}
		if _, err := f.WriteAt([]byte{b}, int64(from+i+offset)); err != nil {
			tb.Fatal(err)
		}
		from += i + 1
	}
	if n == 0 {
		tb.Fatalf("%q is not in %s", marker, path)
	}
	return n
}
