package boltstore

import (
	"testing"
	"time"

	"github.com/paymentsd/paymentsd/interceptor/storage"
)

// A read that ends after its key was forgotten (its record replaced or
// swept meanwhile) keeps nothing: what it read may be gone.
func TestDecoded_ReadEndingAfterAForget_KeepsNothing(t *testing.T) {
	var d decoded
	key := []byte("k")
	now := time.Now()
	done := &storage.Record{State: storage.StateCompleted, Expiry: now.Add(time.Hour)}

	gen := d.generation(key) // a read begins
	d.forget(key)            // the record it reads is replaced
	d.put(key, []byte("old"), done, gen)
	if d.unexpired(key, now) != nil {
		t.Fatal("kept what a read made before the forget found")
	}

	d.put(key, []byte("new"), done, d.generation(key))
	if d.unexpired(key, now) == nil {
		t.Fatal("a read after the forget kept nothing")
	}
	inFlight := &storage.Record{State: storage.StateInFlight, Expiry: now.Add(time.Hour)}
	d.put(key, []byte("claim"), inFlight, d.generation(key))
	if d.unexpired(key, now) != nil {
		t.Fatal("a read that found a claim in flight left the completed record kept")
	}
	if n := d.n.Load(); n != 0 {
		t.Errorf("%d records counted kept, want 0", n)
	}
}
