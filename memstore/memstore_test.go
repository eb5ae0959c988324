package memstore_test

import (
	"sync"
	"testing"

	"github.com/paymentsd/paymentsd/interceptor/storage/storagetest"
	"github.com/paymentsd/paymentsd/memstore"
)

func TestConformance(t *testing.T) {
	// The suite reopens a dir to check persistence; in memory, a dir maps
	// to the last store opened for it.
	var mu sync.Mutex
	stores := map[string]*memstore.Store{}
	storagetest.RunTests(t, func(t *testing.T, dir string) storagetest.Store {
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
	})
}
