package boltstore_test

import (
	"path/filepath"
	"testing"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/interceptor/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.RunTests(t, func(t *testing.T, dir string) storagetest.Store {
		// A small batch makes the sweeper tests cross batch boundaries.
		db, err := boltstore.Open(filepath.Join(dir, "paymentsd.db"), &boltstore.Options{SweepBatch: 7})
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}
