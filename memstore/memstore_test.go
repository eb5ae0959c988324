package memstore_test

import (
	"sync"
	"testing"

	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/once/oncetest"
	"github.com/paymentsd/paymentsd/storage/storagetest"
)

func TestConformance(t *testing.T) { storagetest.RunTests(t, opener()) }

func TestOnce(t *testing.T) { oncetest.RunTests(t, opener()) }

// opener opens memory stores. The suites reopen a dir to check
// persistence; in memory, a dir maps to the last store opened for it.
func opener() storagetest.Opener {
	var mu sync.Mutex
	stores := map[string]*memstore.Store{}
	return func(t *testing.T, dir string) storagetest.Store {
		mu.Lock()
		defer mu.Unlock()
		s, ok := stores[dir]
		if ok {
			s = s.Reopen()
		} else {
			s = memstore.New()
		}
		stores[dir] = s
		return s
	}
}
