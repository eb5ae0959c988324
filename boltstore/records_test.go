package boltstore_test

import (
	"path/filepath"
	"testing"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/once/oncetest"
	"github.com/paymentsd/paymentsd/storage/storagetest"
)

func TestConformance(t *testing.T) { storagetest.RunTests(t, openBolt) }

func TestOnce(t *testing.T) { oncetest.RunTests(t, openBolt) }

func TestOnceCrash(t *testing.T) { oncetest.RunCrashTests(t, openBolt) }

// openBolt opens the file in dir. A small batch makes the sweeper tests
// cross batch boundaries.
func openBolt(t *testing.T, dir string) storagetest.Store {
	db, err := boltstore.Open(filepath.Join(dir, "paymentsd.db"), &boltstore.Options{SweepBatch: 7})
	if err != nil {
		t.Fatal(err)
	}
	return db
}
