package interceptor_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/interceptor"
)

func FuzzValidateKey(f *testing.F) {
	for _, seed := range []string{"order-1001", "", " ", "~", "tab\t", "café", "\x7f", string(make([]byte, 256)), `"order-1001"`, `a"b`, " order-1001", "order 1001 "} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		want := len(key) >= 1 && len(key) <= interceptor.MaxKeyLength &&
			key[0] != '"' && key[0] != ' ' && key[len(key)-1] != ' '
		for i := 0; i < len(key); i++ {
			want = want && key[i] >= 0x20 && key[i] <= 0x7e
		}
		if err := interceptor.ValidateKey(key); (err == nil) != want {
			t.Errorf("ValidateKey(%q) = %v, want ok %t", key, err, want)
		}
	})
}

// FuzzRecordUnmarshal feeds stored bytes, as a damaged or hostile file might
// hold them, to the decoder: it must never panic, and what it accepts must
// encode back to a record that decodes the same.
func FuzzRecordUnmarshal(f *testing.F) {
	resp, _ := anypb.New(wrapperspb.String("hello"))
	r := &interceptor.Record{
		Fingerprint: sha256.Sum256([]byte("x")), State: interceptor.StateCompleted, Attempt: 2,
		Owner: "pid 1", Expiry: time.Unix(1e9, 5),
		Result: &interceptor.Result{Response: resp, Header: metadata.Pairs("a", "b")},
	}
	b, _ := r.MarshalBinary()
	f.Add(b)
	r.State, r.Result, r.LeaseExpiry = interceptor.StateInFlight, nil, time.Unix(1e9, 0)
	b, _ = r.MarshalBinary()
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var r interceptor.Record
		if r.UnmarshalBinary(b) != nil {
			return
		}
		again, err := r.MarshalBinary()
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		var r2 interceptor.Record
		if err := r2.UnmarshalBinary(again); err != nil {
			t.Fatalf("re-encoded record does not decode: %v", err)
		}
		third, _ := r2.MarshalBinary()
		if string(third) != string(again) {
			t.Errorf("encoding is not stable: %x then %x", again, third)
		}
	})
}
