package boltintents_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/paymentsd/paymentsd/boltstore"
	"github.com/paymentsd/paymentsd/daemon/intents/boltintents"
	"github.com/paymentsd/paymentsd/daemon/intents/intenttest"
)

func TestConformance(t *testing.T) {
	intenttest.RunTests(t, func(t *testing.T, dir string) intenttest.Backend {
		db, err := boltstore.Open(filepath.Join(dir, "paymentsd.db"), nil)
		if err != nil {
			t.Fatal(err)
		}
		intents, err := boltintents.New(context.Background(), db)
		if err != nil {
			db.Close()
			t.Fatal(err)
		}
		return intenttest.Backend{Intents: intents, Records: db, Close: db.Close}
	})
}
