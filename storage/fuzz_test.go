package storage_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/storage"
)

// FuzzRecordUnmarshal feeds stored bytes, as a damaged or hostile file might
// hold them, to the decoder: it must never panic, and what it accepts must
// encode back to a record that decodes the same.
func FuzzRecordUnmarshal(f *testing.F) {
	resp, _ := anypb.New(wrapperspb.String("hello"))
	r := &storage.Record{
		Fingerprint: sha256.Sum256([]byte("x")), State: storage.StateCompleted, Attempt: 2,
		Owner: "pid 1", Expiry: time.Unix(1e9, 5),
		Result: &storage.Result{Response: resp, Header: metadata.Pairs("a", "b")},
	}
	b, _ := r.MarshalBinary()
	f.Add(b)
	r.State, r.Result, r.LeaseExpiry = storage.StateInFlight, nil, time.Unix(1e9, 0)
	b, _ = r.MarshalBinary()
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r storage.Record
		if r.UnmarshalBinary(b) != nil {
			return
		}
		again, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		var r2 storage.Record
		if err := r2.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		third, _ := r2.MarshalBinary()
		if string(third) != string(again) {
			t.Errorf("encoding is not stable: %x then %x", again, third)
		}
	})
}
