package memstore_test

import (
	"sync"
	"testing"

	"github.com/paymentsd/paymentsd/memstore"
	"github.com/paymentsd/paymentsd/once/oncetest"
	"github.com/paymentsd/paymentsd/storage/storagetest"
)

func TestConformance(t *testing.T) {
	storagetest.RunTests(t, func(t *testing.T, dir string) storagetest.Store { return openMyStore(t, dir) })
}

func TestOnce(t *testing.T) { oncetest.RunTests(t, opener()) }

// openMyStore is the opener of TestConformance, whose code is that of
// docs/embedding.md, section "Another store": a test at the repository's
// root holds the two alike.
var openMyStore = opener()

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
