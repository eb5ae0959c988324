package boltstore

import (
	"bytes"
	"crypto/sha256"
	"testing"
	"time"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/paymentsd/paymentsd/storage"
)

// FuzzUnmarshalRecord feeds a record's stored payload, as a damaged file
// might hold it, to the decoder of both encodings: it never panics, and a
// record it accepts encodes, compactly, to bytes that decode to a record
// that encodes to the same bytes again; unless it holds a time beyond the
// compact encoding's years, which only the encoder refuses.
func FuzzUnmarshalRecord(f *testing.F) {
	resp, _ := anypb.New(wrapperspb.String("hello"))
	claimed := time.Unix(1_700_000_000, 123)
	for _, r := range []*storage.Record{
		{Fingerprint: sha256.Sum256([]byte("a")), Scheme: "sha256-deterministic-v1", State: storage.StateInFlight, Attempt: 1,
			Owner: "pid 1 0123456789abcdef", ClaimTime: claimed, LeaseExpiry: claimed.Add(30 * time.Second), Expiry: claimed.Add(24 * time.Hour)},
		{Fingerprint: sha256.Sum256([]byte("b")), Scheme: "other; excluding x", State: storage.StateCompleted, Attempt: 3,
			Durability: storage.Transactional, Owner: "pid 2", ClaimTime: claimed, Expiry: claimed.Add(time.Hour),
			Result: &storage.Result{Response: resp, Header: map[string][]string{"a": {"b"}}, Trailer: map[string][]string{"t-bin": {"\x00"}}}},
		{Fingerprint: sha256.Sum256([]byte("c")), State: storage.StateCompleted, Attempt: 1, Expiry: claimed,
			Result: &storage.Result{Status: &spb.Status{Code: 9, Message: "refused"}}},
	} {
		compact, err := marshalRecord(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(compact)
		earlier, err := r.MarshalBinary() // as an earlier build stored it
		if err != nil {
			f.Fatal(err)
		}
		f.Add(earlier)
	}
	f.Add([]byte{compactMark})
	f.Add([]byte{})
	key := []byte("\x05alice order-1")
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := unmarshalRecord(key, b)
		if err != nil {
			return
		}
		once, err := marshalRecord(r)
		if err != nil {
			// An earlier build's protobuf times reach years the compact
			// encoding cannot hold. Such a record reads, and its next
			// write fails rather than change a time; nothing else may.
			if !inNanos(r.ClaimTime) && !r.ClaimTime.IsZero() || !inNanos(r.LeaseExpiry) && !r.LeaseExpiry.IsZero() || !inNanos(r.Expiry) {
				return
			}
			t.Fatalf("%x decoded to a record the encoder refuses: %v", b, err)
		}
		r2, err := unmarshalRecord(key, once)
		if err != nil {
			t.Fatalf("%x decoded, but its encoding %x does not: %v", b, once, err)
		}
		twice, err := marshalRecord(r2)
		if err != nil || !bytes.Equal(once, twice) {
			t.Fatalf("%x: encoded %x, then %x (%v)", b, once, twice, err)
		}
	})
}
