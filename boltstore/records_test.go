package boltstore_test

import (
	"path/filepath"
	"testing"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/storetest"
)

func TestConformance(t *testing.T) {
	storetest.RunTests(t, func(t *testing.T, dir string) storetest.Store {
		// A small batch makes the sweeper tests cross batch boundaries.
		db, err := boltstore.Open(filepath.Join(dir, "paymentsd.db"), &boltstore.Options{SweepBatch: 7})
		if err != nil {
			t.Fatal(err)
		}
		return db
	})
}
